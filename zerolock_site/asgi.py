import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "zerolock_site.settings")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

application = ProtocolTypeRouter(
    {
        # Static files (admin, console assets) straight from the app folders: the
        # pages are low-traffic and this spares a collectstatic step and a proxy.
        "http": ASGIStaticFilesHandler(django_asgi_app),
    }
)
