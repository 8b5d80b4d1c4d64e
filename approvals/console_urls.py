from django.urls import path

from . import console

urlpatterns = [
    path("", console.queue, name="console-queue"),
    path("queue/rows", console.queue_rows, name="console-queue-rows"),
    path("queue/count", console.pending_count, name="console-pending-count"),
    path("queue/reject", console.bulk_reject, name="console-bulk-reject"),
    path("history", console.history, name="console-history"),
    path("approvals/<str:approval_id>", console.detail, name="console-detail"),
    path("approvals/<str:approval_id>/decide", console.decide, name="console-decide"),
    path(
        "approvals/<str:approval_id>/approve-same-kind",
        console.approve_same_kind,
        name="console-approve-same-kind",
    ),
    path("approvals/<str:approval_id>/edit", console.edit_preview, name="console-edit"),
]
