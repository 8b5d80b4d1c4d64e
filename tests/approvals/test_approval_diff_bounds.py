"""Approval diffs cost a bounded amount, once: issue 16, finding 9.

A request on a 300,000-item array took 78 s and every later read recomputed the
diff; a value 400 levels deep made GET /api/approvals answer 500 for everyone;
the request answered 500 after storing the approval, so a retry duplicated it."""

from __future__ import annotations

import copy
import random
import time
from typing import Any

import httpx
import jsonpatch
import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

import approvals.diffs
from access.identity import Actor
from approvals.diffview import MAX_COMPARED, line_diff, shown
from approvals.models import Approval
from approvals.roles import groups_ensure
from approvals.services import approval_request
from audit.chain import AuditWriter
from audit.models import AuditEntry
from common.boundeddiff import TOO_DEEP, TOO_LARGE, TOO_SLOW, DiffLimits, bounded_diff
from shards.models import Shard

N = 300_000


def nested_lists(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


@pytest.fixture
def executor(make_key, client_for):
    key = make_key("shard:read", "shard:write", "shard:create", "approval:request")
    return client_for(key, agent="executor")


@pytest.fixture
def reviewer(make_key, client_for):
    return client_for(make_key("shard:read", "approval:decide"), agent="reviewer")


@pytest.fixture
def diffs_computed(monkeypatch) -> list[int]:
    """Counts real diff computations (the function still runs)."""
    calls: list[int] = []
    real = approvals.diffs.bounded_diff

    def counting(old: Any, new: Any, limits: DiffLimits):
        calls.append(1)
        return real(old, new, limits)

    monkeypatch.setattr(approvals.diffs, "bounded_diff", counting)
    return calls


def create(client, shard_id: str, value: Any) -> None:
    body = {"id": shard_id, "type": "decision", "initial_value": value}
    assert client.post("/api/shards", body, format="json").status_code == 201


def request(client, shard_id: str, value: Any, **extra):
    body = {
        "shard_id": shard_id,
        "proposed_value": value,
        "expected_version": 1,
        "description": "bulk change",
        **extra,
    }
    return client.post("/api/approvals/request", body, format="json")


def risk_officer_client() -> Client:
    user = User.objects.create_user("rita", password="correct horse battery")
    groups_ensure()
    user.groups.add(Group.objects.get(name="Risk officers"))
    client = Client()
    client.force_login(user)
    return client


# --- size and time ----------------------------------------------------------


@pytest.mark.django_db
def test_a_request_rewriting_300000_items_answers_promptly_with_a_stored_too_large_marker(
    executor, reviewer, diffs_computed
):
    create(executor, "ledger", [0] * N)
    started = time.monotonic()
    response = request(executor, "ledger", [1] * N)
    elapsed = time.monotonic() - started
    assert response.status_code == 201
    # jsonpatch took minutes on this one (quadratic); the cap makes it about a second.
    assert elapsed < 30
    answer = response.json()
    assert (answer["diff"], answer["diff_truncated"], answer["diff_omitted"]) == (
        None,
        True,
        "too_large",
    )
    stored = Approval.objects.get(pk=answer["id"])
    assert (stored.diff, stored.diff_omitted) == (None, TOO_LARGE)
    assert len(diffs_computed) == 1
    # Later reads reuse what was stored: the list, the detail, the console.
    for _ in range(2):
        detail = reviewer.get(f"/api/approvals/{answer['id']}").json()
        assert (detail["diff_truncated"], detail["diff_omitted"]) == (True, "too_large")
        assert reviewer.get("/api/approvals").status_code == 200
    html = risk_officer_client().get(f"/console/approvals/{answer['id']}").content.decode()
    assert "Diff too large to show" in html and "not shown here" in html
    assert len(diffs_computed) == 1


@pytest.mark.django_db
def test_one_item_appended_to_300000_is_a_one_op_patch(executor, diffs_computed):
    create(executor, "ledger", list(range(N // 2)))
    answer = request(executor, "ledger", [*range(N // 2), "new"]).json()
    assert answer["diff"] == [{"op": "add", "path": f"/{N // 2}", "value": "new"}]
    assert answer["diff_truncated"] is False and answer["diff_omitted"] is None


@pytest.mark.django_db
def test_a_diff_over_its_time_budget_says_too_slow(settings):
    settings.ZEROLOCK_APPROVAL_DIFF_MAX_MS = 0
    old = [{"i": i} for i in range(20_000)]
    new = [{"i": -i} for i in range(20_000)]
    assert approvals.diffs.value_diff(old, new).omitted == TOO_SLOW


@pytest.mark.django_db
def test_a_drifted_detail_is_diffed_against_the_current_value_once_per_version(
    executor, reviewer, diffs_computed
):
    create(executor, "budget", {"a": 1, "b": 2})
    approval_id = request(executor, "budget", {"a": 1, "b": 3}).json()["id"]
    assert len(diffs_computed) == 1
    body = {"expected_version": 1, "new_value": {"a": 5, "b": 2}}
    assert executor.post("/api/shards/budget/commit", body, format="json").status_code == 200
    for _ in range(3):
        detail = reviewer.get(f"/api/approvals/{approval_id}").json()
        assert (detail["stale"], detail["diff_version"], detail["current_version"]) == (True, 2, 2)
        assert sorted(detail["diff"], key=lambda op: op["path"]) == [
            {"op": "replace", "path": "/a", "value": 1},
            {"op": "replace", "path": "/b", "value": 3},
        ]
    assert len(diffs_computed) == 2  # once at request, once for version 2
    listed = reviewer.get("/api/approvals").json()["results"][0]
    assert listed["diff"] == [{"op": "replace", "path": "/b", "value": 3}]  # as requested
    assert len(diffs_computed) == 2


# --- depth ------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("depth", [400, 500])
def test_a_proposed_value_hundreds_of_levels_deep_is_refused_and_stores_nothing(
    executor, reviewer, depth
):
    create(executor, "tree", [])
    Shard.objects.filter(pk="tree").update(value=nested_lists(depth, leaf=0))
    response = request(executor, "tree", nested_lists(depth))
    # Refused here, or at parse time by a JSON depth limit: either way a 400.
    assert response.status_code == 400
    assert Approval.objects.count() == 0
    assert AuditEntry.objects.filter(action="approval.requested").count() == 0
    assert reviewer.get("/api/approvals").status_code == 200


@pytest.mark.django_db
def test_a_shard_value_400_levels_deep_leaves_lists_details_and_the_console_answering(
    executor, reviewer
):
    create(executor, "tree", [])
    # Stored before any depth limit existed (the API may refuse it at parse time now).
    Shard.objects.filter(pk="tree").update(value=nested_lists(400))
    response = request(executor, "tree", {"flat": True})
    assert response.status_code == 201
    answer = response.json()
    assert (answer["diff"], answer["diff_omitted"]) == (None, TOO_DEEP)
    assert reviewer.get("/api/approvals").status_code == 200
    assert reviewer.get(f"/api/approvals/{answer['id']}").status_code == 200
    page = risk_officer_client().get(f"/console/approvals/{answer['id']}")
    assert page.status_code == 200
    assert "nested more than 100 levels deep" in page.content.decode()


@pytest.mark.django_db(transaction=True)
def test_the_live_server_refuses_a_500_deep_request_and_keeps_listing(make_key, live_server_url):
    """Before the fix (on Daphne, the server then): the request answered 500
    after storing the approval, and every GET /api/approvals answered 500 from
    then on."""
    headers = {"X-API-Key": make_key("admin"), "X-Agent-Id": "executor"}
    with httpx.Client(base_url=live_server_url, headers=headers, timeout=60) as client:
        client.post("/api/shards", json={"id": "tree", "type": "decision", "initial_value": []})
        # Stored before any depth limit existed.
        Shard.objects.filter(pk="tree").update(value=nested_lists(500, leaf=0))
        body = {"shard_id": "tree", "expected_version": 1, "description": "flatten"}
        deep = client.post(
            "/api/approvals/request", json=body | {"proposed_value": nested_lists(500)}
        )
        assert deep.status_code == 400
        assert Approval.objects.count() == 0
        flat = client.post("/api/approvals/request", json=body | {"proposed_value": 1})
        assert flat.status_code == 201
        assert flat.json()["diff_omitted"] == "too_deep"
        listed = client.get("/api/approvals")
        assert listed.status_code == 200
        assert [a["id"] for a in listed.json()["results"]] == [flat.json()["id"]]
        assert client.get(f"/api/approvals/{flat.json()['id']}").status_code == 200


# --- atomic request -----------------------------------------------------------


@pytest.mark.django_db
def test_a_request_that_fails_while_storing_leaves_no_approval(executor, monkeypatch):
    """Whatever fails inside the store (here the audit append, made to crash)
    takes the approval with it, so a retry cannot duplicate it."""
    create(executor, "budget", {"a": 1})
    real = AuditWriter.append

    def crashing(self, **entry):
        if entry["action"] == "approval.requested":
            raise RuntimeError("disk on fire")
        return real(self, **entry)

    monkeypatch.setattr(AuditWriter, "append", crashing)
    with pytest.raises(RuntimeError):
        approval_request(
            actor=Actor("executor"),
            shard_id="budget",
            proposed_value={"a": 2},
            expected_version=1,
            description="x",
        )
    assert Approval.objects.count() == 0


# --- the console's line diff ----------------------------------------------------


def test_a_line_diff_with_changes_everywhere_is_omitted_rather_than_computed():
    rng = random.Random(16)
    old = [{"i": i, "v": rng.randint(0, 3)} for i in range(3000)]
    new = [{"i": i, "v": rng.randint(0, 3)} for i in range(3000)]
    assert len(shown(old).text.splitlines()) ** 2 > MAX_COMPARED
    [row] = line_diff(old, new)
    assert row.kind == "omitted" and "Diff too large to show" in row.text


def test_a_small_change_in_a_large_value_still_gets_a_line_diff():
    old = [{"i": i} for i in range(3000)]
    new = [*old[:1500], {"i": "changed"}, *old[1501:]]
    kinds = [row.kind for row in line_diff(old, new)]
    assert (kinds.count("del"), kinds.count("add"), kinds.count("fold")) == (1, 1, 2)


# --- the bounded diff is a correct RFC 6902 patch -------------------------------


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 4 or roll < 0.4:
        return rng.choice([0, 1, True, False, None, "a", "b/c", "~d", 1.5])
    if roll < 0.7:
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 5))]
    return {rng.choice("ab/~"): _random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def _mutated(rng: random.Random, value: Any, depth: int = 0) -> Any:
    if rng.random() < 0.2:
        return _random_value(rng, depth)
    if isinstance(value, list):
        value = list(value)
        for _ in range(rng.randint(0, 3)):
            roll = rng.random()
            if roll < 0.3 and value:
                value.pop(rng.randrange(len(value)))
            elif roll < 0.6:
                value.insert(rng.randint(0, len(value)), _random_value(rng, depth + 1))
            elif value:
                i = rng.randrange(len(value))
                value[i] = _mutated(rng, value[i], depth + 1)
        return value
    if isinstance(value, dict):
        value = {
            k: _mutated(rng, v, depth + 1) if rng.random() < 0.3 else v for k, v in value.items()
        }
        if rng.random() < 0.3:
            value[rng.choice("abcde/~")] = _random_value(rng, depth + 1)
        return value
    return value


def test_the_bounded_patch_turns_the_old_value_into_the_new_one():
    rng = random.Random(6902)
    unbounded = DiffLimits(max_bytes=10**9, max_depth=100, max_seconds=60)
    for _ in range(3000):
        old = _random_value(rng)
        new = _mutated(rng, old)
        patch = bounded_diff(old, new, unbounded).patch
        applied = jsonpatch.apply_patch(copy.deepcopy(old), patch)
        # JSON equality: True is not 1 (Python's == would say it is).
        assert _same_types(applied, new), (old, new, patch)
        if _same_types(old, new):
            assert patch == []


def _same_types(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same_types(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same_types(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def test_true_replacing_1_is_a_change():
    limits = DiffLimits(max_bytes=1000, max_depth=10, max_seconds=1)
    patch = bounded_diff([1, {"x": [1]}], [True, {"x": [True]}], limits).patch
    assert sorted(patch, key=lambda op: op["path"]) == [
        {"op": "replace", "path": "/0", "value": True},
        {"op": "replace", "path": "/1/x/0", "value": True},
    ]
