"""The framework floor: a view that does nothing but answer a small JSON body.

Served by the same stack as the API (the web server, the WSGI bridge's thread pool, the
middleware an API request passes: common.paths), but with no authentication, no database and
no DRF, so ``bench/peer.py`` can show how close a real endpoint comes to what the
server and Django themselves allow. Mounted at ``/bench/floor`` only when
``ZEROLOCK_BENCH_FLOOR`` is true (off by default): it is a measuring stick, not
part of the API.
"""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse


def floor(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"ok": True})
