import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "zerolock_site.settings")
django_wsgi_app = get_wsgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import StaticFilesHandler  # noqa: E402
from django.core.exceptions import SuspiciousOperation  # noqa: E402
from django.core.handlers.exception import response_for_exception  # noqa: E402
from django.http import Http404, HttpRequest  # noqa: E402
from django.http.response import HttpResponseBase  # noqa: E402
from django.urls import path  # noqa: E402

from common.inprocess import api_register  # noqa: E402
from realtime.consumers import AgentConsumer, LiveConsumer  # noqa: E402
from realtime.watch import WatchEvents  # noqa: E402
from realtime.yjs import ShardYjsConsumer  # noqa: E402
from zerolock_mcp.server import McpEndpoint  # noqa: E402

from .daphne_patches import refuse_daphne_without_its_patches  # noqa: E402
from .wsgi_bridge import PooledWsgiToAsgi  # noqa: E402

# Served by uvicorn (uvicorn_server.py) or, through its own entry point, Daphne
# (daphne_server.py, with daphne_patches.py); Daphne's own command is refused here.
refuse_daphne_without_its_patches()

MCP_PATHS = ("/mcp", "/mcp/")


class StaticFiles(StaticFilesHandler):
    """A path escaping the static folders (``/static/..%2f``) is a missing file:
    404, not the SuspiciousFileOperation that Django's handler lets through as 500."""

    def get_response(self, request: HttpRequest) -> HttpResponseBase:
        try:
            return super().get_response(request)
        except SuspiciousOperation:
            return response_for_exception(request, Http404("No such static file."))


class WatchOrWsgi:
    """/api/watch streams (server-sent events) and /mcp (the Model Context
    Protocol, whose tool calls run through the pooled app) in ASGI; everything
    else is the pooled WSGI app, which answers with whole responses."""

    def __init__(self, wsgi: PooledWsgiToAsgi) -> None:
        self.wsgi = wsgi
        self.watch = WatchEvents()
        self.mcp = McpEndpoint(wsgi)

    async def __call__(self, scope: dict, receive, send) -> None:
        if scope["type"] == "http" and scope["path"] == "/api/watch":
            await self.watch(scope, receive, send)
        elif scope["type"] == "http" and scope["path"] in MCP_PATHS:
            await self.mcp(scope, receive, send)
        else:
            await self.wsgi(scope, receive, send)


# The HTTP side; its drain() is what uvicorn's shutdown calls (uvicorn_server.py).
http_bridge = PooledWsgiToAsgi(StaticFiles(django_wsgi_app), threads=settings.ZEROLOCK_HTTP_THREADS)
# Request frames on /ws/agents/ reach the API through it (common.inprocess).
api_register(http_bridge)

application = ProtocolTypeRouter(
    {
        # Static files (admin, console assets) straight from the app folders: the
        # pages are low-traffic and this spares a collectstatic step and a proxy.
        "http": WatchOrWsgi(http_bridge),
        # Agents authenticate with their API key, not a cookie, so there is no
        # cross-site risk to guard with an Origin check on their sockets.
        "websocket": URLRouter(
            [
                path("ws/agents/", AgentConsumer.as_asgi()),
                path("ws/crdt/<str:shard_id>", ShardYjsConsumer.as_asgi()),
                # The pages' socket rides on the login session (a cookie), so a
                # page from another site must not be able to open it.
                path(
                    "ws/live/",
                    AllowedHostsOriginValidator(AuthMiddlewareStack(LiveConsumer.as_asgi())),
                ),
            ]
        ),
    }
)
