"""ZeroLock settings: one file, driven by environment variables.

With nothing set, ZeroLock runs on one machine with no servers to install:
SQLite in WAL mode, the in-memory channel layer, local-memory cache and a
SQLite Celery broker. ``DATABASE_URL`` switches to PostgreSQL and
``REDIS_URL`` to Redis for the channel layer, the cache and the Celery broker.
"""

import os
import secrets
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return int(raw) if raw else default


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return float(raw) if raw else default


# Everything ZeroLock writes at runtime (SQLite file, broker folders, secret key).
# `make run` keeps it in ./var. The tests never share it (docs/decisions.md): they
# overwrote its first-run.txt with credentials that work nowhere, and the dev
# server's worker took their webhook tasks from the shared broker file. Under
# pytest the default is ./var/test and ./var itself is refused. pytest sets
# PYTEST_VERSION for its session, so the servers and workers a test starts
# inherit the same rule.
RUN_DATA_DIR = (BASE_DIR / "var").resolve()
TEST_DATA_DIR = RUN_DATA_DIR / "test"
_UNDER_PYTEST = "PYTEST_VERSION" in os.environ
DATA_DIR = Path(
    os.environ.get("ZEROLOCK_DATA_DIR") or (TEST_DATA_DIR if _UNDER_PYTEST else RUN_DATA_DIR)
).resolve()
if _UNDER_PYTEST and DATA_DIR == RUN_DATA_DIR:
    raise ImproperlyConfigured(
        f"ZEROLOCK_DATA_DIR={DATA_DIR} is the data directory of `make run`; tests would "
        "overwrite its first-run.txt, secret key and broker. Unset ZEROLOCK_DATA_DIR "
        f"(tests then use {TEST_DATA_DIR}) or point it elsewhere."
    )
DATA_DIR.mkdir(parents=True, exist_ok=True)


def _secret_key() -> str:
    """Use SECRET_KEY if given, else one generated on first start and kept in DATA_DIR."""
    if os.environ.get("SECRET_KEY"):
        return os.environ["SECRET_KEY"]
    path = DATA_DIR / "secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = os.environ.get("ALLOWED_HOSTS", "127.0.0.1,localhost,[::1],testserver").split(",")
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o]

# Not "daphne": its app only makes `manage.py runserver` serve ASGI, and it imports
# Twisted and autobahn into every process that sets Django up (the Celery worker,
# beat, management commands): 23 MB each. ZEROLOCK_SERVER=daphne starts
# zerolock_site/daphne_server.py, which installs its reactor before anything else.
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "django_celery_beat",
    "django_htmx",
    "axes",
    # ZeroLock's apps, lowest layer first (the import contract in pyproject.toml
    # keeps each one from importing those listed after it; supervision, which
    # needs only common, stays last: its ready() only connects Celery signals).
    # common is here for the database layer's care (common.apps: the WAL kept open).
    "common",
    "metrics",
    "audit",
    "access",
    "shards",
    "coordination",
    "approvals",
    "realtime",
    "dashboard",
    "supervision",
]

# HTTP requests run as WSGI on the bridge's thread pool (zerolock_site/asgi.py), so
# the whole chain is synchronous: no thread hop per middleware hook.
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "zerolock_site.page_middleware.CSPMiddleware",
    # Page-only (zerolock_site/page_middleware.py): skipped for the API, whose
    # callers send keys, not cookies.
    "zerolock_site.page_middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "zerolock_site.page_middleware.CsrfViewMiddleware",
    "zerolock_site.page_middleware.AuthenticationMiddleware",
    "zerolock_site.page_middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "zerolock_site.page_middleware.HtmxMiddleware",
    "zerolock_site.http_errors.ApiErrorEnvelopeMiddleware",
    "access.middleware.RateLimitMiddleware",
    "coordination.idempotency.IdempotencyMiddleware",
    # Last, as axes asks: it turns a login its backend refused into the lockout
    # page. Page-only, like the session middleware it depends on.
    "zerolock_site.page_middleware.AxesMiddleware",
]

# --- Browser security headers -------------------------------------------------
# Set ZEROLOCK_HTTPS=true when ZeroLock is reached over HTTPS (directly or behind a
# proxy that sends X-Forwarded-Proto; ZEROLOCK_TRUST_X_FORWARDED_PROTO=true then):
# cookies become Secure and HSTS is sent. Plain-http localhost keeps both off, or
# the login cookie would never come back.
ZEROLOCK_HTTPS = env_bool("ZEROLOCK_HTTPS", False)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = ZEROLOCK_HTTPS
if env_bool("ZEROLOCK_TRUST_X_FORWARDED_PROTO", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# SecurityMiddleware sends HSTS only on requests that arrived over HTTPS.
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000 if ZEROLOCK_HTTPS else 0)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# django-csp. Scripts only from our own static files (htmx, Chart.js, Swagger UI
# are served locally; no inline script anywhere). Inline styles are allowed:
# Swagger UI's page and widgets set them, and styles cannot run code.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", "'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}

ROOT_URLCONF = "zerolock_site.urls"
# No WSGI_APPLICATION: HTTP is served as WSGI only inside the ASGI server, behind
# its body limit (zerolock_site/wsgi_bridge.py); there is no WSGI entry point to
# serve without it.
ASGI_APPLICATION = "zerolock_site.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------
DATABASE_URL = os.environ.get("DATABASE_URL", "")
SQLITE_PATH = Path(os.environ.get("ZEROLOCK_DB_PATH", DATA_DIR / "zerolock.sqlite3"))


def sqlite_database(name: str | Path) -> dict:
    """The one SQLite configuration, however the file is named (the default,
    ZEROLOCK_DB_PATH or DATABASE_URL=sqlite:///...): a URL once skipped these
    options, and 2 % of commits under 80 agents failed with "database is locked"."""
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": name,
        # Reopening SQLite (and re-running the PRAGMAs) on every request costs
        # more than the query; worker threads keep their connection.
        "CONN_MAX_AGE": 600,
        "CONN_HEALTH_CHECKS": True,
        "OPTIONS": {
            # IMMEDIATE takes the write lock at BEGIN, so two writers queue on
            # the busy timeout instead of failing with "database is locked".
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
            "init_command": (
                "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=20000;"
            ),
        },
        # A file, not :memory:, so a live server process can share the test database.
        "TEST": {"NAME": str(DATA_DIR / "test_zerolock.sqlite3")},
    }


_db = dj_database_url.parse(DATABASE_URL, conn_max_age=0) if DATABASE_URL else None
if _db is None or _db["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES = {"default": sqlite_database(_db["NAME"] if _db else SQLITE_PATH)}
else:
    if _db["ENGINE"] == "django.db.backends.postgresql":
        # Without a pool every request pays a new connection (~200 req/s here).
        _db.setdefault("OPTIONS", {})["pool"] = {
            "min_size": 2,
            "max_size": env_int("ZEROLOCK_DB_POOL_MAX", 20),
            "timeout": 20,
        }
    DATABASES = {"default": _db}  # type: ignore[dict-item]

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis: channel layer, cache, broker -----------------------------------
REDIS_URL = os.environ.get("REDIS_URL", "")

# Messages a socket may have queued before more are dropped (the default, 100,
# lost the newest versions in a burst of commits: measured by the live-page test).
CHANNEL_CAPACITY = int(os.environ.get("ZEROLOCK_CHANNEL_CAPACITY", "5000"))
if REDIS_URL:
    from redis.connection import parse_url as _redis_parse_url

    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # redis-py 8 times socket reads out after 5 s, exactly channels_redis's
            # blocking BZPOPMIN wait: an idle socket's consumer died with
            # "Timeout reading from Redis". Reads may block a little longer.
            "CONFIG": {
                "hosts": [{"address": REDIS_URL, "socket_timeout": 15}],
                "capacity": CHANNEL_CAPACITY,
            },
        },
        # What every server process hears (realtime.fanout): one Redis PUBLISH per
        # batch of pushes. The default layer's group_send cost four commands and a
        # sorted-set entry per member, and kept writing to the channels of
        # processes long gone until their membership expired a day later.
        "processes": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            # Pub/sub channels ignore Redis's database number, which is what keeps
            # installations sharing one Redis apart everywhere else: name it.
            "CONFIG": {
                "hosts": [{"address": REDIS_URL}],
                "prefix": f"zerolock-db{_redis_parse_url(REDIS_URL).get('db', 0)}",
            },
        },
    }
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "zerolock",
        }
    }
else:
    CHANNEL_LAYERS = {
        alias: {
            "BACKEND": "channels.layers.InMemoryChannelLayer",
            "CONFIG": {"capacity": CHANNEL_CAPACITY},
        }
        for alias in ("default", "processes")
    }
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# --- Celery ----------------------------------------------------------------
CELERY_TIMEZONE = "UTC"
CELERY_TASK_IGNORE_RESULT = True
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
else:
    # SQLite through kombu's SQLAlchemy transport: a message is one committed row,
    # so the worker never reads half of one (the filesystem transport handed it
    # half-written files and the worker died: issue 16). See supervision/broker.py.
    from supervision.broker import embedded_broker

    CELERY_BROKER_URL, CELERY_BROKER_TRANSPORT_OPTIONS = embedded_broker(DATA_DIR)
    CELERY_BROKER_TRANSPORT = "supervision.sqlite_transport:SqliteTransport"
# A worker holds at most one message beyond the task it runs: a worker killed -9
# loses what it holds (both transports deliver at most once; the tasks are periodic).
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BEAT_SCHEDULE = {
    # The decision endpoints check the clock themselves; this marks and notifies.
    "expire-approvals": {
        "task": "approvals.tasks.expire_approvals",
        "schedule": 2.0,
    },
    "expire-leases": {
        "task": "coordination.tasks.expire_leases",
        "schedule": 1.0,
    },
    "expire-reservations": {
        "task": "coordination.tasks.expire_reservations",
        "schedule": 5.0,
    },
    "prune-idempotency-records": {
        "task": "coordination.tasks.prune_idempotency_records",
        "schedule": 3600.0,
    },
    "prune-metric-samples": {
        "task": "metrics.tasks.prune_metric_samples",
        "schedule": 3600.0,
    },
    "prune-delivery-log": {
        "task": "shards.tasks.prune_delivery_log",
        "schedule": 3600.0,
    },
    "prune-broker-messages": {
        "task": "supervision.tasks.prune_broker_messages",
        "schedule": 300.0,
    },
}
# A worker or beat whose last heartbeat is older than this shows as "stale" in
# /api/health (they beat about once a second).
ZEROLOCK_HEARTBEAT_STALE_SECONDS = env_int("ZEROLOCK_HEARTBEAT_STALE_SECONDS", 15)

# --- Auth, API -------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/console/"

# --- Login throttling (django-axes; docs/decisions.md) ------------------------
# The console's and the admin's logins both go through authenticate(), where
# axes' backend refuses a locked-out pair before any password is checked.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
# Failed logins one username may have from one address before that pair is
# refused, right password or not, for the cool-down.
ZEROLOCK_LOGIN_FAILURE_LIMIT = env_int("ZEROLOCK_LOGIN_FAILURE_LIMIT", 5)
ZEROLOCK_LOGIN_COOLOFF_SECONDS = env_int("ZEROLOCK_LOGIN_COOLOFF_SECONDS", 900)
# 0 for either would not mean "off" but "nobody signs in" (a limit of 0) or
# "never locked" (a cool-down of 0): refuse both rather than guess.
if ZEROLOCK_LOGIN_FAILURE_LIMIT < 1 or ZEROLOCK_LOGIN_COOLOFF_SECONDS < 1:
    raise ImproperlyConfigured(
        "ZEROLOCK_LOGIN_FAILURE_LIMIT and ZEROLOCK_LOGIN_COOLOFF_SECONDS must be at least 1."
    )
AXES_FAILURE_LIMIT = ZEROLOCK_LOGIN_FAILURE_LIMIT
AXES_COOLOFF_TIME = timedelta(seconds=ZEROLOCK_LOGIN_COOLOFF_SECONDS)
# Per username *and* address: a lock per username alone would let anyone lock a
# risk officer out by typing their name five times.
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
# Attempts during a lock do not move its end, so the page can say when it ends.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_RESET_ON_SUCCESS = True
# The database handler: every server process sees the same counts (the cache is
# per process without Redis), and the admin lists and deletes them.
AXES_HANDLER = "axes.handlers.database.AxesDatabaseHandler"
AXES_CLIENT_IP_CALLABLE = "access.auth.request_address"
AXES_LOCKOUT_CALLABLE = "access.logins.lockout_response"
AXES_HTTP_RESPONSE_CODE = 429  # as the API's own limits answer
# axes looks for its own middleware by name; ours is a subclass of it
# (zerolock_site/page_middleware.AxesMiddleware).
SILENCED_SYSTEM_CHECKS = ["axes.W002"]

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["access.auth.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["access.auth.HasKeyPermission"],
    "DEFAULT_PARSER_CLASSES": ["common.inputs.SafeJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["common.renderers.FastJSONRenderer"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "common.negotiation.LenientContentNegotiation",
    "EXCEPTION_HANDLER": "zerolock_site.http_errors.api_exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "ZeroLock API",
    "DESCRIPTION": "Coordination server for multi-agent AI systems.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "common.openapi.add_error_responses",  # the error envelope on every /api/ op
        "common.openapi.add_body_rules",  # rules between body fields (after the enums)
    ],
}

# Mount /bench/floor (zerolock_site/floor.py), the framework floor bench/peer.py
# measures the API against. Off unless asked for: it is not part of the API.
ZEROLOCK_BENCH_FLOOR = env_bool("ZEROLOCK_BENCH_FLOOR", False)
# Threads serving HTTP inside the ASGI server (zerolock_site/wsgi_bridge.py).
ZEROLOCK_HTTP_THREADS = env_int("ZEROLOCK_HTTP_THREADS", 8)
# Sliding-window rate limits, requests per minute (a key's own limit overrides
# the per-key default). The client IP is REMOTE_ADDR: no proxy headers trusted.
ZEROLOCK_RATE_LIMIT_PER_MINUTE = env_int("ZEROLOCK_RATE_LIMIT_PER_MINUTE", 1000)
ZEROLOCK_RATE_LIMIT_IP_PER_MINUTE = env_int("ZEROLOCK_RATE_LIMIT_IP_PER_MINUTE", 1000)
# How long a process may trust a key it has looked up: a revoked or changed key
# is refused everywhere within this time. 0 looks the key up on every request.
ZEROLOCK_KEY_CACHE_SECONDS = env_float("ZEROLOCK_KEY_CACHE_SECONDS", 0.5)
# Failed WebSocket handshakes (bad or missing key) allowed per address and minute;
# past it the address's handshakes are refused (close 4429) before any lookup.
ZEROLOCK_WS_FAILED_HANDSHAKES_PER_MINUTE = env_int("ZEROLOCK_WS_FAILED_HANDSHAKES_PER_MINUTE", 100)
# Shard ids one /ws/agents/ socket may subscribe to at once.
ZEROLOCK_MAX_SUBSCRIPTIONS_PER_SOCKET = env_int("ZEROLOCK_MAX_SUBSCRIPTIONS_PER_SOCKET", 1000)
# API requests one /ws/agents/ socket may have in flight (request frames); past
# it a request is answered 429 TOO_MANY_IN_FLIGHT at once (realtime/requests.py).
ZEROLOCK_WS_MAX_IN_FLIGHT = env_int("ZEROLOCK_WS_MAX_IN_FLIGHT", 64)
# Presence (GET /api/agents): each process renews its agent sockets' sessions this
# often, and a session not renewed for the timeout is gone (a process killed with
# -9 loses its agents after at most timeout + heartbeat).
ZEROLOCK_SESSION_HEARTBEAT_SECONDS = env_float("ZEROLOCK_SESSION_HEARTBEAT_SECONDS", 1.0)
ZEROLOCK_SESSION_TIMEOUT_SECONDS = env_float("ZEROLOCK_SESSION_TIMEOUT_SECONDS", 4.0)
# Watches one key may hold open in one server process: GET /api/watch streams
# and /ws/agents/ watches together.
ZEROLOCK_MAX_WATCHES_PER_KEY = env_int("ZEROLOCK_MAX_WATCHES_PER_KEY", 100)
# An Idempotency-Key still "in progress" after this long is taken over by its
# retry (coordination/idempotency.py): the copy holding it was most likely killed
# between its write and its answer. Safe at any age (a taken-over copy can no
# longer apply), so this only trades waiting retries against live copies refused.
ZEROLOCK_IDEMPOTENCY_TAKEOVER_SECONDS = env_float("ZEROLOCK_IDEMPOTENCY_TAKEOVER_SECONDS", 10.0)
# Live path reservations one key may hold; past it, 409 TOO_MANY_RESERVATIONS.
# Every new reservation is compared with all the live ones, so their number is
# the cost of each creation.
ZEROLOCK_MAX_RESERVATIONS_PER_KEY = env_int("ZEROLOCK_MAX_RESERVATIONS_PER_KEY", 500)
# Glob steps (coordination/globs.py, "Cost") one reservation create, check or
# ?path= listing may spend comparing patterns and paths; past it, 400
# RESERVATION_TOO_COSTLY and nothing written. A step is about a microsecond,
# so this holds a request to about half a second of CPU; ordinary patterns
# ("src/app/**/*.py") cost a few dozen steps a pair.
ZEROLOCK_RESERVATION_BUDGET_STEPS = env_int("ZEROLOCK_RESERVATION_BUDGET_STEPS", 500_000)
# Live standing approval policies one author (a key, or a console user) may hold;
# past it, 409 TOO_MANY_POLICIES. Every approval request is matched against all
# live policies inside the write lock, so their number is the cost of each request.
ZEROLOCK_MAX_POLICIES_PER_AUTHOR = env_int("ZEROLOCK_MAX_POLICIES_PER_AUTHOR", 100)
# Request bodies above this get 413 PAYLOAD_TOO_LARGE; so does a WebSocket message
# (a Yjs update, an /ws/agents/ frame). uvicorn reads no WebSocket message above
# four times this (zerolock_site/uvicorn_server.py).
ZEROLOCK_MAX_BODY_BYTES = env_int("ZEROLOCK_MAX_BODY_BYTES", 1024 * 1024)
# Off: the web server refuses a body past ZEROLOCK_MAX_BODY_BYTES where it arrives
# (common.errors.over_body_limit), so Django sees none. Django's own check was a
# second copy of that rule, one that read only Content-Length, and its 2.5 MB
# default would refuse what a raised limit allows.
DATA_UPLOAD_MAX_MEMORY_SIZE = None
# An additive shard's Yjs document, encoded, may not grow past this: a write that
# would take it past gets 413 SHARD_TOO_LARGE (shards/services.py). Every Yjs
# client receives the whole document when it connects, and a process that has not
# cached it rebuilds it under the write lock (docs/decisions.md).
ZEROLOCK_MAX_SHARD_BYTES = env_int("ZEROLOCK_MAX_SHARD_BYTES", 16 * 1024 * 1024)
# A request line and headers larger than this get 431 (zerolock_site/uvicorn_server.py).
ZEROLOCK_MAX_HEAD_BYTES = env_int("ZEROLOCK_MAX_HEAD_BYTES", 64 * 1024)
# How long uvicorn keeps an idle kept-alive connection: well above clients' own
# pool expiry (httpx: 5 s), so the server is never the one to close first.
ZEROLOCK_KEEP_ALIVE_SECONDS = env_int("ZEROLOCK_KEEP_ALIVE_SECONDS", 120)
# uvicorn's own log level (its start and stop lines, in the supervisor's log).
ZEROLOCK_SERVER_LOG_LEVEL = os.environ.get("ZEROLOCK_SERVER_LOG_LEVEL", "info")
# How long a request in flight at shutdown may take to finish before it is
# answered 503 instead (below the supervisor's ZEROLOCK_STOP_SECONDS, which the
# supervisor reads itself: it runs before Django is configured).
ZEROLOCK_DRAIN_SECONDS = env_float("ZEROLOCK_DRAIN_SECONDS", 4.0)
# The port `make run` serves on (the supervisor binds it); bootstrap prints
# addresses with it.
PORT = os.environ.get("PORT", "8000")
# Webhook deliveries (approvals/webhooks.py): retries back off
# RETRY_BASE_SECONDS x 2^n, each wait at most RETRY_MAX_SECONDS, up to MAX_ATTEMPTS
# tries of TIMEOUT_SECONDS each. The defaults keep trying for about 6.4 hours (6
# attempts of 10 s doubling gave up after 5 minutes: a receiver restarted over
# lunch lost every event).
ZEROLOCK_WEBHOOK_RETRY_BASE_SECONDS = env_float("ZEROLOCK_WEBHOOK_RETRY_BASE_SECONDS", 10.0)
ZEROLOCK_WEBHOOK_RETRY_MAX_SECONDS = env_float("ZEROLOCK_WEBHOOK_RETRY_MAX_SECONDS", 3600.0)
ZEROLOCK_WEBHOOK_MAX_ATTEMPTS = int(env_float("ZEROLOCK_WEBHOOK_MAX_ATTEMPTS", 15))
# Where people reach this server: webhook payloads link the console with it
# (a receiver, a chat message or a mail needs an absolute address).
ZEROLOCK_PUBLIC_URL = os.environ.get("ZEROLOCK_PUBLIC_URL", f"http://localhost:{PORT}").rstrip("/")
ZEROLOCK_WEBHOOK_TIMEOUT_SECONDS = env_float("ZEROLOCK_WEBHOOK_TIMEOUT_SECONDS", 5.0)
# Email to risk officers (approvals/emails.py), sent by the worker through Django's
# SMTP backend; retried on the webhook schedule above. Django's own names. No
# EMAIL_HOST: email is off (nothing is recorded; the console says so).
EMAIL_HOST = os.environ.get("EMAIL_HOST", "").strip()
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")  # never logged
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
# A dead mail server costs the worker at most this per attempt (Django's default
# is no timeout: an attempt could hang a worker slot for good).
EMAIL_TIMEOUT = env_float("EMAIL_TIMEOUT", 10.0)
ZEROLOCK_EMAIL_FROM = os.environ.get("ZEROLOCK_EMAIL_FROM", "ZeroLock <zerolock@localhost>")
DEFAULT_FROM_EMAIL = SERVER_EMAIL = ZEROLOCK_EMAIL_FROM
# The reminder mail (approval.expiring) goes this long before a pending request
# expires: the same lead as a webhook subscription's default.
ZEROLOCK_APPROVAL_REMINDER_SECONDS = env_int("ZEROLOCK_APPROVAL_REMINDER_SECONDS", 300)
# A connection that has not sent a whole request head this long after it opened
# (or, kept alive, after the first byte of its next request) is closed: 408 if a
# head had begun, nothing if it stayed silent. Counted from the start, so a head
# dripped a byte at a time gains nothing by it.
ZEROLOCK_HEAD_TIMEOUT_SECONDS = env_float("ZEROLOCK_HEAD_TIMEOUT_SECONDS", 15)


def _default_max_connections() -> int:
    """Well below the descriptors a process may open (the server raises its soft
    RLIMIT_NOFILE to the hard one before it reads this), leaving room for the
    database, log and broker files and the connections being refused."""
    import resource

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return 4096
    return min(4096, max(soft - 512, soft // 2))


# Connections one web process holds at once, and from one client address (HTTP
# and WebSockets alike); past either, a new one gets 503 SERVER_BUSY and is closed.
ZEROLOCK_MAX_CONNECTIONS = env_int("ZEROLOCK_MAX_CONNECTIONS", _default_max_connections())
ZEROLOCK_MAX_CONNECTIONS_PER_ADDRESS = env_int("ZEROLOCK_MAX_CONNECTIONS_PER_ADDRESS", 1024)
# JSON bodies nested deeper than this get 400 (json.loads recurses per level and
# failed near 1,000; values in the tests nest a handful of levels).
ZEROLOCK_MAX_JSON_DEPTH = env_int("ZEROLOCK_MAX_JSON_DEPTH", 64)
# A text shard's delta makes at most this many edits (runs of inserts and deletes
# between retains): pycrdt walks the Text for each one, under the write lock
# (20,000 edits: 0.4 s; the 1 MiB body alone allows 40,000: 1.6 s. shards/crdt.py).
ZEROLOCK_MAX_DELTA_EDITS = env_int("ZEROLOCK_MAX_DELTA_EDITS", 20_000)
# List pages (shards, audit, history) stop adding items once their JSON would
# pass this many bytes, and say `next`; a single item larger than it still goes
# out alone. Keeps memory flat when values are large.
ZEROLOCK_LIST_MAX_BYTES = env_int("ZEROLOCK_LIST_MAX_BYTES", 4 * 1024 * 1024)
# Record reads in a background thread, in batches (see shards/deliveries.py).
ZEROLOCK_DELIVERY_WRITE_BEHIND = env_bool("ZEROLOCK_DELIVERY_WRITE_BEHIND", True)
# Metrics (commit samples, counters, socket gauges) are written by a background
# thread every 0.5 s; tests that read them right away write them inline.
ZEROLOCK_METRICS_WRITE_BEHIND = env_bool("ZEROLOCK_METRICS_WRITE_BEHIND", True)
# Audit records of commits refused before the write lock (already stale), in
# batches every 0.2 s (audit/rejections.py).
ZEROLOCK_REJECTION_WRITE_BEHIND = env_bool("ZEROLOCK_REJECTION_WRITE_BEHIND", True)
# How long delivery-log rows (who read which version) are kept.
ZEROLOCK_DELIVERY_RETENTION_DAYS = env_int("ZEROLOCK_DELIVERY_RETENTION_DAYS", 30)
# Page size of list endpoints.
ZEROLOCK_PAGE_SIZE = env_int("ZEROLOCK_PAGE_SIZE", 100)
# Approval diffs are computed once, at request time, within these caps; past
# one, the approval carries "diff": null and says why (approvals/diffs.py).
ZEROLOCK_APPROVAL_DIFF_MAX_BYTES = env_int("ZEROLOCK_APPROVAL_DIFF_MAX_BYTES", 256 * 1024)
ZEROLOCK_APPROVAL_DIFF_MAX_MS = env_int("ZEROLOCK_APPROVAL_DIFF_MAX_MS", 2000)
# Proposed values nested deeper than this are refused (400); deeper shard values
# are shown as "too deep" rather than diffed or pretty-printed.
ZEROLOCK_APPROVAL_MAX_DEPTH = env_int("ZEROLOCK_APPROVAL_MAX_DEPTH", 100)
# A shard's value_schema: at most this many bytes as compact JSON and this many
# levels of nesting (400 VALIDATION_ERROR above); see shards/value_schema.py.
ZEROLOCK_SCHEMA_MAX_BYTES = env_int("ZEROLOCK_SCHEMA_MAX_BYTES", 64 * 1024)
ZEROLOCK_SCHEMA_MAX_DEPTH = env_int("ZEROLOCK_SCHEMA_MAX_DEPTH", 32)
# Subschemas a value_schema may apply at one place in a value (anyOf, oneOf,
# allOf, not, if/then/else, refs, counted together); wider is refused at create
# with 400 SCHEMA_TOO_COSTLY, since every item below that place pays for each.
ZEROLOCK_SCHEMA_MAX_BRANCHES = env_int("ZEROLOCK_SCHEMA_MAX_BRANCHES", 512)
# CPU time validating one value against a value_schema may take; past it the
# write gets 400 SCHEMA_TOO_COSTLY. 200 ms holds about 250 KB of ordinary
# records (bench/schema_cost.py), and keeps a flood of costly commits from
# holding every HTTP thread for long.
ZEROLOCK_SCHEMA_BUDGET_MS = env_int("ZEROLOCK_SCHEMA_BUDGET_MS", 200)

# A quorum counts principals: a console user, or an API key (a key that belongs
# to a user counts as that user). True: only people count; a key that belongs
# to no user may not decide (docs/api.md, "Approve or reject").
ZEROLOCK_APPROVALS_DISTINCT_USERS = env_bool("ZEROLOCK_APPROVALS_DISTINCT_USERS", False)

# --- I18N, static ------------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "staticfiles"

LOG_LEVEL = os.environ.get("LOG_LEVEL", "INFO").upper()
# Beat's "Scheduler: Sending due task" every tick, and the worker's "Task ...
# received" and "... succeeded" for every task: an idle `make run` printed 270
# of these a minute, and the first-run credentials scrolled out of sight. They
# show at LOG_LEVEL=DEBUG; warnings and errors (a task that failed) always do.
_ROUTINE_TASK_LEVEL = "DEBUG" if LOG_LEVEL == "DEBUG" else "WARNING"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        # Daphne (ZEROLOCK_SERVER=daphne) logs every request at INFO; that drowns
        # everything under load.
        "django.channels.server": {"level": "WARNING"},
        "daphne": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},
        "celery.beat": {"level": _ROUTINE_TASK_LEVEL},
        "celery.worker.strategy": {"level": _ROUTINE_TASK_LEVEL},
        "celery.app.trace": {"level": _ROUTINE_TASK_LEVEL},
    },
}
