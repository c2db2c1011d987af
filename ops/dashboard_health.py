"""The dashboard's first screen: is anything wrong, and where to act on it.

Five parts, each a state (well, or wrong), a number, a line saying what it counts, and a
link to the list or the page where it is acted on:

* the day's failures: runs failed or expired, and those in doubt (``unknown``), linked
  to those runs in the admin, where they are retried;
* the schedulers: those ticking and those stale (or none at all), linked to their table;
* the working-day calendars: covered far enough ahead, or not (the banner's rule,
  ``reminders.calendars.coverage.is_ending``), linked to the calendar days to import;
* WeCom's daily quota: today's forecast against it, and tomorrow's, linked to the wave
  ahead (unknown without ``OPS_WECOM_SEATS``: said so, and not marked wrong);
* ops' alerts of the last 24 hours, and those whose delivery failed, linked to them.

Only arranged here, from what ``ops.stats`` computed and three small reads (the
calendars in use, and two counts over an indexed column), so that the page still answers
within its budget on a year of history (``benchmarks/dashboard.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

from django.contrib.admin import AdminSite, ModelAdmin
from django.db import models
from django.db.models import Count, Q
from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from reminders.calendars import coverage as calendar_coverage
from reminders.models import CalendarDay

from .models import Alert, AlertDelivery
from .morning import NOT_A_PROBLEM
from .stats import Stats, Wave, local_iso
from .stats import format as fmt


@dataclass(frozen=True)
class Part:
    key: str
    title: str
    value: str
    detail: str
    ok: bool
    link: str | None = None
    # Neither well nor wrong: nothing to judge by (no quota without seats).
    unknown: bool = False


def parts(
    stats: Stats, site: AdminSite, request: HttpRequest, failures_link: str | None
) -> list[Part]:
    """The five parts, in the order shown; ``failures_link``: the admin's run list of
    the day's failed, expired and unknown runs, where this user may see it."""
    return [
        _failures(stats, failures_link),
        _schedulers(stats),
        _calendars(stats, site, request),
        _quota(stats.wave),
        _alerts(stats, site, request),
    ]


def _failures(stats: Stats, link: str | None) -> Part:
    counts = stats.totals
    failed = counts.failed + counts.expired
    return Part(
        "failures",
        _("Failures, %(day)s") % {"day": stats.day.isoformat()},
        str(failed),
        ngettext(
            "failed or expired; %(n)d in doubt", "failed or expired; %(n)d in doubt", counts.unknown
        )
        % {"n": counts.unknown},
        ok=failed == 0 and counts.unknown == 0,
        link=link if failed or counts.unknown else None,
    )


def _schedulers(stats: Stats) -> Part:
    stale = sum(1 for beat in stats.schedulers if beat.stale)
    ticking = len(stats.schedulers) - stale
    if not stats.schedulers:
        detail = _("none is running")
    else:
        detail = ngettext("%(n)d stale", "%(n)d stale", stale) % {"n": stale}
    return Part(
        "schedulers",
        _("Schedulers ticking"),
        str(ticking),
        detail,
        ok=ticking > 0 and stale == 0,
        link="#ops-schedulers",
    )


def _calendars(stats: Stats, site: AdminSite, request: HttpRequest) -> Part:
    covered = calendar_coverage.covered(timezone.localdate(stats.now))
    if not covered:
        return Part("calendars", _("Working-day calendars"), fmt.NOTHING, _("none in use"), ok=True)
    first = min(covered, key=lambda one: one.until)
    ending = calendar_coverage.is_ending(first)
    return Part(
        "calendars",
        _("Working-day calendars"),
        first.until.isoformat(),
        _("%(calendar)s covered until then: import %(year)d")
        % {"calendar": first.calendar, "year": first.next_year}
        if ending
        else _("covered until then (%(calendar)s first)") % {"calendar": first.calendar},
        ok=not ending,
        link=_changelist(site, request, CalendarDay) if ending else None,
    )


def _quota(wave: Wave | None) -> Part:
    title = _("WeCom's quota today")
    if wave is None or wave.quota.quota is None:
        return Part("quota", title, fmt.NOTHING, _("set OPS_WECOM_SEATS"), ok=True, unknown=True)
    quota = wave.quota
    over = quota.today_over or quota.tomorrow_over
    return Part(
        "quota",
        title,
        f"{quota.forecast} / {quota.quota}",
        _("forecast against the quota; tomorrow %(tomorrow)d") % {"tomorrow": quota.tomorrow},
        ok=not over,
        link="#ops-wave",
    )


def _alerts(stats: Stats, site: AdminSite, request: HttpRequest) -> Part:
    since = stats.now - timedelta(hours=24)
    problems = Alert.objects.exclude(type__in=NOT_A_PROBLEM)
    counted = problems.filter(created_at__gte=since).aggregate(
        alerts=Count("id", distinct=True),
        undelivered=Count(
            "deliveries", filter=Q(deliveries__status=AlertDelivery.Status.FAILED), distinct=True
        ),
    )
    count, undelivered = counted["alerts"], counted["undelivered"]
    link = _changelist(site, request, Alert, created_at__gte=local_iso(since)) if count else None
    return Part(
        "alerts",
        _("Alerts, last 24 hours"),
        str(count),
        ngettext("%(n)d not delivered", "%(n)d not delivered", undelivered) % {"n": undelivered},
        ok=count == 0,
        link=link,
    )


def _changelist(
    site: AdminSite, request: HttpRequest, model: type[models.Model], **params: str
) -> str | None:
    """The site's list of ``model``, filtered by ``params``, where this user may see it."""
    if not site.is_registered(model):
        return None
    admin: ModelAdmin[Any] = site.get_model_admin(model)
    if not admin.has_view_or_change_permission(request):
        return None
    meta = model._meta
    try:
        base = reverse(f"{site.name}:{meta.app_label}_{meta.model_name}_changelist")
    except NoReverseMatch:
        return None
    return f"{base}?{urlencode(params)}" if params else base
