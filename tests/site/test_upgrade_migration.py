"""A database made by the first layout (every model in ``shards``), with data in
it, migrates forward into the split apps with nothing lost: the models moved
keep their tables, rows, foreign keys, content types and permissions, the
audit chain still verifies, and a key made before still authenticates.

The old layout is rebuilt the way it was made: by migrating back to the
migrations it had (shards 0008, approvals 0003), then filling it through the
historical models of that state."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from access.keys import generate_raw_key, key_from_raw
from access.models import ApiKey
from approvals.models import Approval, ApprovalDecision
from audit.chain import GENESIS_HASH, entry_digest, value_digest, verify_chain
from audit.models import AuditEntry, AuditHead
from coordination.models import IdempotencyRecord, Lease, LeaseBinding
from metrics.models import CommitSample, MetricCounter
from shards.models import Shard

OLD_LAYOUT = [
    ("shards", "0008_shard_incarnation"),
    ("approvals", "0003_decision_principals_and_stored_diff"),
    ("supervision", "0001_initial"),
]
MOVED = {
    "apikey": "access",
    "auditentry": "audit",
    "audithead": "audit",
    "commitsample": "metrics",
    "metriccounter": "metrics",
    "socketgauge": "metrics",
    "lease": "coordination",
    "leasebinding": "coordination",
    "idempotencyrecord": "coordination",
}


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def fill_the_old_layout(old) -> dict:
    """What a running deployment of the first layout holds."""
    now = timezone.now()
    raw, prefix, hashed = generate_raw_key()
    key = old.get_model("shards", "ApiKey").objects.create(
        name="ops agent",
        prefix=prefix,
        hashed_key=hashed,
        permissions=["shard:read", "shard:write"],
        shard_prefixes=["ops:"],
        rate_limit=600,
    )
    shard = old.get_model("shards", "Shard").objects.create(
        id="ops:limits",
        type="decision",
        value={"max": 3},
        version=2,
        created_by="ops-1",
        updated_by="ops-1",
        fence=12,
    )
    # A hash-chained audit log of two entries, as the old writer made it.
    Entry = old.get_model("shards", "AuditEntry")
    previous = GENESIS_HASH
    for version, value in ((1, {"max": 1}), (2, {"max": 3})):
        entry = Entry(
            created_at=now,
            action="shard.create" if version == 1 else "shard.commit",
            agent_id="ops-1",
            key_prefix=prefix,
            shard_id=shard.id,
            version_before=None if version == 1 else version - 1,
            version_after=version,
            value=value,
            value_hash=value_digest(value),
            details={},
            prev_hash=previous,
        )
        entry.entry_hash = previous = entry_digest(entry)
        entry.save()
    old.get_model("shards", "AuditHead").objects.update_or_create(
        pk=1, defaults={"last_hash": previous}
    )
    lease = old.get_model("shards", "Lease").objects.create(
        holder="ops-1", key_prefix=prefix, ttl_seconds=30, expires_at=now + timedelta(hours=1)
    )
    old.get_model("shards", "LeaseBinding").objects.create(
        lease=lease, shard_id=shard.id, incarnation=shard.incarnation, path=["leader"]
    )
    old.get_model("shards", "IdempotencyRecord").objects.create(
        scope=prefix, key="retry-1", request_hash="h" * 64, status=200, body=b"{}"
    )
    old.get_model("shards", "CommitSample").objects.create(
        at=now, shard_id=shard.id, latency_ms=1.5, outcome="ok"
    )
    old.get_model("shards", "MetricCounter").objects.create(name="commits", value=41)
    approval = old.get_model("approvals", "Approval").objects.create(
        shard_id=shard.id,
        requested_by="ops-1",
        requested_key_prefix=prefix,
        proposed_value={"max": 9},
        proposed_hash=value_digest({"max": 9}),
        expected_version=2,
        value_at_request={"max": 3},
        version_at_request=2,
        expires_at=now + timedelta(hours=1),
    )
    old.get_model("approvals", "ApprovalDecision").objects.create(
        approval=approval,
        decider="agent:rev-1",
        principal=f"key:{prefix}",
        key_prefix=prefix,
        api_key=key,
        approve=True,
    )
    # Someone granted a permission on a moved model to a group, in admin.
    ContentType = old.get_model("contenttypes", "ContentType")
    Permission = old.get_model("auth", "Permission")
    Group = old.get_model("auth", "Group")
    key_type, _ = ContentType.objects.get_or_create(app_label="shards", model="apikey")
    view_keys, _ = Permission.objects.get_or_create(
        content_type=key_type, codename="view_apikey", defaults={"name": "Can view API key"}
    )
    auditors = Group.objects.create(name="Key auditors")
    auditors.permissions.add(view_keys)
    return {
        "raw": raw,
        "prefix": prefix,
        "key_id": key.pk,
        "approval_id": approval.pk,
        "lease_id": lease.pk,
        "key_type_id": key_type.pk,
    }


@pytest.mark.django_db(transaction=True)
def test_a_database_of_the_first_layout_migrates_into_the_apps_with_nothing_lost():
    leaves = MigrationExecutor(connection).loader.graph.leaf_nodes()
    old = migrate(OLD_LAYOUT)
    made = fill_the_old_layout(old)

    migrate(leaves)

    key = ApiKey.objects.get(pk=made["key_id"])
    assert (key.name, key.shard_prefixes, key.rate_limit) == ("ops agent", ["ops:"], 600)
    assert key_from_raw(made["raw"]).pk == key.pk  # the old key still authenticates
    shard = Shard.objects.get(pk="ops:limits")
    assert (shard.version, shard.value, shard.fence) == (2, {"max": 3}, 12)
    assert AuditEntry.objects.filter(shard_id="ops:limits").count() == 2
    assert AuditHead.objects.get(pk=1).last_hash == AuditEntry.objects.last().entry_hash
    assert verify_chain() == (2, None)  # the chain is whole across the move
    binding = LeaseBinding.objects.get()
    assert binding.lease == Lease.objects.get(pk=made["lease_id"])
    assert IdempotencyRecord.objects.get().key == "retry-1"
    assert CommitSample.objects.get().latency_ms == 1.5
    assert MetricCounter.objects.get(name="commits").value == 41
    decision = ApprovalDecision.objects.get()
    assert decision.api_key == key  # the foreign key now reaches access.ApiKey
    assert Approval.objects.get(pk=made["approval_id"]).decisions.count() == 1

    # Content types followed their models: the group's permission is on access.apikey.
    from django.contrib.auth.models import Group
    from django.contrib.contenttypes.models import ContentType

    ContentType.objects.clear_cache()
    moved = ContentType.objects.get(pk=made["key_type_id"])
    assert (moved.app_label, moved.model) == ("access", "apikey")
    assert moved.model_class() is ApiKey
    granted = Group.objects.get(name="Key auditors").permissions.get()
    assert (granted.content_type.app_label, granted.codename) == ("access", "view_apikey")
    for model, app in MOVED.items():
        assert not ContentType.objects.filter(app_label="shards", model=model).exists()
        assert ContentType.objects.filter(app_label=app, model=model).count() <= 1


@pytest.mark.django_db(transaction=True)
def test_the_move_can_be_undone_back_to_the_first_layout():
    leaves = MigrationExecutor(connection).loader.graph.leaf_nodes()
    old = migrate(OLD_LAYOUT)
    made = fill_the_old_layout(old)
    migrate(leaves)
    back = migrate(OLD_LAYOUT)
    assert back.get_model("shards", "ApiKey").objects.get(pk=made["key_id"]).name == "ops agent"
    migrate(leaves)
    assert ApiKey.objects.filter(pk=made["key_id"]).exists()
