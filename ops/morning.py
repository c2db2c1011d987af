"""The morning summary: once a day, from ``OPS_SUMMARY_HOUR`` (local time), ops hear
how yesterday went, through every alert channel (a card where the channel sends cards):

* yesterday's runs (due that local day): sent, failed, expired, in doubt; and the
  messages recalled that day;
* the ledger against WeCom's own count, app by app, as the day's check found it
  (``ops.statistics``, a Beijing day; not compared yet: said so);
* today's forecast against WeCom's daily quota (``ops.stats.wave.quota``; unknown
  without ``OPS_WECOM_SEATS``: said so);
* the working-day calendars in use and how far ahead each is covered.

It is one alert event a day (``record_once``, keyed by the day), grouped by nothing,
so that the alert step's grouping, deliveries, retries and retention carry it like any
alert, in any number of steps at once; and its figures are kept in the event's data, so
that its words and its card are written from what was counted, at the time. It is not a
problem: the dashboard's alerts count leaves it out (``NOT_A_PROBLEM``), and its cards
have no button to act with, only the dashboard's link.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from reminders.calendars import coverage as calendar_coverage
from reminders.models import SendLog, TaskRun

from .conf import settings as conf
from .models import AlertEvent, AlertType, StatisticsCheck
from .statistics import BEIJING
from .stats.counts import Counts
from .stats.days import day_bounds
from .stats.wave import quota

SUMMARY = AlertType.DAILY_SUMMARY
# Alerts that tell of no problem: the dashboard's count of alerts leaves them out.
NOT_A_PROBLEM = (SUMMARY,)


def check_morning_summary(now: datetime) -> int:
    """Record today's summary once ``OPS_SUMMARY_HOUR`` has come (local time), once a
    day; 1 when recorded."""
    hour = conf.SUMMARY_HOUR
    local = timezone.localtime(now)
    if hour is None or local.hour < hour:
        return 0
    today = local.date()
    data = figures(now)
    return int(
        AlertEvent.objects.record_once(
            f"summary:{today.isoformat()}",
            SUMMARY,
            occurred_at=now,
            code="summary",
            message="\n".join(lines(data)),
            data=data,
        )
    )


def figures(now: datetime) -> dict[str, Any]:
    """Yesterday's figures as of ``now``, as the event keeps them (JSON)."""
    yesterday = timezone.localtime(now).date() - timedelta(days=1)
    start, end = day_bounds(yesterday)
    rows = (
        TaskRun.objects.filter(due_at__gte=start, due_at__lt=end)
        .values("status")
        .annotate(n=Count("id"))
    )
    counts = Counts.of_statuses({row["status"]: row["n"] for row in rows})
    recalled = SendLog.objects.filter(recalled_at__gte=start, recalled_at__lt=end).count()
    beijing_day = now.astimezone(BEIJING).date() - timedelta(days=1)
    checks = StatisticsCheck.objects.filter(day=beijing_day).order_by("corp_id", "agent_id")
    found = quota(now)
    return {
        "day": yesterday.isoformat(),
        "sent": counts.sent,
        "failed": counts.failed,
        "expired": counts.expired,
        "unknown": counts.unknown,
        "recalled": recalled,
        "wecom_day": beijing_day.isoformat(),
        "wecom": [
            {
                "app": check.app_name or check.agent_id,
                "ours": check.ours,
                "theirs": check.theirs,
                "outcome": check.outcome,
            }
            for check in checks
        ],
        "quota": found.quota,
        "forecast": found.forecast,
        "calendars": [
            {"calendar": one.calendar, "until": one.until.isoformat(), "ending": ending}
            for one in calendar_coverage.covered(timezone.localtime(now).date())
            for ending in [calendar_coverage.is_ending(one)]
        ],
    }


def kept(events: QuerySet[AlertEvent]) -> dict[str, Any]:
    """The figures a summary's event kept (one a day: the last, should a group ever
    hold two); ``{}`` for none."""
    event = events.order_by("occurred_at", "pk").last()
    return event.data if event is not None else {}


def title(data: dict[str, Any]) -> str:
    """The summary's title, in the active language."""
    return _("Yesterday, %(day)s: %(sent)d sent, %(failed)d failed, %(unknown)d in doubt") % {
        "day": data["day"],
        "sent": data["sent"],
        "failed": data["failed"] + data["expired"],
        "unknown": data["unknown"],
    }


def lines(data: dict[str, Any]) -> list[str]:
    """The summary in words, a line a figure, in the active language."""
    said = [
        _(
            "Runs due %(day)s: %(sent)d sent, %(failed)d failed, %(expired)d expired, "
            "%(unknown)d in doubt; %(recalled)d messages recalled."
        )
        % data,
        wecom(data),
        forecast(data),
    ]
    said += [
        (_("Calendar %(calendar)s covered until %(until)s: import the next year.") % one)
        if one["ending"]
        else _("Calendar %(calendar)s covered until %(until)s.") % one
        for one in data["calendars"]
    ] or [_("No working-day calendar in use.")]
    return said


def wecom(data: dict[str, Any]) -> str:
    """The ledger against WeCom's count, in a line."""
    if not data["wecom"]:
        return _("WeCom's count of %(day)s: not compared (yet).") % {"day": data["wecom_day"]}
    apps = "; ".join(
        _("%(app)s: ledger %(ours)d, WeCom %(theirs)s")
        % {**one, "theirs": "?" if one["theirs"] is None else one["theirs"]}
        for one in data["wecom"]
    )
    return _("WeCom's count of %(day)s: %(apps)s.") % {"day": data["wecom_day"], "apps": apps}


def forecast(data: dict[str, Any]) -> str:
    """Today's quota forecast, in a line."""
    if data["quota"] is None:
        return _("Today's WeCom quota: unknown (set OPS_WECOM_SEATS).")
    return ngettext(
        "Today's forecast: %(forecast)d message of the quota's %(quota)d.",
        "Today's forecast: %(forecast)d messages of the quota's %(quota)d.",
        data["forecast"],
    ) % {"forecast": data["forecast"], "quota": data["quota"]}
