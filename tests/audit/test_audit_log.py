"""The audit log is append-only and hash-chained; verify_audit finds tampering."""

import pytest
from django.core.management import CommandError, call_command

from audit.chain import verify_chain
from audit.models import AuditEntry

pytestmark = pytest.mark.django_db


@pytest.fixture
def busy_shard(planner):
    planner.post(
        "/api/shards", {"id": "plan", "type": "decision", "initial_value": 0}, format="json"
    )
    for version in (1, 2, 3):
        planner.post(
            "/api/shards/plan/commit",
            {"expected_version": version, "new_value": version},
            format="json",
        )
    planner.post("/api/shards/plan/commit", {"expected_version": 1, "new_value": 99}, format="json")
    return "plan"


def test_every_create_commit_and_rejection_is_in_the_chain(busy_shard, admin):
    entries = admin.get(f"/api/audit?shard_id={busy_shard}").json()
    assert [e["action"] for e in entries] == [
        "shard.create",
        "shard.commit",
        "shard.commit",
        "shard.commit",
        "shard.commit_rejected",
    ]
    assert entries[-1]["details"] == {"code": "STALE_VERSION"}
    everything = AuditEntry.objects.order_by("id")
    for previous, entry in zip(everything, everything[1:], strict=False):
        assert entry.prev_hash == previous.entry_hash


def test_the_audit_api_filters_by_agent_action_and_time(busy_shard, admin):
    commits = admin.get("/api/audit?action=shard.commit&agent_id=planner-1").json()
    assert len(commits) == 3
    assert admin.get("/api/audit?agent_id=nobody").json() == []
    first = commits[0]
    later = admin.get("/api/audit", {"since": first["created_at"], "action": "shard.commit"}).json()
    assert [e["id"] for e in later] == [c["id"] for c in commits]
    page = admin.get(f"/api/audit?after={first['id']}&limit=1").json()
    assert len(page) == 1 and page[0]["id"] > first["id"]
    bad = admin.get("/api/audit?since=yesterday")
    assert bad.status_code == 400


def test_verify_audit_passes_on_an_untouched_log(busy_shard, capsys):
    call_command("verify_audit")
    assert "Audit chain intact" in capsys.readouterr().out


def test_verify_audit_catches_a_rewritten_value(busy_shard):
    victim = AuditEntry.objects.filter(action="shard.commit").order_by("id")[1]
    AuditEntry.objects.filter(pk=victim.pk).update(value=1000)
    with pytest.raises(CommandError, match=f"entry #{victim.pk}"):
        call_command("verify_audit")


def test_verify_audit_catches_a_changed_author(busy_shard):
    victim = AuditEntry.objects.filter(action="shard.commit").order_by("id")[0]
    AuditEntry.objects.filter(pk=victim.pk).update(agent_id="someone-else")
    checked, broken = verify_chain()
    assert broken is not None and broken.entry_id == victim.pk
    assert "entry_hash" in broken.reason


def test_verify_audit_catches_a_deleted_entry(busy_shard):
    victim = AuditEntry.objects.filter(action="shard.commit").order_by("id")[1]
    AuditEntry.objects.filter(pk=victim.pk).delete()
    checked, broken = verify_chain()
    assert broken is not None and broken.entry_id > victim.pk
    assert "prev_hash" in broken.reason


def test_verify_audit_catches_the_newest_entry_removed(busy_shard):
    AuditEntry.objects.order_by("-id").first().delete()
    with pytest.raises(CommandError, match="head hash"):
        call_command("verify_audit")


def test_nobody_can_edit_the_audit_log_in_admin(busy_shard, admin_client):
    entry = AuditEntry.objects.first()
    assert admin_client.get("/admin/audit/auditentry/add/").status_code == 403
    assert admin_client.post(f"/admin/audit/auditentry/{entry.pk}/delete/").status_code == 403
    page = admin_client.get(f"/admin/audit/auditentry/{entry.pk}/change/")
    assert page.status_code == 200 and b'name="_save"' not in page.content
