"""Writes about API keys: create, change, revoke (each audited), and the
audit records of a failed authentication and of a locked-out login."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from audit.chain import audited_transaction
from audit.models import AuditAction
from audit.rejections import rejections, storable_text
from common.errors import Invalid
from common.inputs import iso_time

from .keys import generate_raw_key, key_cache
from .models import ApiKey, ApiKeyPermission


def _known_permissions(permissions: list[str]) -> list[str]:
    unknown = sorted(set(permissions) - set(ApiKeyPermission.values))
    if unknown:
        raise Invalid(f"Unknown permissions: {', '.join(unknown)}")
    return sorted(set(permissions))


KEY_AUDITED_FIELDS = (
    "name",
    "permissions",
    "agent_ids",
    "shard_prefixes",
    "rate_limit",
    "expires_at",
    "user_id",
)


def _key_state(key: ApiKey) -> dict[str, Any]:
    state = {field: getattr(key, field) for field in KEY_AUDITED_FIELDS}
    state["expires_at"] = iso_time(key.expires_at)
    return state


def api_key_create(
    *,
    name: str,
    permissions: list[str],
    agent_ids: list[str] | None = None,
    shard_prefixes: list[str] | None = None,
    rate_limit: int | None = None,
    expires_at: datetime | None = None,
    created_by: str = "",
    user: Any = None,
) -> tuple[ApiKey, str]:
    """Creates a key and returns it with the raw key, which is never stored."""
    permissions = _known_permissions(permissions)
    raw, prefix, hashed = generate_raw_key()
    with audited_transaction() as audit:
        key = ApiKey.objects.create(
            name=name,
            prefix=prefix,
            hashed_key=hashed,
            permissions=permissions,
            agent_ids=agent_ids or [],
            shard_prefixes=shard_prefixes or [],
            rate_limit=rate_limit,
            expires_at=expires_at,
            user=user,
        )
        audit.append(
            action=AuditAction.KEY_CREATE,
            agent_id=created_by,
            key_prefix=prefix,
            details=_key_state(key),
        )
    return key, raw


def api_key_update(*, key: ApiKey, changed_by: str, **changes: Any) -> ApiKey:
    """Changes a key's grants; the audit entry records before and after."""
    if "permissions" in changes:
        changes["permissions"] = _known_permissions(changes["permissions"])
    with audited_transaction() as audit:
        before = _key_state(ApiKey.objects.get(pk=key.pk))
        for field, value in changes.items():
            setattr(key, field, value)
        key.save()
        after = _key_state(key)
        diff = {f: {"from": before[f], "to": after[f]} for f in after if before[f] != after[f]}
        if diff:
            audit.append(
                action=AuditAction.KEY_CHANGE,
                agent_id=changed_by,
                key_prefix=key.prefix,
                details={"changes": diff},
            )
    return key


def api_key_revoke(*, key: ApiKey, revoked_by: str) -> ApiKey:
    with audited_transaction() as audit:
        if ApiKey.objects.filter(pk=key.pk, revoked=False).update(revoked=True):
            audit.append(action=AuditAction.KEY_REVOKE, agent_id=revoked_by, key_prefix=key.prefix)
    key_cache.forget(key.prefix)
    key.revoked = True
    return key


def audit_auth_failure(*, reason: str, key_prefix: str = "", path: str = "") -> None:
    """Written behind, in batches (never one write-lock turn per failure: a flood of
    bad keys must not slow honest commits)."""
    rejections.append(
        {
            "action": AuditAction.AUTH_FAILURE,
            "key_prefix": key_prefix[:16],
            "details": {"reason": reason, **({"path": path} if path else {})},
        }
    )


def audit_login_locked_out(
    *, username: str, address: str, path: str, failures: int, until: datetime | None
) -> None:
    """A console or admin login locked for a cool-down: who and from where, never
    the password. Written behind like the other refusals; one per lock, not one
    per refused attempt (access/logins.py)."""
    rejections.append(
        {
            "action": AuditAction.LOGIN_LOCKED_OUT,
            "details": {
                "username": storable_text(username, 150),
                "address": storable_text(address, 64),
                "path": storable_text(path, 256),
                "failures": failures,
                "until": iso_time(until),
            },
        }
    )
