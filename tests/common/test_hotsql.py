"""common.hotsql gives back what the ORM gives back: the fast statements must
never change a value on its way in or out (JSON, datetimes, UUIDs, bytes)."""

from __future__ import annotations

import uuid

import pytest
from django.utils import timezone

from access.models import ApiKey
from access.services import api_key_create
from audit.models import AuditEntry
from common import hotsql
from shards.models import CrdtUpdate, Shard

pytestmark = pytest.mark.django_db


@pytest.fixture
def ledger() -> Shard:
    return Shard.objects.create(
        id="hot:ledger",
        type="decision",
        value={"n": 1, "big": 2**62, "f": 1.5, "s": "é", "list": [1, None, True]},
        owners=["ana"],
        value_schema={"type": "object"},
        created_by="ana",
        updated_by="ana",
    )


def test_a_row_read_by_primary_key_equals_the_orms_instance(ledger):
    fast = hotsql.instance_by_pk(Shard, ledger.id)
    slow = Shard.objects.get(pk=ledger.id)
    assert fast is not None
    for field in Shard._meta.concrete_fields:
        assert getattr(fast, field.attname) == getattr(slow, field.attname), field.attname
    assert isinstance(fast.incarnation, uuid.UUID)
    assert fast.value["big"] == 2**62 and isinstance(fast.value["n"], int)


def test_excluded_columns_are_deferred_and_still_readable(ledger):
    fast = hotsql.instance_by_pk(Shard, ledger.id, exclude=Shard.PAYLOAD)
    assert fast is not None
    assert fast.get_deferred_fields() == set(Shard.PAYLOAD)
    assert fast.value == ledger.value  # loaded on first use, as with defer()


def test_an_api_key_read_by_its_prefix_equals_the_orms(db):
    key, _ = api_key_create(
        name="hot", permissions=["shard:read"], shard_prefixes=["team-a:"], rate_limit=7
    )
    fast = hotsql.instance_where(ApiKey, prefix=key.prefix)
    slow = ApiKey.objects.get(prefix=key.prefix)
    assert fast is not None
    for field in ApiKey._meta.concrete_fields:
        assert getattr(fast, field.attname) == getattr(slow, field.attname), field.attname
    assert fast.allows_shard("team-a:x") and not fast.allows_shard("TEAM-A:x")
    assert hotsql.instance_where(ApiKey, prefix=key.prefix.upper() + "X") is None


def test_a_missing_row_is_none():
    assert hotsql.instance_by_pk(Shard, "hot:nobody") is None
    assert hotsql.select_one(Shard, ("version",), id="hot:nobody") is None


def test_a_conditional_update_touches_only_the_version_it_names(ledger):
    moved = hotsql.update_where(
        Shard,
        {"value": {"n": 2}, "updated_at": timezone.now()},
        bump="version",
        id=ledger.id,
        version=1,
        incarnation=ledger.incarnation,
    )
    stale = hotsql.update_where(
        Shard, {"value": {"n": 3}}, bump="version", id=ledger.id, version=1,
        incarnation=ledger.incarnation,
    )  # fmt: skip
    other_life = hotsql.update_where(
        Shard, {"value": {"n": 4}}, bump="version", id=ledger.id, version=2,
        incarnation=uuid.uuid4(),
    )  # fmt: skip
    ledger.refresh_from_db()
    assert (moved, stale, other_life) == (1, 0, 0)
    assert (ledger.version, ledger.value) == (2, {"n": 2})


def test_inserts_return_the_new_key_and_store_json_and_bytes_exactly(ledger):
    hotsql.insert(
        CrdtUpdate,
        {"shard_id": ledger.id, "version": 2, "update": b"\x00\xffyjs", "op": {"append": [1]}},
    )
    row = CrdtUpdate.objects.get(shard_id=ledger.id, version=2)
    assert (bytes(row.update), row.op) == (b"\x00\xffyjs", {"append": [1]})

    entry = AuditEntry(
        created_at=timezone.now(),
        action="shard.commit",
        shard_id=ledger.id,
        value={"n": 2**53 + 1},
        details={},
        prev_hash="0" * 64,
        entry_hash="1" * 64,
    )
    hotsql.insert_instance(entry)
    stored = AuditEntry.objects.get(pk=entry.pk)
    assert stored.value == {"n": 2**53 + 1} and stored.created_at == entry.created_at
    assert not entry._state.adding


def test_a_version_check_at_the_top_of_64_bits_touches_nothing_and_does_not_overflow(ledger):
    """The counter is bumped by the database (version + 1), never sent as a
    parameter that could pass 64 bits before the WHERE refuses the row."""
    touched = hotsql.update_where(
        Shard, {"value": 0}, bump="version", id=ledger.id, version=2**63 - 1,
        incarnation=ledger.incarnation,
    )  # fmt: skip
    assert touched == 0


def test_insert_many_stores_every_row_as_the_orm_would(db):
    from django.db import transaction
    from django.utils import timezone

    from shards.models import Delivery

    at = timezone.now()
    rows = [
        {"agent_id": f"reader-{n}", "shard_id": "s", "version": 2**62 + n, "read_at": at}
        for n in range(3)
    ]
    with transaction.atomic():
        hotsql.insert_many(Delivery, rows)
        hotsql.insert_many(Delivery, [])
    stored = list(Delivery.objects.order_by("id").values("agent_id", "version", "read_at"))
    assert stored == [
        {"agent_id": r["agent_id"], "version": r["version"], "read_at": at} for r in rows
    ]
