from django.contrib import admin
from django.urls import include, path
from django.views.generic import TemplateView

urlpatterns = [
    path("", TemplateView.as_view(template_name="home.html"), name="home"),
    path("admin/", admin.site.urls),
    path("api/", include("shards.urls")),
    path("api/", include("approvals.urls")),
    path("accounts/", include("django.contrib.auth.urls")),
    path("console/", include("approvals.console_urls")),
    path("dashboard/", include("dashboard.urls")),
]

# /api/ errors raised outside DRF and the envelope middleware still answer JSON.
handler400 = "common.errors.handler400"
handler403 = "common.errors.handler403"
handler404 = "common.errors.handler404"
handler500 = "common.errors.handler500"
