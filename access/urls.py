from django.urls import path

from . import views

urlpatterns = [
    path("audit", views.AuditListView.as_view(), name="audit-list"),
    path("metrics", views.MetricsView.as_view(), name="metrics"),
]
