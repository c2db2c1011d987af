"""``/metrics`` and ``/healthz``: thin, the work is in ``ops.metrics`` and ``ops.health``."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe
from prometheus_client import CONTENT_TYPE_LATEST

from . import health
from . import metrics as collected
from .access import ALLOWED, WRONG_TOKEN, metrics_access


@require_safe
@never_cache
def metrics(request: HttpRequest) -> HttpResponse:
    refusal = metrics_access(request)
    if refusal != ALLOWED:
        response = HttpResponse(status=refusal)
        if refusal == WRONG_TOKEN:
            response["WWW-Authenticate"] = "Bearer"
        return response
    return HttpResponse(collected.render(), content_type=CONTENT_TYPE_LATEST)


@require_safe
@never_cache
def healthz(request: HttpRequest) -> HttpResponse:
    report = health.check_all()
    return JsonResponse(report.as_dict(), status=200 if report.ok else 503)
