from collections.abc import Callable

from django.http import HttpResponseBase
from django.urls import path
from django.views.generic import RedirectView

from . import views


def _to(name: str) -> Callable[..., HttpResponseBase]:
    """A temporary redirect to a named page, keeping the query string."""
    return RedirectView.as_view(pattern_name=name, permanent=False, query_string=True)


urlpatterns = [
    # /dashboard/ is the address the README gives, and was a 404. The pages have
    # no trailing slash (APPEND_SLASH only adds one), so their slashed forms,
    # 404s too, lead to them.
    path("", _to("dashboard-shards"), name="dashboard"),
    path("shards", views.shards_page, name="dashboard-shards"),
    path("shards/", _to("dashboard-shards")),
    path("shard-rows", views.shard_rows, name="dashboard-shard-rows"),
    path("shards/<str:shard_id>", views.shard_page, name="dashboard-shard"),
    path("shards/<str:shard_id>/live", views.shard_live, name="dashboard-shard-live"),
    path("agents", views.agents_page, name="dashboard-agents"),
    path("agents/", _to("dashboard-agents")),
    path("agent-rows", views.agent_rows, name="dashboard-agent-rows"),
    path("metrics", views.metrics_page, name="dashboard-metrics"),
    path("metrics/", _to("dashboard-metrics")),
    path("metrics.json", views.metrics_data, name="dashboard-metrics-data"),
]
