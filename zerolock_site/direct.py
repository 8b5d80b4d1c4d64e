"""The direct lane: the hot API calls made in this process (request frames on
/ws/agents/, /mcp's tool calls) go straight to their DRF view, past Django's
handler and middleware chain.

What a call skips is only what the full application spends on plumbing: the
middleware chain (a dozen layers, all but three page-only or header-only for the
API), the handler's signals and URL resolution done twice. Everything that
decides an answer is the same code the HTTP request runs, called from here:

- routing: Django's own ``resolve`` on the project's URLconf;
- the rate limit: ``request_rate_hit`` and ``rate_limited_response``, the
  middleware's two functions, with its ``X-RateLimit-*`` headers;
- authentication, the agent check, permissions, scopes, parsing, the view, its
  services and audit, the error envelope: the view's own DRF dispatch
  (``APIView.dispatch``), with the project's parser, renderer and exception
  handler;
- an unexpected error: the envelope middleware's 500.

A call the lane cannot answer exactly as the full application would goes
through the full application instead: any view not listed in ``HOT_VIEWS``, a
request carrying an ``Idempotency-Key`` (its records live in the idempotency
middleware), and a key that is not usable (its failure is recorded and counted
against the address by the middleware and DRF), and a Host header outside
ALLOWED_HOSTS (refused by the full application's 400). The test that sends every
endpoint over the socket and over HTTP holds the two to the same answers."""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import DisallowedHost
from django.core.handlers.wsgi import WSGIRequest
from django.db import close_old_connections
from django.http import HttpResponse, JsonResponse
from django.urls import Resolver404, resolve
from django.utils.log import log_response
from rest_framework.views import APIView

from access.auth import request_key
from access.middleware import rate_limited_response, request_rate_hit
from access.models import ApiKey
from common.errors import internal_error
from coordination import views as coordination_views
from shards import views as shard_views

logger = logging.getLogger(__name__)

# The calls agents make in their loops: read, commit (decision and additive),
# claim, txn and the lease calls. Each view here reads only what DRF's request
# gives it (its body, headers and principal), nothing of Django's middleware.
HOT_VIEWS: dict[type[APIView], frozenset[str]] = {
    shard_views.ShardDetailView: frozenset({"GET"}),
    shard_views.ShardCommitView: frozenset({"POST"}),
    coordination_views.ClaimView: frozenset({"POST"}),
    coordination_views.TxnView: frozenset({"POST"}),
    coordination_views.LeaseListView: frozenset({"POST"}),
    coordination_views.LeaseDetailView: frozenset({"DELETE"}),
    coordination_views.LeaseKeepAliveView: frozenset({"POST"}),
}


def direct_view(environ: dict[str, Any]) -> Any | None:
    """The view function that answers this request in the direct lane, or None
    when the full application must (see the module's docstring)."""
    if "HTTP_IDEMPOTENCY_KEY" in environ:
        return None
    try:
        match = resolve(environ["PATH_INFO"])
    except Resolver404:
        return None
    view_class = getattr(match.func, "view_class", None)
    if environ["REQUEST_METHOD"] not in HOT_VIEWS.get(view_class, ()):  # type: ignore[arg-type]
        return None
    return match


def direct_answer(match: Any, environ: dict[str, Any]) -> HttpResponse | None:
    """The answer the full application would give, or None (nothing done, nothing
    counted) when the request's key is not usable: the full application then
    answers it, and records and counts it as it does every refused key."""
    request = WSGIRequest(environ)
    request.resolver_match = match
    # What Django's request_started and request_finished signals do around a
    # request: a connection past its age or broken is closed, not reused.
    close_old_connections()
    try:
        try:
            request.get_host()  # ALLOWED_HOSTS, as CommonMiddleware checks it
        except DisallowedHost:
            return None
        if not isinstance(request_key(request), ApiKey):
            return None
        state, who = request_rate_hit(request)
        if not state.allowed:
            return rate_limited_response(state, who)
        try:
            response = match.func(request, *match.args, **match.kwargs)
            if hasattr(response, "render"):
                response.render()  # DRF's Response: its bytes, by its negotiated renderer
        except Exception:  # the envelope middleware's process_exception, as over HTTP
            logger.exception("Unhandled error on %s %s", request.method, request.path)
            response = JsonResponse(internal_error().envelope(), status=500)
        for name, value in state.headers().items():
            response[name] = value
        if response.status_code >= 400:  # the warning Django's handler logs for these
            log_response(
                "%s: %s", response.reason_phrase, request.path, response=response, request=request
            )
        return response
    finally:
        close_old_connections()
