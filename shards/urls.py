from django.urls import path

from . import views

urlpatterns = [
    path("shards", views.ShardListView.as_view(), name="shard-list"),
    path("shards/<str:shard_id>", views.ShardDetailView.as_view(), name="shard-detail"),
    path("shards/<str:shard_id>/commit", views.ShardCommitView.as_view(), name="shard-commit"),
    path("shards/<str:shard_id>/history", views.ShardHistoryView.as_view(), name="shard-history"),
]
