"""The words of an alert: a title and a body, written once when the alert is opened (so
the record says exactly what ops were told), in ``OPS_ALERT_LANGUAGE``.

Every string is marked for translation (English and Simplified Chinese catalogs). A
digest counts its events and shows a few of them, never all: 500 failures are one
message of a bounded size.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from django.db.models import Count, QuerySet
from django.utils import timezone, translation
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from reminders import kinds

from . import morning
from .conf import settings as conf
from .models import Alert, AlertEvent, AlertType

# The alert step's quota alert (``ops.alerts.DAILY_QUOTA``).
DAILY_QUOTA = AlertType.DAILY_QUOTA

EXAMPLES = 5
CODES = 5
PREFIX = "[reminders] "


def _titles() -> dict[str, Callable[[int, dict[str, str]], str]]:
    def plural(singular: str, many: str) -> Callable[[int, dict[str, str]], str]:
        return lambda n, values: ngettext(singular, many, n) % {"count": n, **values}

    return {
        AlertType.RUN_FAILED: plural(
            "%(count)d run of %(kind)s failed on channel %(channel)s",
            "%(count)d runs of %(kind)s failed on channel %(channel)s",
        ),
        AlertType.CONFIGURATION: plural(
            "Channel %(channel)s is misconfigured: %(count)d run failed",
            "Channel %(channel)s is misconfigured: %(count)d runs failed",
        ),
        AlertType.RUN_UNKNOWN: plural(
            "%(count)d run of %(kind)s on channel %(channel)s may or may not have arrived",
            "%(count)d runs of %(kind)s on channel %(channel)s may or may not have arrived",
        ),
        AlertType.RUN_EXPIRED: plural(
            "%(count)d run of %(kind)s on channel %(channel)s expired unsent",
            "%(count)d runs of %(kind)s on channel %(channel)s expired unsent",
        ),
        AlertType.RUN_STUCK: plural(
            "%(count)d run of %(kind)s on channel %(channel)s is stuck running",
            "%(count)d runs of %(kind)s on channel %(channel)s are stuck running",
        ),
        AlertType.TASK_ERROR: plural(
            "%(count)d error in tasks of kind %(kind)s",
            "%(count)d errors in tasks of kind %(kind)s",
        ),
        AlertType.CALENDAR_UNCOVERED: plural(
            "Calendar %(scope)s is not covered: %(count)d occurrence left to the fallback rule",
            "Calendar %(scope)s is not covered: %(count)d occurrences left to the fallback rule",
        ),
        AlertType.CALENDAR_ENDING: plural(
            "%(count)d working-day calendar runs out soon: enter next year's official schedule",
            "%(count)d working-day calendars run out soon: enter next year's official schedule",
        ),
        AlertType.HEARTBEAT_STALE: plural(
            "%(count)d scheduler stopped ticking",
            "%(count)d schedulers stopped ticking",
        ),
        AlertType.SUCCESS_RATE: plural(
            "Low send success rate on channel %(channel)s (%(count)d check)",
            "Low send success rate on channel %(channel)s (%(count)d checks)",
        ),
        AlertType.STATISTICS_MISMATCH: plural(
            "WeCom's count of app %(scope)s differs from our ledger (%(count)d day)",
            "WeCom's count of app %(scope)s differs from our ledger (%(count)d days)",
        ),
        AlertType.STATISTICS_UNAVAILABLE: plural(
            "WeCom's count of app %(scope)s could not be asked (%(count)d day)",
            "WeCom's count of app %(scope)s could not be asked (%(count)d days)",
        ),
        DAILY_QUOTA: plural(
            "Tomorrow's planned messages exceed WeCom's daily quota (%(count)d check)",
            "Tomorrow's planned messages exceed WeCom's daily quota (%(count)d checks)",
        ),
    }


def _advice() -> dict[str, str]:
    return {
        AlertType.RUN_FAILED: _(
            "Their retries are spent or no retry can help. See the runs in the admin; "
            "retry them once the cause is fixed."
        ),
        AlertType.CONFIGURATION: _(
            "The provider refused our credentials or settings: nothing on this channel "
            "gets through until someone fixes them."
        ),
        AlertType.RUN_UNKNOWN: _(
            "Sending them again was not safe. Ask the recipients, then retry the runs "
            "that did not arrive."
        ),
        AlertType.RUN_EXPIRED: _("Their deadline passed before they could be sent."),
        AlertType.RUN_STUCK: _(
            "They have been running for longer than REMINDERS_RUN_TIMEOUT; their lease "
            "hands them on if their worker died."
        ),
        AlertType.TASK_ERROR: _(
            "These tasks cannot be planned or their messages cannot be rendered; fix them "
            "and resume them in the admin."
        ),
        AlertType.CALENDAR_UNCOVERED: _(
            "Days in a year the working-day calendar does not cover follow its fallback "
            "rule (UNCOVERED: weekdays, Monday to Friday, or skip). Enter the year's official "
            "notice: manage.py reminders_calendar import FILE, or the admin's calendar days."
        ),
        AlertType.CALENDAR_ENDING: _(
            "Once a calendar's coverage ends, its days follow its fallback rule (UNCOVERED: "
            "weekdays or skip) instead of the official schedule. Import the year's notice "
            "(manage.py reminders_calendar import FILE, then reminders_calendar show YEAR "
            "to check it) or enter it in the admin's calendar days. Told once a day from "
            "60 days before the end until the next year is covered."
        ),
        AlertType.HEARTBEAT_STALE: _(
            "A run_reminders process stopped ticking without stopping gracefully (killed, "
            "hung or its host down)."
        ),
        AlertType.SUCCESS_RATE: _("Runs that ended in the window were mostly not sent."),
        AlertType.STATISTICS_MISMATCH: _(
            "WeCom's message/get_statistics and the ledger's sent messages (a split text "
            "counting its parts) disagree by more than OPS_STATISTICS_TOLERANCE. Fewer at "
            "WeCom: messages recorded sent that WeCom did not count. More at WeCom: "
            "messages in doubt or partly sent that did arrive, or another sender using the "
            "same app. The day's checks are in the admin (WeCom count checks)."
        ),
        AlertType.STATISTICS_UNAVAILABLE: _(
            "The alert step could not ask WeCom for yesterday's count of this app, so the "
            "ledger was not compared. It asks again every hour until midnight (Beijing "
            "time), after which WeCom no longer gives yesterday's count; a difference "
            "found then is alerted on its own."
        ),
        DAILY_QUOTA: _(
            "WeCom allows OPS_WECOM_SEATS x 200 person-messages of its apps a day per corp "
            "(a Beijing day) and refuses the rest; a group robot's messages do not count. "
            "Spread the recurring tasks, or raise the seats; the dashboard's wave section "
            "shows the figures."
        ),
    }


def _when(moment: datetime | None) -> str:
    if moment is None:
        return "-"
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M:%S %Z")


def _statistics_example(event: AlertEvent) -> str:
    """A day's comparison, from the event's figures, in the alert's language."""
    data = event.data
    values = {
        "day": data.get("day", "-"),
        "app": event.scope + (f" ({data['app_name']})" if data.get("app_name") else ""),
        "theirs": data.get("theirs"),
        "ours": data.get("ours"),
        "tolerance": data.get("tolerance"),
        "error": data.get("error", ""),
    }
    if event.type == AlertType.STATISTICS_MISMATCH:
        text = _(
            "%(day)s: WeCom counted %(theirs)s messages from app %(app)s, our ledger "
            "%(ours)s (tolerance %(tolerance)s)."
        )
    else:
        text = _(
            "%(day)s: WeCom's count of app %(app)s not available (%(error)s); our ledger %(ours)s."
        )
    return "- " + text % values


def _example(event: AlertEvent) -> str:
    if event.type in (AlertType.STATISTICS_MISMATCH, AlertType.STATISTICS_UNAVAILABLE):
        return _statistics_example(event)
    about = []
    if event.run_id is not None:
        about.append(_("run %(id)s") % {"id": event.run_id})
    if event.task_id is not None:
        about.append(_("task %(id)s") % {"id": event.task_id})
    label = ", ".join(about) or _when(event.occurred_at)
    code = f" [{event.code}]" if event.code else ""
    return f"- {label}{code}: {event.message}"


def title(alert: Alert, count: int) -> str:
    """The title of ``alert`` of ``count`` events, in the active language."""
    values = {
        # The kind's label, in the alert's language, as the admin names it.
        "kind": kinds.label(alert.kind) if alert.kind else "-",
        "channel": alert.channel or "-",
        "scope": alert.scope or "-",
    }
    return PREFIX + _titles()[alert.type](count, values)


def _summary(events: QuerySet[AlertEvent]) -> tuple[str, str]:
    """The morning summary's title and body, from the figures its event kept."""
    data = morning.kept(events)
    with translation.override(conf.ALERT_LANGUAGE):
        if not data:
            return PREFIX + _("Morning summary"), ""
        return (PREFIX + morning.title(data))[:255], "\n".join(morning.lines(data))


def render(alert: Alert, events: QuerySet[AlertEvent]) -> tuple[str, str]:
    """The alert's title and body, from its events."""
    if alert.type == morning.SUMMARY:
        return _summary(events)
    with translation.override(conf.ALERT_LANGUAGE):
        heading = title(alert, alert.event_count)
        lines = [_advice()[alert.type], ""]
        lines.append(
            _("%(count)d events from %(first)s to %(last)s.")
            % {
                "count": alert.event_count,
                "first": _when(alert.first_event_at),
                "last": _when(alert.last_event_at),
            }
        )
        codes = list(
            events.exclude(code="").values("code").annotate(n=Count("id")).order_by("-n")[:CODES]
        )
        if codes:
            lines.append(
                _("By code: %(codes)s")
                % {"codes": ", ".join(f"{row['code']}: {row['n']}" for row in codes)}
            )
        sample = list(events.order_by("occurred_at", "pk")[:EXAMPLES])
        lines.append(_("First events:"))
        lines += [_example(event) for event in sample]
        more = alert.event_count - len(sample)
        if more > 0:
            lines.append(
                ngettext(
                    "… and %(count)d more.",
                    "… and %(count)d more.",
                    alert.event_count - len(sample),
                )
                % {"count": alert.event_count - len(sample)}
            )
        return heading[:255], "\n".join(lines)
