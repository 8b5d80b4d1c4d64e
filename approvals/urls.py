from django.urls import path

from . import policy_views, views

urlpatterns = [
    path("approval-policies", policy_views.PolicyListView.as_view(), name="approval-policies"),
    path(
        "approval-policies/<str:policy_id>",
        policy_views.PolicyDetailView.as_view(),
        name="approval-policy",
    ),
    path("approvals", views.ApprovalListView.as_view(), name="approval-list"),
    path("approvals/request", views.ApprovalRequestView.as_view(), name="approval-request"),
    path("approvals/<str:approval_id>", views.ApprovalDetailView.as_view(), name="approval-detail"),
    path(
        "approvals/<str:approval_id>/approve",
        views.ApprovalDecideView.as_view(approve=True),
        name="approval-approve",
    ),
    path(
        "approvals/<str:approval_id>/reject",
        views.ApprovalRejectView.as_view(),
        name="approval-reject",
    ),
    path(
        "approvals/<str:approval_id>/request-changes",
        views.ApprovalRequestChangesView.as_view(),
        name="approval-request-changes",
    ),
]
