from django.conf import settings
from django.contrib import admin
from django.urls import URLPattern, URLResolver, include, path
from django.views.generic import TemplateView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from supervision.views import HealthView
from zerolock_site.floor import floor

api: list[URLPattern | URLResolver] = [
    path("", include("shards.urls")),
    path("", include("coordination.urls")),
    path("", include("approvals.urls")),
    path("", include("access.urls")),
    path("", include("metrics.urls")),
    path("health", HealthView.as_view(), name="health"),
    path(
        "schema",
        SpectacularAPIView.as_view(authentication_classes=[], permission_classes=[]),
        name="schema",
    ),
    path(
        "docs",
        # The split view serves its script as a file: the CSP allows no inline script.
        SpectacularSwaggerSplitView.as_view(
            url_name="schema", authentication_classes=[], permission_classes=[]
        ),
        name="api-docs",
    ),
]

urlpatterns = [
    path("", TemplateView.as_view(template_name="home.html"), name="home"),
    path("admin/", admin.site.urls),
    path("api/", include(api)),
    path("accounts/", include("django.contrib.auth.urls")),
    path("console/", include("approvals.console_urls")),
    path("dashboard/", include("dashboard.urls")),
]

if settings.ZEROLOCK_BENCH_FLOOR:
    urlpatterns.append(path("bench/floor", floor, name="bench-floor"))

# /api/ errors raised outside DRF and the envelope middleware still answer JSON.
handler400 = "zerolock_site.http_errors.handler400"
handler403 = "zerolock_site.http_errors.handler403"
handler404 = "zerolock_site.http_errors.handler404"
handler500 = "zerolock_site.http_errors.handler500"
