"""Include in the CRM's URLconf with ``path("", include("ops.urls"))``: ``/metrics``
(Prometheus, access-controlled) and ``/healthz`` (probes, public)."""

from django.urls import path

from . import views

app_name = "ops"

urlpatterns = [
    path("metrics", views.metrics, name="metrics"),
    path("healthz", views.healthz, name="healthz"),
]
