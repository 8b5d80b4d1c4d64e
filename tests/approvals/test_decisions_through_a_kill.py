"""Decisions through a crash (issue 28): the server is killed with -9 while
officers' approvals and standing-policy approvals are in flight, restarted, and
every call that got no answer is sent again with its Idempotency-Key, as a
client would. Counted from the audit log: no approved request is applied twice,
none is applied without a decision, and every decision the server answered is
kept.

And every lost call completes on its retries: a key the killed process had
reserved is taken over once it is ZEROLOCK_IDEMPOTENCY_TAKEOVER_SECONDS old
(1 s here) and runs, or, when its write went in before the kill, answers 409
IDEMPOTENCY_ANSWER_LOST. Approval requests are not version-checked, so a
re-run of one that had applied would show as a second request on its shard:
each shard has exactly one."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from access.identity import Actor
from access.services import api_key_create
from approvals.models import Approval
from audit.models import AuditEntry
from shards.models import Shard
from shards.services import shard_create
from tests.conftest import server_env, start_server, stop_server

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

PER_KIND = 30  # requests a policy decides, and requests officers approve


def answer(
    url: str, key: str, agent: str, path: str, body: dict[str, Any], idem: str
) -> tuple[int, str] | None:
    """The status and error code the server answered, or None when the call got no answer."""
    headers = {"X-API-Key": key, "X-Agent-Id": agent, "Idempotency-Key": idem}
    try:
        got = httpx.post(f"{url}{path}", json=body, headers=headers, timeout=15)
    except httpx.TransportError:
        return None
    code = got.json().get("error", {}).get("code", "") if got.status_code >= 400 else ""
    return got.status_code, code


def call(url: str, key: str, agent: str, path: str, body: dict[str, Any], idem: str) -> int | None:
    """The status the server answered, or None when the call got no answer."""
    got = answer(url, key, agent, path, body, idem)
    return None if got is None else got[0]


def test_a_kill_9_mid_decisions_applies_no_request_twice_and_none_without_a_decision():
    _, payer = api_key_create(
        name="payer",
        permissions=["shard:read", "shard:write", "approval:request"],
        agent_ids=["payer"],
    )
    _, officer = api_key_create(
        name="officer",
        permissions=["shard:read", "approval:decide", "approval:policy"],
        agent_ids=["officer"],
    )
    for kind in ("auto", "man"):
        for n in range(PER_KIND):
            shard_create(
                actor=Actor("treasurer"),
                shard_id=f"{kind}-{n}",
                shard_type="decision",
                initial_value={"amount": 0},
                reversible=False,
            )
    proc, url = start_server(server_env())
    try:
        policy = httpx.post(
            f"{url}/api/approval-policies",
            json={
                "shard_prefix": "auto-",
                "when": [{"path": ["amount"], "op": "<", "value": 1000}],
                "effect": "approve",
                "ttl_seconds": 3600,
                "reason": "small amounts",
            },
            headers={"X-API-Key": officer, "X-Agent-Id": "officer"},
        )
        assert policy.status_code == 201, policy.text
        manual = []
        for n in range(PER_KIND):
            asked = httpx.post(
                f"{url}/api/approvals/request",
                json={
                    "shard_id": f"man-{n}",
                    "proposed_value": {"amount": 5000 + n},
                    "expected_version": 1,
                    "description": f"manual {n}",
                },
                headers={"X-API-Key": payer, "X-Agent-Id": "payer"},
            )
            assert asked.status_code == 201, asked.text
            manual.append(asked.json()["id"])

        # Each call: (key, agent, path, body, Idempotency-Key).
        calls: list[tuple[str, str, str, dict[str, Any], str]] = []
        for n in range(PER_KIND):
            calls.append(
                (
                    payer,
                    "payer",
                    "/api/approvals/request",
                    {
                        "shard_id": f"auto-{n}",
                        "proposed_value": {"amount": n},
                        "expected_version": 1,
                        "description": f"auto {n}",
                    },
                    f"auto-{n}",
                )
            )
            calls.append(
                (officer, "officer", f"/api/approvals/{manual[n]}/approve", {}, f"dec-{n}")
            )
        answers: dict[str, int | None] = {}
        first_answer = threading.Event()

        def send(one: tuple[str, str, str, dict[str, Any], str]) -> None:
            key, agent, path, body, idem = one
            answers[idem] = call(url, key, agent, path, body, idem)
            if answers[idem] is not None:
                first_answer.set()

        with ThreadPoolExecutor(max_workers=12) as pool:
            futures = [pool.submit(send, one) for one in calls]
            assert first_answer.wait(30), "no call was answered before the kill"
            time.sleep(0.15)  # a few more land; the rest are in flight or queued
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
            for future in futures:
                future.result()
    finally:
        if proc.poll() is None:
            stop_server(proc)

    answered = {idem: status for idem, status in answers.items() if status is not None}
    lost = [one for one in calls if answers.get(one[4]) is None or answers[one[4]] >= 500]
    assert answered and lost, (len(answered), len(lost))  # the kill fell mid-storm
    assert all(status in (200, 201) for status in answered.values() if status < 500), answered

    proc, url = start_server(server_env() | {"ZEROLOCK_IDEMPOTENCY_TAKEOVER_SECONDS": "1"})
    retried: Counter[tuple[int, str]] = Counter()
    try:
        for key, agent, path, body, idem in lost:
            deadline = time.monotonic() + 20
            got = answer(url, key, agent, path, body, idem)
            while got is None or got == (409, "IDEMPOTENCY_IN_PROGRESS"):
                # Reserved by the killed process: taken over once 1 s old.
                assert time.monotonic() < deadline, (idem, got)
                time.sleep(0.2)
                got = answer(url, key, agent, path, body, idem)
            # The write now (or its stored answer), or: it went in before the
            # kill and its answer was lost.
            assert got in ((200, ""), (201, ""), (409, "IDEMPOTENCY_ANSWER_LOST")), (idem, got)
            retried[got] += 1
    finally:
        stop_server(proc)
    print(f"answered before the kill: {len(answered)}, retried after: {dict(retried)}")

    committed = Counter(
        e.details["approval_id"] for e in AuditEntry.objects.filter(action="approval.committed")
    )
    approved = {
        e.details["approval_id"]: e.id
        for e in AuditEntry.objects.filter(action="approval.approved")
    }
    commits = AuditEntry.objects.filter(action="shard.commit", shard_id__regex=r"^(auto|man)-")
    assert commits.count() > 0
    # None applied twice...
    assert not [a for a, n in committed.items() if n > 1], committed
    assert commits.count() == len(committed)
    # ...none applied without a decision recorded before it...
    for entry in commits:
        approval_id = entry.details.get("approval_id")
        assert approval_id in approved and approved[approval_id] < entry.id, entry.details
    # ...and every shard written at most once, by its one committed approval.
    for kind in ("auto", "man"):
        for n in range(PER_KIND):
            shard = Shard.objects.get(pk=f"{kind}-{n}")
            applied = Approval.objects.filter(shard_id=shard.pk, status="committed").count()
            assert (shard.version, applied) in ((1, 0), (2, 1)), (shard.pk, shard.version, applied)
    # What the server answered before the kill was kept: an officer's 200 is a
    # commit, and a policy request's 201 was decided and applied in its own
    # transaction.
    for n, approval_id in enumerate(manual):
        if answered.get(f"dec-{n}") == 200:
            assert Approval.objects.get(pk=approval_id).status == "committed"
    for n in range(PER_KIND):
        if answered.get(f"auto-{n}") == 201:
            assert Shard.objects.get(pk=f"auto-{n}").version == 2
    # Every call completed, once: each policy request exists exactly once and was
    # applied, and every officer's approval is committed.
    for n in range(PER_KIND):
        assert Approval.objects.filter(shard_id=f"auto-{n}").count() == 1, n
        assert Shard.objects.get(pk=f"auto-{n}").version == 2, n
    assert set(Approval.objects.filter(pk__in=manual).values_list("status", flat=True)) == {
        "committed"
    }
