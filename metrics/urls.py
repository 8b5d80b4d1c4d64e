from django.urls import path

from . import views

urlpatterns = [
    path("metrics/ws", views.WsMetricsView.as_view(), name="metrics-ws"),
]
