"""What Django alone costs per request: the WSGI handler called in a loop, no socket.

Run by hand (not a test):

    .venv/bin/python bench/handler.py get              # or commit, append, floor
    .venv/bin/python bench/handler.py get --profile    # cProfile's top functions

The load generators in this folder share the machine's two cores with the
server, so their request rates move with the hour and with the client. This one
has no client and no web server: it builds each request's WSGI environ and
calls the same application `make run` serves (Django's handler, the middleware
chain, the view, the database) in one thread, on a throwaway data dir with the
embedded defaults. What it prints is the handler's own time per request, the
part of a request that uvicorn and the thread bridge do not account for, and
the figure to compare before and after a change to that part.
"""

from __future__ import annotations

import argparse
import atexit
import io
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["get", "commit", "append", "floor"])
    parser.add_argument("--requests", type=int, default=3000, help="per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="cProfile one more round")
    args = parser.parse_args()

    # The project instead of this folder, whose profile.py would shadow the
    # standard library's (cProfile imports it).
    sys.path[0] = str(ROOT)
    os.environ["DJANGO_SETTINGS_MODULE"] = "zerolock_site.settings"
    data_dir = tempfile.mkdtemp(prefix="zerolock-handler-")
    atexit.register(shutil.rmtree, data_dir, ignore_errors=True)
    os.environ["ZEROLOCK_DATA_DIR"] = data_dir
    # The embedded defaults, whatever this shell points at: it migrates and writes.
    os.environ.pop("DATABASE_URL", None)
    os.environ.pop("REDIS_URL", None)
    os.environ["ZEROLOCK_BENCH_FLOOR"] = "true"  # the floor view, as bench/peer.py serves it
    # One client sends every request: the per-address limit would stop it.
    os.environ["ZEROLOCK_RATE_LIMIT_PER_MINUTE"] = "1000000000"
    os.environ["ZEROLOCK_RATE_LIMIT_IP_PER_MINUTE"] = "1000000000"
    import django

    django.setup()
    from django.core.management import call_command
    from django.core.wsgi import get_wsgi_application

    call_command("migrate", verbosity=0)
    out = io.StringIO()
    call_command("createapikey", "handler-bench", "--permissions", "admin", stdout=out)
    key = out.getvalue().strip().splitlines()[-1]
    app = get_wsgi_application()
    statuses: list[str] = []

    def start_response(status: str, headers: Any, exc_info: Any = None) -> None:
        statuses.append(status)

    def call(method: str, path: str, body: bytes = b"") -> bytes:
        environ = {
            "REQUEST_METHOD": method,
            "PATH_INFO": path,
            "SCRIPT_NAME": "",
            "QUERY_STRING": "",
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "8000",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "REMOTE_ADDR": "127.0.0.1",
            "HTTP_HOST": "127.0.0.1:8000",
            "HTTP_X_API_KEY": key,
            "HTTP_X_AGENT_ID": "handler-bench",
            "CONTENT_TYPE": "application/json",
            "CONTENT_LENGTH": str(len(body)),
            "wsgi.input": io.BytesIO(body),
            "wsgi.url_scheme": "http",
            "wsgi.errors": sys.stderr,
        }
        response = app(environ, start_response)
        try:
            return b"".join(response)
        finally:
            response.close()

    created = call("POST", "/api/shards", b'{"id":"h1","type":"decision","initial_value":{"n":0}}')
    version = json.loads(created)["version"]
    call("POST", "/api/shards", b'{"id":"log","type":"additive","crdt_type":"array"}')
    appended = 0

    def one() -> None:
        nonlocal version, appended
        if args.mode == "get":
            call("GET", "/api/shards/h1")
        elif args.mode == "floor":
            call("GET", "/bench/floor")
        elif args.mode == "append":
            appended += 1
            call("POST", "/api/shards/log/commit", json.dumps({"append": [appended]}).encode())
        else:
            body = {"expected_version": version, "new_value": {"n": version}}
            version = json.loads(call("POST", "/api/shards/h1/commit", json.dumps(body).encode()))[
                "version"
            ]

    def round_of(run: Callable[[], None]) -> float:
        statuses.clear()
        started = time.perf_counter()
        for _ in range(args.requests):
            run()
        elapsed = time.perf_counter() - started
        wrong = {s for s in statuses if not s.startswith("200")}
        if wrong:
            raise SystemExit(f"unexpected answers: {wrong}")
        return elapsed / args.requests * 1e6

    per_request = [round_of(one) for _ in range(args.rounds)]
    print(
        f"{args.mode}: {min(per_request):.0f} us per request in the handler "
        f"(best of {args.rounds} rounds of {args.requests}; all: "
        + ", ".join(f"{us:.0f}" for us in per_request)
        + ")"
    )
    if args.profile:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.runcall(round_of, one)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(30)


if __name__ == "__main__":
    main()
