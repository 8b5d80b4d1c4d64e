"""Figures other apps add to GET /api/metrics, registered in their
``AppConfig.ready()`` (metrics is below them and imports none of them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

sources: dict[str, Callable[[], Any]] = {}


def metrics_source_register(name: str, figures: Callable[[], Any]) -> None:
    sources[name] = figures
