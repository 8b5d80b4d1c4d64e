"""Path reservations through the SDK against a live server: typed reservations,
the conflict error's list of holders, the check (other agents' exclusive ones
only, in batches of the server's limit), keep-alive, release and not-found,
async and sync."""

from __future__ import annotations

import asyncio
from datetime import datetime

import pytest

from access.services import api_key_create
from zerolock_sdk import (
    ConflictError,
    NotFoundError,
    Reservation,
    ReservationConflict,
    ReservationConflictError,
    SyncZeroLockClient,
    ZeroLockClient,
)

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]
AGENT = ["shard:read", "shard:write"]


def a_key(name: str) -> str:
    return api_key_create(name=name, permissions=AGENT)[1]


def test_a_reservation_comes_back_typed_with_its_holder_key_and_expiry(live_server_url):
    key = a_key("alice's key")

    async def scenario() -> None:
        async with ZeroLockClient(live_server_url, agent_id="alice", api_key=key) as alice:
            made = await alice.reserve(["src/**/*.py"], ttl_seconds=600, reason="parser rewrite")
            assert isinstance(made, Reservation) and made.id.startswith("rsv_")
            assert (made.patterns, made.exclusive, made.holder) == (["src/**/*.py"], True, "alice")
            assert (made.key_name, made.reason, made.ttl_seconds) == (
                "alice's key",
                "parser rewrite",
                600,
            )
            assert made.key_prefix and made.expires_at and made.created_at
            assert made.lease_id is None and made.raw["reservation_id"] == made.id
            shared = await alice.reserve("docs/*.md", exclusive=False, ttl_seconds=60)
            assert shared.patterns == ["docs/*.md"]  # a lone string is one pattern
            assert shared.exclusive is False and shared.reason == ""
            assert shared.fence > made.fence

    asyncio.run(scenario())


def test_listing_filters_by_holder_and_by_a_path_the_patterns_match(live_server_url):
    alice_key, bob_key = a_key("alice's key"), a_key("bob's key")

    async def scenario() -> None:
        async with (
            ZeroLockClient(live_server_url, agent_id="alice", api_key=alice_key) as alice,
            ZeroLockClient(live_server_url, agent_id="bob", api_key=bob_key) as bob,
        ):
            mine = await alice.reserve(["src/**"], ttl_seconds=600)
            theirs = await bob.reserve(["docs/**"], ttl_seconds=600)
            assert [r.id for r in await alice.list_reservations()] == [mine.id, theirs.id]
            assert [r.id for r in await alice.list_reservations(holder="bob")] == [theirs.id]
            listed = await bob.list_reservations(path="src/app/main.py")
            assert [(r.id, r.holder, r.key_name) for r in listed] == [
                (mine.id, "alice", "alice's key")
            ]
            assert await bob.list_reservations(path="tests/x.py") == []

    asyncio.run(scenario())


def test_an_overlapping_reservation_raises_a_conflict_error_naming_the_holder(live_server_url):
    alice_key, bob_key = a_key("alice's key"), a_key("bob's key")

    async def scenario() -> None:
        async with (
            ZeroLockClient(live_server_url, agent_id="alice", api_key=alice_key) as alice,
            ZeroLockClient(live_server_url, agent_id="bob", api_key=bob_key) as bob,
        ):
            held = await alice.reserve(["src/**/*.py"], ttl_seconds=600, reason="refactor")
            with pytest.raises(ReservationConflictError) as refused:
                await bob.reserve(["lib/**", "src/app/*.py"], ttl_seconds=600)
            error = refused.value
            assert isinstance(error, ConflictError)
            assert (error.status, error.code) == (409, "RESERVATION_CONFLICT")
            [conflict] = error.conflicts
            assert conflict["reservation_id"] == held.id and conflict["holder"] == "alice"
            assert conflict["key"]["name"] == "alice's key" and conflict["reason"] == "refactor"
            assert (conflict["pattern"], conflict["overlaps"]) == ("src/app/*.py", "src/**/*.py")
            assert conflict["example_path"].startswith("src/app/")
            # Shared beside shared stands; shared against an exclusive does not.
            await alice.reserve(["docs/**"], exclusive=False, ttl_seconds=600)
            await bob.reserve(["docs/*.md"], exclusive=False, ttl_seconds=600)
            with pytest.raises(ReservationConflictError):
                await bob.reserve(["src/x.py"], exclusive=False, ttl_seconds=600)

    asyncio.run(scenario())


def test_the_check_reports_only_other_agents_exclusive_reservations(live_server_url):
    alice_key, bob_key = a_key("alice's key"), a_key("bob's key")

    async def scenario() -> None:
        async with (
            ZeroLockClient(live_server_url, agent_id="alice", api_key=alice_key) as alice,
            ZeroLockClient(live_server_url, agent_id="bob", api_key=bob_key) as bob,
            # The same agent id under another key is another agent.
            ZeroLockClient(live_server_url, agent_id="alice", api_key=bob_key) as impostor,
        ):
            held = await alice.reserve(["src/**"], ttl_seconds=600, reason="moving files")
            await alice.reserve(["docs/**"], exclusive=False, ttl_seconds=600)
            paths = ["src/app.py", "docs/readme.md", "README.md", "src/app.py"]
            conflicts = await bob.check_reservations(paths)
            assert all(isinstance(c, ReservationConflict) for c in conflicts)
            assert [(c.path, c.reservation.id) for c in conflicts] == [("src/app.py", held.id)]
            assert conflicts[0].reservation.reason == "moving files"
            assert conflicts[0].reservation.key_name == "alice's key"
            assert await alice.check_reservations(paths) == []  # its own never count
            assert [c.path for c in await impostor.check_reservations(paths)] == ["src/app.py"]

    asyncio.run(scenario())


def test_the_check_sends_paths_in_batches_of_the_servers_limit_and_nothing_for_none(
    live_server_url,
):
    alice_key, bob_key = a_key("alice's key"), a_key("bob's key")

    async def scenario() -> None:
        async with (
            ZeroLockClient(live_server_url, agent_id="alice", api_key=alice_key) as alice,
            ZeroLockClient(live_server_url, agent_id="bob", api_key=bob_key) as bob,
        ):
            await alice.reserve(["vendor/last/**"], ttl_seconds=600)
            paths = [f"gen/file{n}.txt" for n in range(2400)] + ["vendor/last/lib.c"]
            before = bob.requests_sent
            conflicts = await bob.check_reservations(paths)
            assert bob.requests_sent - before == 3  # 1000 + 1000 + 401
            assert [c.path for c in conflicts] == ["vendor/last/lib.c"]
            before = bob.requests_sent
            assert await bob.check_reservations([]) == []
            assert bob.requests_sent == before

    asyncio.run(scenario())


def test_keepalive_extends_and_release_ends_then_both_say_not_found(live_server_url):
    key = a_key("alice's key")

    async def scenario() -> None:
        async with ZeroLockClient(live_server_url, agent_id="alice", api_key=key) as alice:
            made = await alice.reserve(["src/**"], ttl_seconds=60)
            assert made.expires_at is not None
            await asyncio.sleep(0.05)
            kept = await alice.keepalive_reservation(made.id)
            assert kept.id == made.id and kept.expires_at is not None
            assert datetime.fromisoformat(kept.expires_at) > datetime.fromisoformat(made.expires_at)
            assert await alice.release_reservation(made.id) is None
            assert await alice.list_reservations() == []
            with pytest.raises(NotFoundError) as gone:
                await alice.release_reservation(made.id)
            assert (gone.value.status, gone.value.code) == (404, "RESERVATION_NOT_FOUND")
            with pytest.raises(NotFoundError) as unknown:
                await alice.keepalive_reservation("rsv_nosuchreservation")
            assert unknown.value.code == "RESERVATION_NOT_FOUND"

    asyncio.run(scenario())


def test_a_reservation_bound_to_a_lease_has_no_expiry_and_ends_with_it(live_server_url):
    key = a_key("alice's key")

    async def scenario() -> None:
        async with ZeroLockClient(live_server_url, agent_id="alice", api_key=key) as alice:
            lease = await alice.grant_lease(60)
            made = await alice.reserve(["src/**"], lease_id=lease.id)
            assert (made.lease_id, made.ttl_seconds, made.expires_at) == (lease.id, None, None)
            await alice.revoke_lease(lease.id)
            assert await alice.list_reservations(holder="alice") == []

    asyncio.run(scenario())


def test_the_sync_twin_reserves_checks_and_releases_with_the_same_errors(live_server_url):
    alice_key, bob_key = a_key("alice's key"), a_key("bob's key")
    with (
        SyncZeroLockClient(live_server_url, agent_id="alice", api_key=alice_key) as alice,
        SyncZeroLockClient(live_server_url, agent_id="bob", api_key=bob_key) as bob,
    ):
        made = alice.reserve(["src/**"], ttl_seconds=600, reason="sync")
        assert isinstance(made, Reservation) and made.holder == "alice"
        with pytest.raises(ReservationConflictError) as refused:
            bob.reserve(["src/main.py"], ttl_seconds=600)
        assert refused.value.conflicts[0]["holder"] == "alice"
        [conflict] = bob.check_reservations(["src/main.py", "docs/a.md"])
        assert (conflict.path, conflict.reservation.id) == ("src/main.py", made.id)
        assert [r.id for r in bob.list_reservations(path="src/main.py")] == [made.id]
        assert alice.keepalive_reservation(made.id).id == made.id
        alice.release_reservation(made.id)
        assert bob.check_reservations(["src/main.py"]) == []
        with pytest.raises(NotFoundError):
            alice.release_reservation(made.id)
