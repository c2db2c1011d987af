"""What the dashboard page shows, built from ``ops.stats``: rows with their links into the
admin, and the charts. No number is computed here, only arranged and written.

Links go to the run changelist of the admin site the dashboard belongs to, filtered with
the admin's own query parameters (``status__exact``, ``due_at__gte`` …), so that the
runs behind a number are one click away and, from there, the changelist's "Retry
selected failed runs now" action. A link is only made when that site registers runs and
its ``TaskRunAdmin.lookup_allowed`` accepts every parameter (a filter on the task's
channel, say, needs ``task__channel`` in its ``list_filter``): a link never leads to the
admin's "bad lookup" refusal.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.contrib.admin import AdminSite, ModelAdmin
from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import pgettext

from reminders import kinds as kind_registry
from reminders.models import QUIET_CODE, Priority, SendLog, TaskRun

from . import dashboard_health
from .conf import settings as conf
from .stats import (
    PENDING,
    PER_HOUR,
    PER_MINUTE,
    PLAN_HORIZON,
    Bucket,
    Counts,
    PriorityPlan,
    Stats,
    Wave,
    local_iso,
    zone_name,
)
from .stats import format as fmt
from .stats.failures import PROBLEMS
from .stats.wave import app_paces
from .svg import Series, bar_chart, line_chart, stacked_bar_chart

# Every status but cancelled: the runs a day's plan holds.
PLANNED = tuple(status for status in TaskRun.Status.values if status != TaskRun.Status.CANCELLED)


def columns() -> list[tuple[str, str, tuple[str, ...]]]:
    """The day's columns in the order of the tables: key, label, the statuses a link
    filters on (none: any). Labels are translated per request, so built per call."""
    return [
        ("planned", _("Planned"), PLANNED),
        ("pending", _("Pending"), PENDING),
        ("sent", _("Sent"), (TaskRun.Status.SENT,)),
        ("failed", _("Failed"), (TaskRun.Status.FAILED,)),
        ("unknown", _("Unknown"), (TaskRun.Status.UNKNOWN,)),
        ("expired", _("Expired"), (TaskRun.Status.EXPIRED,)),
        ("skipped", _("Skipped"), (TaskRun.Status.SKIPPED,)),
    ]


class RunLinks:
    """URLs of the site's run changelist filtered by the admin's query parameters."""

    def __init__(self, site: AdminSite, request: HttpRequest) -> None:
        self.request = request
        self.site = site
        self.admin: ModelAdmin[TaskRun] | None = None
        self.base = ""
        if site.is_registered(TaskRun):
            admin = site.get_model_admin(TaskRun)
            try:
                base = reverse(f"{site.name}:reminders_taskrun_changelist")
            except NoReverseMatch:
                return
            if admin.has_view_or_change_permission(request):
                self.admin, self.base = admin, base

    def runs(self, **params: str) -> str | None:
        if self.admin is None:
            return None
        for lookup, value in params.items():
            if not self.admin.lookup_allowed(lookup, value, self.request):
                return None
        return f"{self.base}?{urlencode(params)}"

    def due(
        self, start: datetime, end: datetime, statuses: Iterable[str] = (), **params: str
    ) -> str | None:
        """Runs due in ``[start, end)`` in one of ``statuses`` (any if none)."""
        chosen = list(statuses)
        if len(chosen) == 1:
            params["status__exact"] = chosen[0]
        elif chosen:
            params["status__in"] = ",".join(chosen)
        return self.runs(**params, due_at__gte=local_iso(start), due_at__lt=local_iso(end))

    def run(self, pk: int) -> str | None:
        if self.admin is None:
            return None
        return reverse(f"{self.site.name}:reminders_taskrun_change", args=[pk])


def _status_label(status: str) -> str:
    """A run's status as the admin says it, in the request's language."""
    try:
        return str(TaskRun.Status(status).label)
    except ValueError:
        return status


@dataclass(frozen=True)
class Cell:
    value: str
    link: str | None = None
    alert: bool = False
    label: str = ""


def _count_cells(
    counts: Counts, links: RunLinks, start: datetime, end: datetime, **params: str
) -> list[Cell]:
    data = counts.as_dict()
    cells = []
    for key, label, statuses in columns():
        n = data[key]
        link = links.due(start, end, statuses, **params) if n else None
        alert = key in ("failed", "unknown", "expired") and n > 0
        cells.append(Cell(str(n), link, alert, label))
    return cells


def context(stats: Stats, site: AdminSite, request: HttpRequest) -> dict[str, Any]:
    links = RunLinks(site, request)
    start, end = stats.start, stats.end
    return {
        "stats": stats,
        "health": dashboard_health.parts(stats, site, request, links.due(start, end, PROBLEMS)),
        "columns": [label for _key, label, _s in columns()],
        "totals": _count_cells(stats.totals, links, start, end),
        "totals_rate": fmt.rate(stats.totals.success_rate),
        "duration": (fmt.seconds(stats.duration.p50), fmt.seconds(stats.duration.p95)),
        "lateness": (fmt.seconds(stats.lateness.p50), fmt.seconds(stats.lateness.p95)),
        "kinds": _kind_rows(stats, links),
        "channels": _channel_rows(stats, links),
        "failures": _failure_rows(stats, links),
        "latest": _latest_rows(stats, links),
        "plan": [_plan_row(plan, links, stats.now) for plan in stats.plan],
        "schedulers": [
            {"beat": beat, "age": fmt.seconds(beat.age_seconds)} for beat in stats.schedulers
        ],
        "workers": stats.workers,
        "oldest_job": fmt.seconds(stats.workers.oldest_wait_seconds),
        "heartbeat_max_age": fmt.seconds(stats.heartbeat_max_age),
        "charts": charts(stats, links),
        "runs_link": links.due(start, end),
        "wave": wave(stats.wave, links) if stats.wave is not None else None,
    }


def recalls(count: int, site: AdminSite, request: HttpRequest) -> dict[str, Any]:
    """The messages recalled in the last 24 hours, linked to them in the send log (its
    filter ``recall=day``) where the site registers the ledger and the user may see it."""
    link = None
    if count and site.is_registered(SendLog):
        admin = site.get_model_admin(SendLog)
        try:
            base = reverse(f"{site.name}:reminders_sendlog_changelist")
        except NoReverseMatch:
            base = ""
        if base and admin.has_view_or_change_permission(request):
            link = f"{base}?{urlencode({'recall': 'day'})}"
    return {"recalled": Cell(str(count), link, label=_("recalled in the last 24 hours"))}


def _kind_rows(stats: Stats, links: RunLinks) -> list[dict[str, Any]]:
    """The day's counts, durations and lateness of each kind."""
    start, end = stats.start, stats.end
    return [
        {
            "kind": kind.kind,
            # What ops read: the kind's translated label, not its code.
            "label": kind_registry.label(kind.kind),
            "link": links.due(start, end, task__kind__exact=kind.kind),
            "cells": _count_cells(kind.counts, links, start, end, task__kind__exact=kind.kind),
            "duration": (fmt.seconds(kind.duration.p50), fmt.seconds(kind.duration.p95)),
            "lateness": (fmt.seconds(kind.lateness.p50), fmt.seconds(kind.lateness.p95)),
        }
        for kind in stats.kinds
    ]


def _channel_rows(stats: Stats, links: RunLinks) -> list[dict[str, Any]]:
    """Each channel's success rate over the day and over the week."""
    return [
        {
            "channel": channel.channel,
            "link": links.due(stats.start, stats.end, task__channel__exact=channel.channel),
            "day": _rate_cells(channel.day),
            "week": _rate_cells(channel.week),
        }
        for channel in stats.channels
    ]


def _failure_rows(stats: Stats, links: RunLinks) -> list[dict[str, Any]]:
    """The day's failures grouped by status and error code, each with an example."""
    return [
        {
            "status": group.status,
            "status_label": _status_label(group.status),
            "code": group.code,
            "count": group.count,
            "last": group.last_finished_at,
            "example": group.example,
            "link": links.due(
                stats.start, stats.end, (group.status,), error_code__exact=group.code
            ),
        }
        for group in stats.failures
    ]


def _latest_rows(stats: Stats, links: RunLinks) -> list[dict[str, Any]]:
    """The latest failed runs, each linked to its page in the admin."""
    return [
        {
            "run": run,
            "kind_label": kind_registry.label(run.kind),
            "status_label": _status_label(run.status),
            "link": links.run(run.id),
        }
        for run in stats.latest_failures
    ]


def _plan_row(plan: PriorityPlan, links: RunLinks, now: datetime) -> dict[str, Any]:
    """One priority's plan: what falls due in the next hour, what is overdue (the
    backlog, marked when there is any), the queue, and the runs in a digest not sent
    yet (linked to them: each names its digest)."""
    rank = str(Priority(plan.priority).rank)
    waiting = {"status__in": ",".join(TaskRun.WAITING), "priority__exact": rank}
    return {
        "priority": plan.priority,
        "label": Priority(plan.priority).label,
        "next_hour": Cell(
            str(plan.next_hour),
            links.runs(
                **waiting,
                next_attempt_at__gt=local_iso(now),
                next_attempt_at__lte=local_iso(now + PLAN_HORIZON),
            )
            if plan.next_hour
            else None,
        ),
        "backlog": Cell(
            str(plan.backlog),
            links.runs(**waiting, next_attempt_at__lte=local_iso(now)) if plan.backlog else None,
            alert=plan.backlog > 0,
        ),
        "oldest": fmt.seconds(plan.oldest_seconds),
        "queued": plan.queued,
        "running": plan.running,
        "paused": plan.paused,
        "folded": Cell(
            str(plan.folded),
            links.runs(status__exact=TaskRun.Status.FOLDED, priority__exact=rank)
            if plan.folded
            else None,
        ),
    }


def _rate_cells(counts: Counts) -> dict[str, Any]:
    return {
        "sent": counts.sent,
        "ended": counts.ended,
        "rate": fmt.rate(counts.success_rate),
        # Under the alert's threshold: marked.
        "low": counts.success_rate is not None
        and counts.success_rate < conf.SUCCESS_RATE_THRESHOLD,
    }


def charts(stats: Stats, links: RunLinks) -> list[dict[str, Any]]:
    """The three charts, each with the table of its numbers."""
    # With a context: "sent" alone is the alert delivery's field (when it was sent).
    sent, failed = pgettext("runs", "sent"), pgettext("runs", "failed")
    return [
        _hours_chart(stats, links, sent, failed),
        _lateness_chart(stats),
        _days_chart(stats, links, sent, failed),
    ]


def _bars(buckets: list[Bucket], status: str, label: str, links: RunLinks) -> Series:
    """The runs of ``status`` in each bucket, each bar linked to them."""
    values = [float(getattr(b.counts, status)) for b in buckets]
    return Series(
        label,
        values,
        [
            links.due(b.start, b.end, (status,)) if v else None
            for b, v in zip(buckets, values, strict=True)
        ],
    )


def _hours_chart(stats: Stats, links: RunLinks, sent: str, failed: str) -> dict[str, Any]:
    """Sent and failed runs per hour of the day."""
    return {
        "id": "chart-hours",
        "svg": bar_chart(
            "chart-hours",
            title=_("Sent and failed per hour, %(day)s") % {"day": stats.day.isoformat()},
            desc=_("Runs due in each hour of the day that were sent, and that failed."),
            labels=[hour.label for hour in stats.hours],
            series=[
                _bars(stats.hours, "sent", sent, links),
                _bars(stats.hours, "failed", failed, links),
            ],
            x_label=_("hour due (%(zone)s)") % {"zone": stats.time_zone},
            y_label=_("runs"),
        ),
        "head": [_("hour"), sent, failed],
        "rows": [(h.label, h.counts.sent, h.counts.failed) for h in stats.hours],
    }


def _lateness_chart(stats: Stats) -> dict[str, Any]:
    """The 50th and 95th percentile of lateness per hour of the day."""
    p50 = [hour.lateness.p50 if hour.lateness else None for hour in stats.hours]
    p95 = [hour.lateness.p95 if hour.lateness else None for hour in stats.hours]
    return {
        "id": "chart-lateness",
        "svg": line_chart(
            "chart-lateness",
            title=_("Lateness per hour, %(day)s") % {"day": stats.day.isoformat()},
            desc=_(
                "50th and 95th percentile of the time from due to sent, of the runs "
                "due in each hour that were sent; a gap is an hour with none."
            ),
            labels=[hour.label for hour in stats.hours],
            series=[Series("p50", p50), Series("p95", p95)],
            x_label=_("hour due (%(zone)s)") % {"zone": stats.time_zone},
            y_label=_("seconds late"),
            fmt=lambda v: f"{v:g}",
        ),
        "head": [_("hour"), "p50", "p95"],
        "rows": [
            (h.label, fmt.seconds(a), fmt.seconds(b))
            for h, a, b in zip(stats.hours, p50, p95, strict=True)
        ],
    }


def _days_chart(stats: Stats, links: RunLinks, sent: str, failed: str) -> dict[str, Any]:
    """Sent and failed runs per day, the last days."""
    return {
        "id": "chart-days",
        "svg": bar_chart(
            "chart-days",
            title=_("Sent and failed per day, the last %(n)d days") % {"n": len(stats.days)},
            desc=_("Runs due each day that were sent, and that failed."),
            labels=[day.label[5:] for day in stats.days],  # MM-DD
            series=[
                _bars(stats.days, "sent", sent, links),
                _bars(stats.days, "failed", failed, links),
            ],
            x_label=_("day due"),
            y_label=_("runs"),
        ),
        "head": [pgettext("column", "day"), sent, failed],
        "rows": [(d.label, d.counts.sent, d.counts.failed) for d in stats.days],
    }


# The wave ahead ------------------------------------------------------------------------


def wave(wave: Wave, links: RunLinks) -> dict[str, Any]:
    """The next hour by minute and kind (a stacked chart and its table), the members
    nearest WeCom's limits, the runs held by quiet hours, the daily quota."""
    waiting = ",".join(TaskRun.WAITING)
    kinds = wave.kinds
    quota = wave.quota
    return {
        "wave": wave,
        "svg": _wave_chart(wave),
        "head": [_("minute"), *[kind_registry.label(kind) for kind in kinds], _("total")],
        "rows": [
            (minute.label, *[minute.kinds.get(kind, 0) for kind in kinds], minute.total)
            for minute in wave.minutes
            if minute.total
        ],
        "peak": wave.peak,
        "members": _wave_members(wave, links, waiting),
        "per_minute": PER_MINUTE,
        "per_hour": PER_HOUR,
        "quiet": [
            {
                "held": held,
                "label": kind_registry.label(held.kind),
                "link": links.runs(
                    status__in=waiting, error_code__exact=QUIET_CODE, task__kind__exact=held.kind
                ),
            }
            for held in wave.quiet
        ],
        "quota": quota,
        "quota_channels": ", ".join(quota.channels) or fmt.NOTHING,
        "quota_cells": [
            (_("Daily quota"), str(quota.quota) if quota.quota is not None else None, False),
            (_("Sent today"), str(quota.used), False),
            (_("Forecast for today"), str(quota.forecast), quota.today_over),
            (_("Tomorrow"), str(quota.tomorrow), quota.tomorrow_over),
        ],
    }


def _wave_chart(wave: Wave) -> SafeString:
    """The next hour's waiting runs by minute, stacked by kind."""
    return stacked_bar_chart(
        "chart-wave",
        title=_("The next hour, minute by minute"),
        desc=_(
            "Waiting runs by the minute of their next attempt, stacked by kind; the backlog "
            "already due is in the plan above."
        ),
        labels=[minute.label for minute in wave.minutes],
        series=[
            Series(
                kind_registry.label(kind),
                [float(minute.kinds.get(kind, 0)) for minute in wave.minutes],
            )
            for kind in wave.kinds
        ],
        x_label=_("minute (%(zone)s)") % {"zone": zone_name()},
        y_label=_("runs"),
        limits=[
            (_("%(channels)s: %(pace)s a minute") % {"channels": names, "pace": f"{pace:g}"}, pace)
            for names, pace in app_paces()
        ],
    )


def _wave_members(wave: Wave, links: RunLinks, waiting: str) -> list[dict[str, Any]]:
    """The members nearest WeCom's limits, each count linked to their waiting runs."""
    return [
        {
            "member": member,
            "next_hour": Cell(
                str(member.next_hour),
                links.runs(status__in=waiting, task__recipient__exact=member.recipient),
                alert=member.next_hour > PER_HOUR,
            ),
            "busiest": Cell(str(member.busiest_minute), alert=member.busiest_minute > PER_MINUTE),
            "busiest_at": member.busiest_at,
            "share": fmt.rate(member.closeness),
        }
        for member in wave.members
    ]
