"""Which requests are the agents' API and which are pages for people: one rule,
read by the error envelope, the rate limits, idempotency, the WSGI bridge and the
page-only middleware."""

from __future__ import annotations

from django.http import HttpRequest

API_PREFIX = "/api/"
# The framework floor (zerolock_site/floor.py) stands for an API request in the
# benchmarks, so it takes the API's middleware path, not the pages'.
FLOOR_PATH = "/bench/floor"


def is_api_path(path: str) -> bool:
    return path.startswith(API_PREFIX)


def needs_page_middleware(request: HttpRequest) -> bool:
    """Sessions, CSRF, the logged-in user, messages and htmx serve the pages. Agents
    authenticate with API keys and never send a cookie, so the API (including its
    Swagger page, which fetches the schema without one) skips them."""
    path = request.path_info
    return not (path.startswith(API_PREFIX) or path == FLOOR_PATH)
