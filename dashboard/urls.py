from django.urls import path

from . import views

urlpatterns = [
    path("shards", views.shards_page, name="dashboard-shards"),
    path("shard-rows", views.shard_rows, name="dashboard-shard-rows"),
    path("shards/<str:shard_id>", views.shard_page, name="dashboard-shard"),
    path("shards/<str:shard_id>/live", views.shard_live, name="dashboard-shard-live"),
    path("metrics", views.metrics_page, name="dashboard-metrics"),
    path("metrics.json", views.metrics_data, name="dashboard-metrics-data"),
]
