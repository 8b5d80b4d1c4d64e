"""The documented response shapes (OpenAPI serializers) and the rendered ones agree."""

import pytest

from audit.models import AuditEntry
from audit.serializers import AuditEntrySerializer, audit_data
from shards.models import Shard
from shards.serializers import HistoryEntrySerializer, ShardSerializer, history_data, shard_data

pytestmark = pytest.mark.django_db


def test_rendered_shards_and_entries_match_their_documented_serializers(planner):
    planner.post(
        "/api/shards", {"id": "s", "type": "decision", "initial_value": {"a": 1}}, format="json"
    )
    shard = Shard.objects.get(pk="s")
    entry = AuditEntry.objects.get(shard_id="s")
    assert shard_data(shard) == ShardSerializer(shard).data
    assert history_data(entry) == HistoryEntrySerializer(entry).data
    assert audit_data(entry) == AuditEntrySerializer(entry).data
