from django.urls import path

from . import views

urlpatterns = [
    path("txn", views.TxnView.as_view(), name="txn"),
    path("agents", views.AgentListView.as_view(), name="agent-list"),
    path("shards/<str:shard_id>/claim", views.ClaimView.as_view(), name="shard-claim"),
    path("leases", views.LeaseListView.as_view(), name="lease-list"),
    path("leases/<str:lease_id>", views.LeaseDetailView.as_view(), name="lease-detail"),
    path(
        "leases/<str:lease_id>/keepalive",
        views.LeaseKeepAliveView.as_view(),
        name="lease-keepalive",
    ),
    path("reservations", views.ReservationListView.as_view(), name="reservation-list"),
    path("reservations/check", views.ReservationCheckView.as_view(), name="reservation-check"),
    path(
        "reservations/<str:reservation_id>",
        views.ReservationDetailView.as_view(),
        name="reservation-detail",
    ),
    path(
        "reservations/<str:reservation_id>/keepalive",
        views.ReservationKeepAliveView.as_view(),
        name="reservation-keepalive",
    ),
]
