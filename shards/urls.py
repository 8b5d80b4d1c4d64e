from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from . import views

urlpatterns = [
    path("shards", views.ShardListView.as_view(), name="shard-list"),
    path("shards/<str:shard_id>", views.ShardDetailView.as_view(), name="shard-detail"),
    path("shards/<str:shard_id>/commit", views.ShardCommitView.as_view(), name="shard-commit"),
    path("shards/<str:shard_id>/history", views.ShardHistoryView.as_view(), name="shard-history"),
    path("audit", views.AuditListView.as_view(), name="audit-list"),
    path("txn", views.TxnView.as_view(), name="txn"),
    path("leases", views.LeaseListView.as_view(), name="lease-list"),
    path("leases/<str:lease_id>", views.LeaseDetailView.as_view(), name="lease-detail"),
    path(
        "leases/<str:lease_id>/keepalive",
        views.LeaseKeepAliveView.as_view(),
        name="lease-keepalive",
    ),
    path("metrics", views.MetricsView.as_view(), name="metrics"),
    path("metrics/ws", views.WsMetricsView.as_view(), name="metrics-ws"),
    path("health", views.HealthView.as_view(), name="health"),
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
