"""The direct lane: the hot API calls made in this process (request frames on
/ws/agents/, /mcp's tool calls) go straight to their DRF view, past Django's
handler and the page middleware.

What a call skips is only plumbing that decides nothing of an API answer: the
handler's signals, URL resolution done twice, and the middleware that serves
pages (sessions, CSRF, login, messages, htmx) or only adds headers a frame does
not carry (security headers, CSP, X-Frame-Options). Everything that decides an
answer is the code an HTTP request runs, called from here:

- routing: Django's own ``resolve`` on the project's URLconf, and the Host
  check against ALLOWED_HOSTS;
- the API's middleware, the same classes in the same order (settings.MIDDLEWARE
  less ``PASSED_OVER``):
  the rate limit (``RateLimitMiddleware``) around idempotency
  (``IdempotencyMiddleware``);
- authentication, the agent check, permissions, scopes, parsing, the view, its
  services and audit, the error envelope: the view's own DRF dispatch
  (``APIView.dispatch``), with the project's parser, renderer and exception
  handler;
- an unexpected error: the envelope middleware's 500, and the warning Django's
  handler logs for every 4xx and 5xx.

Each of them goes further: straight calls (below) make the same calls DRF's
dispatch and the API middleware would, in their order, without DRF's request
and response objects.

Any other view, and a Host outside ALLOWED_HOSTS, take the full application.
The lane's test (tests/site/test_direct_lane.py) holds the two to the same
answers, and the socket's (tests/realtime/test_socket_requests.py) every
endpoint to HTTP's."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.core.handlers.wsgi import WSGIRequest
from django.db import close_old_connections
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import Resolver404, ResolverMatch, resolve
from django.utils.log import log_response
from django.utils.module_loading import import_string
from rest_framework.views import APIView

from access.auth import Principal, call_permitted, principal_admit, request_agent_id, request_key
from access.middleware import rate_headers_set, rate_limited_response, request_rate_hit
from common.api import ANYTHING
from common.errors import internal_error
from common.inputs import json_body_loads
from common.renderers import FastJSONRenderer
from coordination import views as coordination_views
from coordination.idempotency import idempotent_answer
from shards import views as shard_views
from zerolock_site.http_errors import api_exception_handler

logger = logging.getLogger(__name__)


def direct_view(environ: dict[str, Any]) -> ResolverMatch | None:
    """Where this request is answered in the direct lane, or None when the full
    application must answer it (see the module's docstring)."""
    try:
        match = resolve(environ["PATH_INFO"])
    except Resolver404:
        return None
    view_class = getattr(match.func, "view_class", None)
    if (view_class, environ["REQUEST_METHOD"]) not in STRAIGHT:
        return None
    return match


def _view(request: HttpRequest) -> HttpResponse:
    """The innermost layer: the view's DRF dispatch, rendered; what escapes it
    becomes the 500 the envelope middleware makes of it over HTTP."""
    match = request.resolver_match
    assert match is not None  # set by direct_answer
    try:
        response = match.func(request, *match.args, **match.kwargs)
        if hasattr(response, "render"):
            response.render()  # DRF's Response: its bytes, by its negotiated renderer
        return response
    except Exception:
        return _unhandled(request)


def _unhandled(request: HttpRequest) -> HttpResponse:
    """The 500 for an error that escaped (called in its ``except``: logged with it)."""
    logger.exception("Unhandled error on %s %s", request.method, request.path)
    return JsonResponse(internal_error().envelope(), status=500)


# The envelope middleware's work is done by _view (its 500) and by DRF (every
# other /api/ answer is already JSON); the rest serve pages or add headers only.
PASSED_OVER = (
    "django.middleware.security.SecurityMiddleware",
    "zerolock_site.page_middleware.CSPMiddleware",
    "zerolock_site.page_middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "zerolock_site.page_middleware.CsrfViewMiddleware",
    "zerolock_site.page_middleware.AuthenticationMiddleware",
    "zerolock_site.page_middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "zerolock_site.page_middleware.HtmxMiddleware",
    "zerolock_site.http_errors.ApiErrorEnvelopeMiddleware",
    "zerolock_site.page_middleware.AxesMiddleware",
)


def lane_middleware() -> list[str]:
    return [path for path in settings.MIDDLEWARE if path not in PASSED_OVER]


def _chain(view: Any) -> Any:
    """``view`` inside settings.MIDDLEWARE less PASSED_OVER, in its order, as
    Django's handler builds its own chain: a middleware added there runs here too
    unless it is named above as passed over."""
    handler = view
    for path in reversed(lane_middleware()):
        handler = import_string(path)(handler)
    return handler


_api_middleware = _chain(_view)


# --- straight calls ------------------------------------------------------------------
#
# The hot calls (a shard read, a commit, a claim, a txn, the lease calls) skip
# DRF's dispatch too, and call what it would call, in its order, each rule from
# its one home: the rate limit (``request_rate_hit``, as RateLimitMiddleware), authentication
# (``principal_admit``, as ApiKeyAuthentication), the permission, agent and
# scope checks (``call_permitted``, as HasKeyPermission, with the view's own
# ``required_permissions``), the body's parser (``json_body_loads``, as
# SafeJSONParser), the view's body (``shard_read_answer``, ``claim_answer``, ...,
# which the DRF views call too), the renderer, and the exception handler for
# every refusal; around them, a write's Idempotency-Key
# (``idempotent_answer``, as IdempotencyMiddleware: the SDK sends one on every
# write). DRF's request, negotiation and response objects were most of what a
# lane call cost beyond its service (measured: docs/decisions.md). A call they
# cannot answer exactly (a query string, an Accept or Content-Type of its own)
# takes the middleware chain above, as does every call once settings.MIDDLEWARE
# holds another API middleware.

# A straight call: the principal, the parsed body, the Prefer header and the
# path's arguments in; the answer's body (None: no body), headers and status out.
StraightAnswer = tuple[dict[str, Any] | None, dict[str, str], int]
Straight = Callable[[Principal, Any, str, dict[str, Any]], StraightAnswer]


def _ok(answer: tuple[dict[str, Any], dict[str, str]]) -> StraightAnswer:
    return answer[0], answer[1], 200


# The calls agents make in their loops, and the only ones the lane answers: read,
# commit (decision and additive), claim, txn and the lease calls. Each view here
# reads only what DRF's request gives it (its body, headers and principal),
# nothing of Django's middleware.
STRAIGHT: dict[tuple[type[APIView], str], Straight] = {
    (shard_views.ShardDetailView, "GET"): lambda who, data, prefer, kwargs: (
        shard_views.shard_read_answer(who, kwargs["shard_id"]),
        {},
        200,
    ),
    (shard_views.ShardCommitView, "POST"): lambda who, data, prefer, kwargs: _ok(
        shard_views.shard_commit_answer(who, kwargs["shard_id"], data, prefer=prefer)
    ),
    (coordination_views.ClaimView, "POST"): lambda who, data, prefer, kwargs: _ok(
        coordination_views.claim_answer(who, kwargs["shard_id"], data, prefer=prefer)
    ),
    (coordination_views.TxnView, "POST"): lambda who, data, prefer, kwargs: _ok(
        coordination_views.txn_answer(who, data, prefer=prefer)
    ),
    (coordination_views.LeaseListView, "POST"): lambda who, data, prefer, kwargs: (
        coordination_views.lease_grant_answer(who, data),
        {},
        201,
    ),
    (coordination_views.LeaseKeepAliveView, "POST"): lambda who, data, prefer, kwargs: (
        coordination_views.lease_keepalive_answer(who, kwargs["lease_id"]),
        {},
        200,
    ),
    (coordination_views.LeaseDetailView, "DELETE"): lambda who, data, prefer, kwargs: _revoked(
        who, kwargs["lease_id"]
    ),
}


def _revoked(who: Principal, lease_id: str) -> StraightAnswer:
    coordination_views.lease_revoke_answer(who, lease_id)
    return None, {}, 204


# The API middleware a straight call stands for, each one's body called from it.
STRAIGHT_MIDDLEWARE = [
    "access.middleware.RateLimitMiddleware",
    "coordination.idempotency.IdempotencyMiddleware",
]

# Decided once, as the chain above is built once: a straight call stands for the
# lane's middleware only while that is all of it.
_STRAIGHT_STANDS_FOR_LANE = lane_middleware() == STRAIGHT_MIDDLEWARE
_JSON_ACCEPTED = (*ANYTHING, "application/json")
_renderer = FastJSONRenderer()


def straight_call(match: ResolverMatch, request: HttpRequest) -> Straight | None:
    """The straight call for this request, or None when it takes the middleware chain."""
    view_class = getattr(match.func, "view_class", None)
    straight = STRAIGHT.get((view_class, request.method))  # type: ignore[arg-type]
    if straight is None or not _STRAIGHT_STANDS_FOR_LANE:
        return None
    meta = request.META
    if (
        meta.get("QUERY_STRING")
        or meta.get("HTTP_ACCEPT", "").strip() not in _JSON_ACCEPTED
        or not _json_or_empty(meta)
    ):
        return None
    return straight


def _json_or_empty(meta: dict[str, Any]) -> bool:
    """A JSON body, or none: DRF parses anything else by its Content-Type (or
    not at all), which a straight call does not attempt."""
    content_type = meta.get("CONTENT_TYPE", "")
    if content_type == "application/json":
        return True
    return not content_type and meta.get("CONTENT_LENGTH", "") in ("", "0")


def _json_response(body: Any, status: int, headers: Any) -> HttpResponse:
    response = HttpResponse(_renderer.render(body), status=status, content_type="application/json")
    if not response.content:
        # As DRF's Response: no body (a 204), no Content-Type.
        del response["Content-Type"]
    for name, value in headers:
        response[name] = value
    return response


def straight_answer(match: ResolverMatch, request: HttpRequest, straight: Straight) -> HttpResponse:
    """What the middleware chain and the view's DRF dispatch answer, made without them."""
    state, counted = request_rate_hit(request)
    if not state.allowed:
        return rate_limited_response(state, counted)
    response = idempotent_answer(request, functools.partial(_straight_response, match, straight))
    rate_headers_set(response, state)
    return response


def _straight_response(
    match: ResolverMatch, straight: Straight, request: HttpRequest
) -> HttpResponse:
    """The view's answer, or its refusal, as DRF's dispatch would render it."""
    try:
        answer, headers, status = _straight_run(match, request, straight)
        return _json_response(answer, status, headers.items())
    except Exception as error:  # noqa: BLE001 -- the API's exception handler decides
        refused = api_exception_handler(error, {})
        if refused is None:
            return _unhandled(request)
        # Its own headers (WWW-Authenticate, Retry-After), not the Content-Type
        # an unrendered Response carries.
        kept = [(k, v) for k, v in refused.items() if k.lower() != "content-type"]
        return _json_response(refused.data, refused.status_code, kept)


def _straight_run(match: ResolverMatch, request: HttpRequest, straight: Straight) -> StraightAnswer:
    """DRF's dispatch for a straight call: authentication, permissions, the body, the view."""
    who = principal_admit(
        request_key(request),
        raw=request.META.get("HTTP_X_API_KEY", ""),
        agent_id=request_agent_id(request),
    )
    call_permitted(
        who,
        method=str(request.method),
        # As HasKeyPermission reads it: a view may name none (POST /api/txn
        # checks each operation's shard in its service).
        needed=getattr(match.func.view_class, "required_permissions", {}).get(request.method),  # type: ignore[attr-defined]
        shard_id=match.kwargs.get("shard_id"),
    )
    # Read as DRF reads it (the stream, not ``request.body``), an empty body
    # being {} as DRF parses one.
    body = request.read()
    data = json_body_loads(body) if body else {}
    return straight(who, data, request.META.get("HTTP_PREFER", ""), match.kwargs)


def direct_answer(match: ResolverMatch, environ: dict[str, Any]) -> HttpResponse | None:
    """The answer the full application would give, or None (nothing read,
    nothing done) for a Host outside ALLOWED_HOSTS, which the full application
    then refuses."""
    request = WSGIRequest(environ)
    try:
        request.get_host()  # as CommonMiddleware checks it
    except DisallowedHost:
        return None
    request.resolver_match = match
    # What Django's request_started and request_finished signals do around a
    # request: a connection past its age or broken is closed, not reused.
    close_old_connections()
    try:
        straight = straight_call(match, request)
        if straight is not None:
            response = straight_answer(match, request, straight)
        else:
            response = _api_middleware(request)
    finally:
        close_old_connections()
    if response.status_code >= 400:  # the warning Django's handler logs for these
        log_response(
            "%s: %s", response.reason_phrase, request.path, response=response, request=request
        )
    return response
