"""Issue 13: the framework floor bench/peer.py measures the API against is a
view mounted only when ZEROLOCK_BENCH_FLOOR is on; by default it does not exist."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import server_env, start_server, stop_server

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


def test_a_server_started_with_the_defaults_has_no_floor_view(live_server_url):
    response = httpx.get(f"{live_server_url}/bench/floor", timeout=5)
    assert response.status_code == 404


def test_a_server_started_with_the_floor_switched_on_answers_it_with_a_small_json_body():
    proc, url = start_server(server_env() | {"ZEROLOCK_BENCH_FLOOR": "true"})
    try:
        response = httpx.get(f"{url}/bench/floor", timeout=5)
    finally:
        stop_server(proc)
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "application/json"
    assert response.json() == {"ok": True}
    # Served through the same middleware as the API: the security headers are on it.
    assert response.headers["X-Content-Type-Options"] == "nosniff"
