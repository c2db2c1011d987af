"""The alert step: evaluate the checks, group pending events into alerts, deliver them.

``run_step`` is run by ``python manage.py ops_alerts`` (once, e.g. from cron, or
``--loop``), never by the engine: the engine's signals only record events
(``ops.receivers``), so an alert channel that is slow, down or misconfigured cannot
delay or break a send. It is also what notices that every scheduler is gone, which a
step inside the scheduler could not, and that a working-day calendar in use is about to
run out (``check_calendar_coverage``: once a day per calendar, from
``REMINDERS_CALENDAR_WARN_DAYS`` days before its coverage ends), and that WeCom's own
count of an app's messages yesterday differs from the ledger's (``check_statistics``:
once a day per app, ``ops.statistics``).

Grouping and throttling, per group (an alert type plus the kind, channel or calendar
year it is grouped by, ``models.GROUPED_BY``): when the group has been quiet for its
window (``OPS_ALERT_WINDOW_SECONDS``, per type ``OPS_ALERT_WINDOWS``), its pending
events go at once in one alert; the events that come while the window is open wait,
and go together in one digest at the first step after it closes, which opens the next
window. So a storm of 500 failures is one alert and one digest per window, however
many steps run.

Invariants: each step may run in any number of processes at once (alerts are opened
under a unique sequence number, deliveries claimed by compare-and-set); a delivery
that fails is recorded with the error, retried after ``OPS_ALERT_RETRY_DELAYS`` and
then given up, and never raised; one channel's failure delays no other channel and no
later alert. Everything takes ``now`` so that tests drive the clock.

Retention: each step also deletes up to ``PRUNE_BATCH`` alerts older than
``OPS_ALERT_RETENTION_DAYS``, with their events and deliveries, oldest first, in one
short transaction; an alert with a delivery still open (pending, sending, retrying) is
kept until it is done. So the tables stay bounded without a job of their own, and no
step holds locks for long however much history there is.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Count, Q
from django.utils import timezone

from reminders.calendars import coverage as calendar_coverage
from reminders.models import SchedulerHeartbeat, TaskRun

from . import alert_channels, alert_texts, statistics
from .conf import settings as conf
from .models import Alert, AlertDelivery, AlertEvent, AlertMute, AlertType
from .morning import check_morning_summary
from .stats.wave import quota

logger = logging.getLogger(__name__)

# Tomorrow's planned volume over WeCom's daily quota: one alert a day, grouped by nothing.
# (Not an ``AlertType`` member yet: the field's choices live in ``ops.models``.)
DAILY_QUOTA = AlertType.DAILY_QUOTA

# Deliveries attempted in one step at most; the rest wait for the next step.
DELIVERIES_PER_STEP = 100
# Alerts deleted by one step at most (with their events and deliveries).
PRUNE_BATCH = 200
# Runs whose outcome counts in the success rate: sent, or ended for good unsent.
ENDED = (
    TaskRun.Status.SENT,
    TaskRun.Status.FAILED,
    TaskRun.Status.UNKNOWN,
    TaskRun.Status.EXPIRED,
)
# A run's local date (indexed) is at most this far before the day it finishes in UTC,
# for a run sent on time (zones reach UTC-12, and retries and deadlines are hours).
RUN_DATE_SLACK = timedelta(days=2)


@dataclass
class StepResult:
    checked: int = 0  # events the checks recorded
    opened: list[Alert] = field(default_factory=list)
    sent: int = 0
    failed: int = 0
    pruned: int = 0  # alerts deleted, past their retention


def run_step(now: datetime | None = None) -> StepResult:
    now = now or timezone.now()
    result = StepResult()
    result.checked = (
        check_heartbeats(now)
        + check_success_rates(now)
        + check_calendar_coverage(now)
        + check_statistics(now)
        + check_daily_quota(now)
        + check_morning_summary(now)
    )
    result.opened = open_alerts(now)
    result.sent, result.failed = deliver_due(now)
    result.pruned = prune_alerts(now)
    return result


# Checks ----------------------------------------------------------------------------


def check_heartbeats(now: datetime) -> int:
    """Record each scheduler whose heartbeat is older than
    ``OPS_HEARTBEAT_MAX_AGE_SECONDS``, once per heartbeat (a scheduler that stops
    gracefully removes its row, and is not alerted)."""
    recorded = 0
    for beat in SchedulerHeartbeat.objects.stale(now, conf.HEARTBEAT_MAX_AGE_SECONDS):
        age = int((now - beat.last_tick_at).total_seconds())
        recorded += AlertEvent.objects.record_once(
            f"heartbeat:{beat.owner}:{beat.last_tick_at.isoformat()}",
            AlertType.HEARTBEAT_STALE,
            occurred_at=now,
            code="stale",
            message=f"Scheduler {beat.owner} last ticked {age} s ago.",
            data={"owner": beat.owner, "last_tick_at": beat.last_tick_at.isoformat()},
        )
    return recorded


def success_rates(now: datetime) -> dict[str, tuple[int, int]]:
    """Per channel: (runs sent, runs that ended) in the last
    ``OPS_SUCCESS_RATE_WINDOW_SECONDS``."""
    since = now - timedelta(seconds=conf.SUCCESS_RATE_WINDOW_SECONDS)
    rows = (
        TaskRun.objects.filter(
            run_date__gte=(since - RUN_DATE_SLACK).date(),
            status__in=ENDED,
            finished_at__gt=since,
            finished_at__lte=now,
        )
        .values("task__channel")
        .annotate(total=Count("id"), sent=Count("id", filter=Q(status=TaskRun.Status.SENT)))
    )
    return {row["task__channel"]: (row["sent"], row["total"]) for row in rows}


def check_success_rates(now: datetime) -> int:
    """Record each channel whose success rate is under ``OPS_SUCCESS_RATE_THRESHOLD``
    with at least ``OPS_SUCCESS_RATE_MIN_RUNS`` ended runs, once per window."""
    threshold = conf.SUCCESS_RATE_THRESHOLD
    if threshold == 0:
        return 0
    window = conf.SUCCESS_RATE_WINDOW_SECONDS
    period = int(now.timestamp() // window)
    recorded = 0
    for channel, (sent, total) in success_rates(now).items():
        if total < conf.SUCCESS_RATE_MIN_RUNS or sent / total >= threshold:
            continue
        recorded += AlertEvent.objects.record_once(
            f"success_rate:{channel}:{period}",
            AlertType.SUCCESS_RATE,
            occurred_at=now,
            channel=channel,
            code="success_rate",
            message=(
                f"{sent} of {total} runs sent ({sent / total:.0%}, under {threshold:.0%}) "
                f"in the last {window:g} s."
            ),
            data={"sent": sent, "total": total, "threshold": threshold, "window": window},
        )
    return recorded


def check_calendar_coverage(now: datetime) -> int:
    """Record each working-day calendar in use whose coverage ends within
    ``REMINDERS_CALENDAR_WARN_DAYS`` days (or has ended), once per calendar and local
    day: a grouped alert a day until the next year is covered."""
    today = timezone.localdate(now)
    recorded = 0
    for covered in calendar_coverage.ending(today):
        until = covered.until.isoformat()
        if covered.days_left >= 0:
            message = (
                f"Calendar {covered.calendar!r} is covered until {until} "
                f"({covered.days_left} days left); {covered.next_year} is not entered yet "
                f"and would follow the fallback rule {covered.rule!r}."
            )
        else:
            message = (
                f"Calendar {covered.calendar!r} is not covered since {until}: days follow "
                f"the fallback rule {covered.rule!r}."
            )
        recorded += AlertEvent.objects.record_once(
            f"calendar_ending:{covered.calendar}:{today.isoformat()}",
            AlertType.CALENDAR_ENDING,
            occurred_at=now,
            scope=covered.calendar,
            code="calendar_ending",
            message=message,
            data={
                "calendar": covered.calendar,
                "covered_until": until,
                "days_left": covered.days_left,
                "rule": covered.rule,
            },
        )
    return recorded


def check_daily_quota(now: datetime) -> int:
    """Record, once per Beijing day, that tomorrow's planned WeCom app messages (the
    waiting runs of one-off tasks plus last week's of the recurring ones, of the channels
    that spend the quota, ``ops.stats.wave``) exceed WeCom's daily quota of
    ``OPS_WECOM_SEATS`` x 200; nothing without seats."""
    if conf.SEATS is None:
        return 0
    found = quota(now)
    if not found.tomorrow_over or found.tomorrow_day is None:
        return 0
    tomorrow = found.tomorrow_day.isoformat()
    return int(
        AlertEvent.objects.record_once(
            f"daily_quota:{tomorrow}",
            DAILY_QUOTA,
            occurred_at=now,
            code="daily_quota",
            message=(
                f"Tomorrow ({tomorrow}, Beijing time) {found.tomorrow} WeCom app messages are "
                f"planned ({found.tomorrow_planned} one-off runs planned, "
                f"{found.tomorrow_estimated} estimated for recurring tasks, on channels "
                f"{', '.join(found.channels)}), over WeCom's daily quota of {found.quota} "
                f"({found.seats} seats x 200)."
            ),
            data={
                "day": tomorrow,
                "tomorrow": found.tomorrow,
                "planned": found.tomorrow_planned,
                "estimated": found.tomorrow_estimated,
                "quota": found.quota,
                "seats": found.seats,
                "channels": list(found.channels),
            },
        )
    )


def check_statistics(now: datetime) -> int:
    """Compare each WeCom app's count of yesterday's messages with the ledger's, once a
    day (``ops.statistics``); a failure is recorded and alerted, never raised."""
    try:
        return statistics.check_statistics(now)
    except Exception:
        # The ledger's query or the settings broke: the other checks and the deliveries
        # still run; the next step tries again.
        logger.exception("comparing WeCom's counts with the ledger failed")
        return 0


# Grouping --------------------------------------------------------------------------


def open_alerts(now: datetime) -> list[Alert]:
    """An alert for each group with pending events whose window is closed."""
    targets = alert_channels.targets()
    opened = []
    # A muted group's events wait for the mute's end, and then go together.
    muted = set(AlertMute.objects.filter(until__gt=now).values_list("group_key", flat=True))
    for key in AlertEvent.objects.pending_groups(now):
        if key in muted:
            continue
        alert_type = key.split(":", 1)[0]
        alert = Alert.objects.open_for(
            key, now, conf.window_for(alert_type), alert_texts.render, targets
        )
        if alert is not None:
            opened.append(alert)
            logger.info("alert %s opened: %s (%d events)", alert.pk, alert.title, alert.event_count)
    return opened


# Delivering ------------------------------------------------------------------------


def deliver_due(now: datetime, limit: int = DELIVERIES_PER_STEP) -> tuple[int, int]:
    """Attempt the deliveries due, oldest first; returns (sent, failed)."""
    sent = failed = 0
    due = AlertDelivery.objects.due(now).select_related("alert").order_by("next_attempt_at", "pk")
    for delivery in due[:limit]:
        if not delivery.claim(now, conf.ALERT_LEASE_SECONDS):
            continue  # another step has it
        if deliver(delivery, now):
            sent += 1
        else:
            failed += 1
    return sent, failed


def deliver(delivery: AlertDelivery, now: datetime) -> bool:
    """One attempt of a claimed delivery, recorded; never raises what the channel does."""
    alert = delivery.alert
    try:
        channel = alert_channels.build(delivery.channel)
        channel.deliver_alert(delivery, now)
    except Exception as exc:
        error = str(exc) if isinstance(exc, alert_channels.AlertChannelError) else repr(exc)
        delivery.mark_failed(error, now, conf.ALERT_RETRY_DELAYS)
        logger.warning(
            "alert %s to %s: attempt %d failed (%s); %s",
            alert.pk,
            delivery.channel,
            delivery.attempts,
            error,
            "will retry" if delivery.status == AlertDelivery.Status.RETRYING else "given up",
        )
        return False
    delivery.mark_sent(now)
    return True


# Retention -------------------------------------------------------------------------


def prune_alerts(now: datetime, batch: int = PRUNE_BATCH) -> int:
    """Delete up to ``batch`` alerts created more than ``OPS_ALERT_RETENTION_DAYS`` ago
    whose deliveries are all done, with their events and deliveries; returns how many."""
    days = conf.ALERT_RETENTION_DAYS
    if days == 0:
        return 0
    old = (
        Alert.objects.filter(created_at__lt=now - timedelta(days=days))
        .exclude(deliveries__status__in=AlertDelivery.OPEN)
        .order_by("created_at", "pk")
        .values_list("pk", flat=True)
    )
    with transaction.atomic():
        ids = list(old[:batch])
        if ids:
            AlertEvent.objects.filter(alert_id__in=ids).delete()
            AlertDelivery.objects.filter(alert_id__in=ids).delete()
            Alert.objects.filter(pk__in=ids).delete()
    if ids:
        logger.info("%d alerts past %g days deleted", len(ids), days)
    return len(ids)
