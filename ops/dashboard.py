"""The ops dashboard: a page inside an admin site, and the same numbers as JSON beside it.

    # urls.py: before the admin's own URLs
    admin.site.index_template = "ops/admin/index.html"  # a link on the admin's index
    urlpatterns = [
        path("admin/ops/", ops.dashboard.urls(admin.site)),  # admin/ops/dashboard/
        path("admin/", admin.site.urls),
    ]

``urls(site)`` serves ``dashboard/`` and ``dashboard/data.json`` (names
``ops_dashboard:dashboard`` and ``ops_dashboard:data``) with ``site``'s login, chrome and
run changelist, so a CRM with an admin site of its own passes its site instead. Include
it once per project.

Who may look: anonymous requests are sent to the site's login page, as any admin page
does; a signed-in user must be staff, active, and allowed to view runs
(``reminders.view_taskrun``, which superusers have), otherwise 403: the dashboard shows
what the run history shows (recipients, error messages), to the same people.

Views are thin: the day comes from ``?date=YYYY-MM-DD`` (default: today in
``settings.TIME_ZONE``; anything else is 400), the numbers from ``ops.stats``, the
page's arrangement from ``ops.dashboard_page``. Besides the day's numbers, as of now
whatever the day: the messages recalled in the last 24 hours (``ops.stats.recalls``),
in the JSON, as in ``reminders_stats --json``, as ``recalled_last_24_hours``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, timedelta
from functools import wraps
from typing import Any

from django.contrib import admin
from django.contrib.admin import AdminSite
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils.translation import gettext as _
from django.views.decorators.http import require_safe

from . import dashboard_page, stats

APP_NAME = "ops_dashboard"
PERMISSION = "reminders.view_taskrun"
View = Callable[..., HttpResponse]


def allowed(site: AdminSite, request: HttpRequest) -> bool:
    return site.has_permission(request) and request.user.has_perm(PERMISSION)


def _guarded(site: AdminSite, view: View, refuse: Callable[[], HttpResponse]) -> View:
    """``site.admin_view`` (login redirect, no caching) plus: 403 for a signed-in user
    who is not staff or may not view runs."""
    inner = site.admin_view(view)

    @wraps(view)
    def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.user.is_authenticated and not allowed(site, request):
            return refuse()
        return inner(request, *args, **kwargs)

    return guarded


def _refuse_page() -> HttpResponse:
    raise PermissionDenied


def _refuse_json() -> HttpResponse:
    return JsonResponse({"error": "forbidden"}, status=403)


class BadDate(ValueError):
    pass


def chosen_day(request: HttpRequest) -> date | None:
    """The ``date`` query parameter; None without one (today)."""
    raw = request.GET.get("date", "").strip()
    if not raw:
        return None
    try:
        return stats.parse_day(raw)
    except ValueError:
        raise BadDate(raw) from None


def page(site: AdminSite) -> View:
    @require_safe
    def dashboard(request: HttpRequest) -> HttpResponse:
        try:
            day = chosen_day(request)
        except BadDate as exc:
            return HttpResponseBadRequest(
                _("Not a date: %(value)s (expected YYYY-MM-DD).") % {"value": exc}
            )
        numbers = stats.compute(day)
        context = {
            **site.each_context(request),
            **dashboard_page.context(numbers, site, request),
            **dashboard_page.recalls(numbers.recalled, site, request),
            "title": _("Reminders dashboard"),
            "subtitle": numbers.day.isoformat(),
            "previous_day": (numbers.day - timedelta(days=1)).isoformat(),
            "next_day": (numbers.day + timedelta(days=1)).isoformat(),
            "is_today": numbers.day == stats.today(numbers.now),
        }
        request.current_app = site.name
        return TemplateResponse(request, "ops/dashboard.html", context)

    return dashboard


def data(site: AdminSite) -> View:
    @require_safe
    def dashboard_data(request: HttpRequest) -> HttpResponse:
        try:
            day = chosen_day(request)
        except BadDate as exc:
            return JsonResponse({"error": f"not a date: {exc}"}, status=400)
        numbers = stats.compute(day)
        return JsonResponse(numbers.as_dict(), json_dumps_params={"indent": 1})

    return dashboard_data


def urls(site: AdminSite | None = None) -> tuple[list[URLPattern], str, str]:
    """The dashboard's URLs for ``site`` (default: ``django.contrib.admin.site``), to
    pass to ``path()`` as ``include()`` would be."""
    site = site or admin.site
    patterns = [
        path("dashboard/", _guarded(site, page(site), _refuse_page), name="dashboard"),
        path("dashboard/data.json", _guarded(site, data(site), _refuse_json), name="data"),
    ]
    return patterns, APP_NAME, APP_NAME
