"""Transactions over shards (docs/api.md), in the style of etcd and Concord:
``compare`` predicates decide whether the ``success`` or the ``failure`` operations
run, all inside one write transaction. A task claim is one request that either
wins or reads back who holds the task."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from access.auth import permission_check, scope_check
from access.identity import Actor
from common.errors import ApiError, Invalid, ShardNotFound, UnsupportedDiff
from common.ids import is_shard_id
from common.inputs import is_json_integer
from common.jsonpaths import ABSENT as _ABSENT
from common.jsonpaths import json_equal, json_less, path_delete, path_get, path_put
from common.pages import encode
from metrics import record
from shards import crdt
from shards.additive import additive_apply_locked
from shards.models import CrdtType, Shard, ShardType
from shards.rules import Additions, WriteRules, fence_parse, rules_check
from shards.selectors import shard_current_value
from shards.writer import group_commit, version_write
from shards.writetx import WriteTx

from .leases import lease_bind

MAX_ITEMS = 100  # compares, and operations per branch
MAX_PATH = 32  # keys and indexes in a path
COMPARE_OPS = {"==", "!=", "<", "<=", ">", ">=", "exists", "not_exists"}
WRITE_OPS = {"put", "delete", "append"}


def invalid(message: str, **details: Any) -> ApiError:
    return Invalid(message, **details)


# --- parsing: the whole body is checked before anything is read or written -----


@dataclass(frozen=True)
class Compare:
    shard_id: str
    op: str
    path: tuple[Any, ...] = ()
    value: Any = None
    version: int | None = None


@dataclass(frozen=True)
class Op:
    op: str
    shard_id: str
    path: tuple[Any, ...] = ()
    value: Any = None
    items: tuple[Any, ...] = ()
    lease_id: str = ""


@dataclass(frozen=True)
class Txn:
    compare: list[Compare]
    success: list[Op]
    failure: list[Op]
    fence: int | None = None

    @property
    def shard_ids(self) -> set[str]:
        return {c.shard_id for c in self.compare} | {
            o.shard_id for o in (*self.success, *self.failure)
        }

    def written(self, ops: list[Op]) -> set[str]:
        return {o.shard_id for o in ops if o.op in WRITE_OPS}


def _shard_id(raw: Any, where: str) -> str:
    if not is_shard_id(raw):
        raise invalid(f"{where}: shard_id must be a shard id.", at=where)
    return raw


def _path(raw: Any, where: str) -> tuple[Any, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) > MAX_PATH:
        raise invalid(f"{where}: path must be a list of keys (at most {MAX_PATH}).", at=where)
    for part in raw:
        if not (isinstance(part, str) or is_json_integer(part)):
            raise invalid(f"{where}: path parts are strings (object keys) or integers.", at=where)
    return tuple(raw)


def txn_parse(body: Any) -> Txn:
    if not isinstance(body, dict):
        raise invalid("Expected a JSON object with compare, success and failure.")
    unknown = set(body) - {"compare", "success", "failure", "fence"}
    if unknown:
        raise invalid(f"Unknown fields: {sorted(unknown)}.")
    fence = fence_parse(body.get("fence"))
    lists = {}
    for name in ("compare", "success", "failure"):
        raw = body.get(name, [])
        if not isinstance(raw, list) or len(raw) > MAX_ITEMS:
            raise invalid(f"{name} must be a list of at most {MAX_ITEMS} items.")
        lists[name] = raw
    if not lists["success"] and not lists["failure"]:
        raise invalid("A transaction needs at least one success or failure operation.")
    compares = [_parse_compare(c, f"compare[{i}]") for i, c in enumerate(lists["compare"])]
    success = [_parse_op(o, f"success[{i}]") for i, o in enumerate(lists["success"])]
    failure = [_parse_op(o, f"failure[{i}]") for i, o in enumerate(lists["failure"])]
    return Txn(compares, success, failure, fence)


def _parse_compare(raw: Any, where: str) -> Compare:
    if not isinstance(raw, dict):
        raise invalid(f"{where} must be an object.", at=where)
    shard_id = _shard_id(raw.get("shard_id"), where)
    if "version" in raw:
        version = raw["version"]
        if not is_json_integer(version) or version < 0:
            raise invalid(f"{where}: version must be a non-negative integer.", at=where)
        if set(raw) - {"shard_id", "version"}:
            raise invalid(f"{where}: a version check has only shard_id and version.", at=where)
        return Compare(shard_id, "version", version=version)
    op = raw.get("op")
    if not isinstance(op, str) or op not in COMPARE_OPS:
        raise invalid(f"{where}: op must be one of {sorted(COMPARE_OPS)}.", at=where)
    if op not in ("exists", "not_exists") and "value" not in raw:
        raise invalid(f"{where}: {op} needs a value.", at=where)
    return Compare(shard_id, op, _path(raw.get("path"), where), raw.get("value"))


def value_compare_parse(raw: Any, where: str) -> Compare:
    """One compare on a value in hand (an approval policy's ``when``): the same
    operators, paths and checks as a transaction's, for ``compare_holds``; no
    shard id and no version check."""
    if not isinstance(raw, dict) or set(raw) - {"path", "op", "value"}:
        raise invalid(f"{where} must be an object with path, op and value.", at=where)
    return _parse_compare({**raw, "shard_id": "policy"}, where)


def _parse_op(raw: Any, where: str) -> Op:
    if not isinstance(raw, dict):
        raise invalid(f"{where} must be an object.", at=where)
    kind = raw.get("op")
    shard_id = _shard_id(raw.get("shard_id"), where)
    path = _path(raw.get("path"), where)
    lease_id = raw.get("lease_id") or ""
    if not isinstance(lease_id, str):
        raise invalid(f"{where}: lease_id must be a string.", at=where)
    if kind == "get":
        return Op("get", shard_id, path)
    if kind == "put":
        if "value" not in raw:
            raise invalid(f"{where}: put needs a value.", at=where)
        return Op("put", shard_id, path, raw["value"], lease_id=lease_id)
    if kind == "delete":
        if not path:
            raise invalid(f"{where}: delete needs a path (delete a shard with DELETE).", at=where)
        return Op("delete", shard_id, path)
    if kind == "append":
        items = raw.get("items")
        if not isinstance(items, list) or not items:
            raise invalid(f"{where}: append needs a non-empty items list.", at=where)
        return Op("append", shard_id, path, items=tuple(items))
    raise invalid(f"{where}: op must be get, put, delete or append.", at=where)


def compare_holds(compare: Compare, shard: Shard | None, value: Any) -> bool:
    if compare.op == "version":
        return (shard.version if shard else 0) == compare.version
    found = path_get(value, compare.path) if shard else _ABSENT
    if compare.op == "exists":
        return found is not _ABSENT
    if compare.op == "not_exists":
        return found is _ABSENT
    if compare.op == "==":
        return found is not _ABSENT and json_equal(found, compare.value)
    if compare.op == "!=":
        return found is _ABSENT or not json_equal(found, compare.value)
    if found is _ABSENT:
        return False
    # Incomparable kinds (true < 2, [1] < [2]) hold neither way, "<=" and ">=" too.
    if compare.op == "<":
        return json_less(found, compare.value) is True
    if compare.op == ">":
        return json_less(compare.value, found) is True
    smaller, larger = (found, compare.value) if compare.op == "<=" else (compare.value, found)
    ordered = json_less(smaller, larger)
    return ordered is True or (ordered is False and json_equal(found, compare.value))


# --- running -------------------------------------------------------------------------


@dataclass
class _Working:
    shard: Shard
    value: Any
    before: int
    changed: bool = False
    appends: list[Any] = field(default_factory=list)


def txn_apply(*, actor: Actor, key: Any, body: Any) -> dict[str, Any]:
    """Parses and applies one transaction; all of it or nothing."""
    txn = txn_parse(body)
    _permissions_check(key, txn)

    # The write transaction's sweeps end expired leases before the compares read.
    # Group commit: concurrent transactions share one database transaction, each
    # in a savepoint of its own (all of it or nothing, as before).
    def apply(tx: WriteTx) -> tuple[bool, list[dict[str, Any]], dict[str, int], int | None]:
        shards = {s.id: s for s in Shard.objects.filter(pk__in=txn.shard_ids)}
        values = {sid: shard_current_value(s) for sid, s in shards.items()}
        succeeded = all(
            compare_holds(c, shards.get(c.shard_id), values.get(c.shard_id)) for c in txn.compare
        )
        ops = txn.success if succeeded else txn.failure
        working: dict[str, _Working] = {}
        responses = []
        for index, op in enumerate(ops):
            where = f"{'success' if succeeded else 'failure'}[{index}]"
            shard = shards.get(op.shard_id)
            if shard is None:
                raise ShardNotFound(op.shard_id, where=where)
            item = working.setdefault(
                op.shard_id, _Working(shard, copy.deepcopy(values[op.shard_id]), shard.version)
            )
            responses.append(_run_op(op, item, where, actor))
        versions, revision = _write(tx, actor, working, txn.fence)
        return succeeded, responses, versions, revision

    succeeded, responses, versions, revision = group_commit.run(apply)
    if succeeded and txn.compare and versions:
        record.recorder.count(record.CLAIMS)
    return {
        "succeeded": succeeded,
        "responses": gets_bounded(responses),
        "versions": versions,
        "revision": revision,
    }


def gets_bounded(responses: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The answers' ``get`` values within the list byte cap (ZEROLOCK_LIST_MAX_BYTES):
    once they add up past it, the later gets carry ``"value": null`` and
    ``"value_omitted": true`` (read those with GET /api/shards/{id}). The first get
    goes out whole however large, as a list's first item does. A get of 3.6 KB
    repeated 100 times over a 900 KB shard answered 90 MB, and eight at once took
    the process from 577 MB to 1.3 GB."""
    limit = settings.ZEROLOCK_LIST_MAX_BYTES
    sizes: dict[int, int] = {}  # the same value got twice is encoded once
    total = 0
    bounded = []
    for response in responses:
        if response["op"] == "get" and response["value"] is not None:
            value = response["value"]
            if total > limit:
                response = {**response, "value": None, "value_omitted": True}
            else:
                if id(value) not in sizes:
                    sizes[id(value)] = len(encode(value))
                total += sizes[id(value)]
                if total > limit and total != sizes[id(value)]:
                    response = {**response, "value": None, "value_omitted": True}
        bounded.append(response)
    return bounded


def _permissions_check(key: Any, txn: Txn) -> None:
    writes = txn.written(txn.success) | txn.written(txn.failure)
    needed = {"shard:read"} if txn.shard_ids - writes or txn.compare else set()
    if writes:
        needed.add("shard:write")
    for permission in sorted(needed):
        permission_check(key, permission)
    scope_check(key, txn.shard_ids)


def _run_op(op: Op, item: _Working, where: str, actor: Actor) -> dict[str, Any]:
    shard = item.shard
    if op.op == "get":
        found = path_get(item.value, op.path)
        return {
            "op": "get",
            "shard_id": shard.id,
            "path": list(op.path),
            "found": found is not _ABSENT,
            "value": None if found is _ABSENT else found,
            "version": shard.version,
        }
    # Writes follow the shard's rules: owners and the gate for every write op, even
    # one that changes nothing (the writer applies them again to what it writes),
    # and the type.
    rules_check(
        shard, actor, WriteRules(versioned=False), expected_version=shard.version, value=None
    )
    if op.op == "append":
        if shard.type != ShardType.ADDITIVE or shard.crdt_type != CrdtType.ARRAY or op.path:
            raise UnsupportedDiff(
                f"{where}: append is for additive array shards (no path).",
                at=where,
            )
        item.appends.extend(op.items)
        item.changed = True
        return {"op": "append", "shard_id": shard.id}
    if shard.type != ShardType.DECISION:
        raise UnsupportedDiff(
            f"{where}: put and delete are for decision shards.",
            at=where,
        )
    if op.op == "put":
        item.value = path_put(item.value, op.path, op.value, where)
        item.changed = True
        if op.lease_id:
            lease_bind(
                lease_id=op.lease_id,
                holder=actor.agent_id,
                key_prefix=actor.key_prefix,
                shard=shard,
                path=list(op.path),
            )
    elif path_delete(item.value, op.path):
        item.changed = True
    return {"op": op.op, "shard_id": shard.id, "path": list(op.path)}


def _write(
    tx: WriteTx, actor: Actor, working: dict[str, _Working], fence: int | None
) -> tuple[dict[str, int], int | None]:
    """One new version per written shard, each through the one version writer."""
    versions: dict[str, int] = {}
    revision = None
    for shard_id in sorted(working):
        item = working[shard_id]
        if not item.changed:
            continue
        if item.appends:
            op = crdt.parse_op(CrdtType.ARRAY, {"append": item.appends})

            def append(doc: Any, value: Any, op: crdt.AdditiveOp = op) -> tuple[bytes | None, Any]:
                return crdt.apply_op(CrdtType.ARRAY, doc, value, op)

            appended = additive_apply_locked(
                tx=tx,
                actor=actor,
                shard=item.shard,
                change=append,
                op_json=op.as_json(),
                rules=WriteRules(
                    fence=fence,
                    schema=Additions(False, CrdtType.ARRAY),
                    versioned=False,
                    details={"crdt_type": item.shard.crdt_type},
                ),
            )
            assert appended is not None  # a parsed append always changes the Doc
            versions[shard_id], revision = appended.version, appended.audit_entry_id
            continue
        result = version_write(
            tx=tx,
            shard=item.shard,
            actor=actor,
            expected_version=item.before,
            value=item.value,
            rules=WriteRules(fence=fence, details={"txn": True}),
        )
        if result is None:  # read under this same lock: only a deletion can do this
            raise ShardNotFound(shard_id)
        versions[shard_id], revision = result.version, result.audit_entry_id
    return versions, revision
