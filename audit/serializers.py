"""Response shapes and query parsing for the audit API."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from common.inputs import QueryDateTimeField, QueryInt64Field, StringField, iso_time

from .models import AuditEntry


class AuditEntrySerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditEntry
        fields = [
            "id",
            "created_at",
            "action",
            "agent_id",
            "key_prefix",
            "shard_id",
            "version_before",
            "version_after",
            "value_hash",
            "details",
            "prev_hash",
            "entry_hash",
        ]


class AuditQuerySerializer(serializers.Serializer):
    shard_id = StringField(required=False)
    agent_id = StringField(required=False)
    action = StringField(required=False)
    since = QueryDateTimeField(required=False)
    after = QueryInt64Field(required=False, min_value=0, default=0)
    limit = QueryInt64Field(required=False, min_value=1, max_value=1000, default=100)


def audit_data(entry: AuditEntry) -> dict[str, Any]:
    return {
        "id": entry.pk,
        "created_at": iso_time(entry.created_at),
        "action": entry.action,
        "agent_id": entry.agent_id,
        "key_prefix": entry.key_prefix,
        "shard_id": entry.shard_id,
        "version_before": entry.version_before,
        "version_after": entry.version_after,
        "value_hash": entry.value_hash,
        "details": entry.details,
        "prev_hash": entry.prev_hash,
        "entry_hash": entry.entry_hash,
    }
