"""GET /api/health: can this node serve, and are its worker and beat alive?"""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync
from celery import current_app as app
from channels.layers import get_channel_layer
from django.db import connection
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from common.api import ApiView

from .heartbeats import heartbeat_health
from .models import Role


class HealthView(ApiView):
    """Unauthenticated, so load balancers can probe it; it reveals only up/down."""

    authentication_classes: list = []
    permission_classes: list = []

    @extend_schema(responses={200: dict, 503: dict})
    def get(self, request: Request) -> Response:
        checks = {
            "database": _check(lambda: connection.ensure_connection()),
            "channel_layer": _check(_ping_channel_layer),
            "broker": _check(_ping_broker),
        }
        serving = all(c == "ok" for c in checks.values())
        roles = _celery_roles() if checks["database"] == "ok" else {}
        checks.update({role: health["status"] for role, health in roles.items()})
        healthy = all(c == "ok" for c in checks.values())
        # A missing worker or beat is "degraded" but still 200: this node serves
        # HTTP and WebSockets, and a load balancer must keep it (expiry also runs
        # in-process and at decision time). 503 only when it cannot serve.
        return Response(
            {"status": "ok" if healthy else "degraded", "checks": checks, **roles},
            status=200 if serving else 503,
        )


def _check(probe: Any) -> str:
    try:
        probe()
    except Exception as exc:  # a health probe reports every failure, whatever its type
        return f"error: {type(exc).__name__}"
    return "ok"


def _ping_channel_layer() -> None:
    layer = get_channel_layer()
    if layer is None:
        raise RuntimeError("no channel layer configured")
    # A send to a group nobody joined reaches the backend but stores nothing.
    async_to_sync(layer.group_send)("health-probe", {"type": "health.probe"})


def _ping_broker() -> None:
    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, timeout=2)
        # Connecting alone touches nothing on the embedded (virtual) transport;
        # sizing the task queue reads the broker's storage on every transport.
        conn.default_channel.queue_declare(queue=app.conf.task_default_queue)


def _celery_roles() -> dict[str, dict[str, Any]]:
    try:
        return {role.value: health.as_dict() for role, health in heartbeat_health().items()}
    except Exception as exc:  # a health probe reports every failure, whatever its type
        failed = {"status": f"error: {type(exc).__name__}", "last_heartbeat_seconds_ago": None}
        return {role.value: failed for role in Role}
