"""Prometheus metrics of the engine, read from the database at scrape time.

Why the database and not counters in memory: runs are sent by django-q2 workers in
several processes on several hosts, and ``/metrics`` is answered by whichever web
process gets the request; the database is the one place that sees them all. Every
scrape therefore gives the same answer whichever process serves it.

Bounded cost: about ten aggregate queries (and two per working-day calendar, for its
ops entries, at most every ``calendar_days.ENTRIES_SECONDS``), each reading either runs that are not
finished (a backlog is bounded by the plan-ahead and the in-flight limits) through the
engine's partial indexes, or runs and ledger rows of the recent window
(``OPS_METRICS_WINDOW_SECONDS``, default an hour) through the ``run_date`` and ledger
``(status, created_at)`` indexes, or the ledger's partial index of recalled rows; never
the whole history. The figures measured on
100,000 runs are in the README.

So the finished-run figures are windowed gauges, not counters: a count over the last
hour goes down as well as up, which a Prometheus counter must not. The histograms are
gauge histograms for the same reason (``histogram_quantile`` works on their buckets
directly; ``rate()`` is not meant for them).

Recalls too (``reminders_messages_recalled``): an operator recalls a message in
whichever web process serves the admin, so a counter that the ``message_recalled``
signal raised in memory would be seen only by scrapes that process answers, and lost
when it restarts. ``recalled_at`` says the same for every process, read through the
ledger's partial index of recalled rows; windowed, as retention deletes old rows.

Digests (``reminders.engine.digests``): a run folded into one is open (``folded``) until
its digest ends it, and then finishes as the digest did. The digest is a run of its own,
so the run figures count it beside the runs it carries; ``reminders_sends`` counts its
one message (the ledger's row), the carried runs having none.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from datetime import datetime, time, timedelta
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db.models import Count, DurationField, ExpressionWrapper, F, Min, Q, QuerySet, Sum
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeHistogramMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from reminders import calendars
from reminders.models import Priority, RateBucket, SchedulerHeartbeat, SendLog, TaskRun

from .conf import settings as conf
from .models import AlertDelivery, AlertEvent

LATENESS_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, math.inf)
DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, math.inf)
# Not finished: waiting, claimed, or folded into a digest not sent yet (``folded``).
OPEN: tuple[str, ...] = TaskRun.UNFINISHED
# A run's local date (indexed) is at most this far before the moment it finished, for
# any run that finished in the window (zones reach UTC-12; retries take hours).
RUN_DATE_SLACK = timedelta(days=2)
RATE_LIMITED = "rate_limited"


def _seconds(value: timedelta | None) -> float:
    return value.total_seconds() if value is not None else 0.0


class RemindersCollector(Collector):
    """Reads the engine's tables when Prometheus scrapes; ``now`` fixes the clock."""

    def __init__(self, now: datetime | None = None) -> None:
        self.now = now

    def collect(self) -> Iterable[Metric]:
        now = self.now or timezone.now()
        window = conf.METRICS_WINDOW_SECONDS
        since = now - timedelta(seconds=window)
        yield GaugeMetricFamily(
            "reminders_metrics_window_seconds",
            "The recent window that the finished-run metrics cover.",
            value=window,
        )
        yield self._open_runs()
        recent = TaskRun.objects.filter(
            run_date__gte=(since - RUN_DATE_SLACK).date(),
            finished_at__gt=since,
            finished_at__lte=now,
        )
        yield self._finished_runs(recent)
        yield from self._histograms(recent.filter(status=TaskRun.Status.SENT))
        yield self._sends(since, now)
        yield self._recalls(since, now)
        yield from self._backlog(now)
        yield self._rate_limited()
        yield self._pauses(now)
        yield from self._schedulers(now)
        yield from self._alerts()
        yield self._calendars(now)

    def _open_runs(self) -> Metric:
        family = GaugeMetricFamily(
            "reminders_runs_open",
            "Runs not finished (scheduled, queued, running, retrying, or folded into a "
            "digest not sent yet), by status and kind.",
            labels=["status", "kind"],
        )
        rows = (
            TaskRun.objects.filter(status__in=OPEN)
            .values_list("status", "task__kind")
            .annotate(n=Count("id"))
            .order_by()
        )
        for status, kind, n in rows:
            family.add_metric([status, kind], n)
        return family

    def _finished_runs(self, recent: QuerySet[TaskRun]) -> Metric:
        family = GaugeMetricFamily(
            "reminders_runs_finished",
            "Runs that finished in the last reminders_metrics_window_seconds, by status and kind.",
            labels=["status", "kind"],
        )
        rows = (
            recent.filter(status__in=TaskRun.FINISHED)
            .values_list("status", "task__kind")
            .annotate(n=Count("id"))
            .order_by()
        )
        for status, kind, n in rows:
            family.add_metric([status, kind], n)
        return family

    def _histograms(self, sent: QuerySet[TaskRun]) -> Iterator[Metric]:
        lateness = ExpressionWrapper(F("finished_at") - F("due_at"), output_field=DurationField())
        counts = {
            **{
                f"l{i}": Count("id", filter=Q(finished_at__lte=F("due_at") + timedelta(seconds=b)))
                for i, b in enumerate(LATENESS_BUCKETS[:-1])
            },
            **{
                f"d{i}": Count("id", filter=Q(duration__lte=timedelta(seconds=b)))
                for i, b in enumerate(DURATION_BUCKETS[:-1])
            },
        }
        rows: list[dict[str, Any]] = [
            dict(row)
            for row in sent.values("task__kind", "task__channel")
            .annotate(
                n=Count("id"),
                timed=Count("duration"),
                late_sum=Sum(lateness),
                duration_sum=Sum("duration"),
                **counts,
            )
            .order_by()
        ]
        late = GaugeHistogramMetricFamily(
            "reminders_run_lateness_seconds",
            "Sent runs of the window: from due to sent (finished), by kind.",
            labels=["kind"],
        )
        for kind, group in _by(rows, "task__kind").items():
            buckets = _buckets(group, "l", LATENESS_BUCKETS, "n")
            late.add_metric([kind], buckets, sum(_seconds(r["late_sum"]) for r in group))
        yield late
        took = GaugeHistogramMetricFamily(
            "reminders_run_duration_seconds",
            "Sent runs of the window: how long their last attempt took, by channel.",
            labels=["channel"],
        )
        for channel, group in _by(rows, "task__channel").items():
            buckets = _buckets(group, "d", DURATION_BUCKETS, "timed")
            took.add_metric([channel], buckets, sum(_seconds(r["duration_sum"]) for r in group))
        yield took

    def _sends(self, since: datetime, now: datetime) -> Metric:
        family = GaugeMetricFamily(
            "reminders_sends",
            "Ledger entries (one per message key) reserved in the last "
            "reminders_metrics_window_seconds, by channel and result (sent, failed, "
            "unknown, sending).",
            labels=["channel", "result"],
        )
        rows = (
            SendLog.objects.filter(
                status__in=SendLog.Status.values, created_at__gt=since, created_at__lte=now
            )
            .values_list("channel", "status")
            .annotate(n=Count("id"))
            .order_by()
        )
        for channel, status, n in rows:
            family.add_metric([channel, status], n)
        return family

    def _recalls(self, since: datetime, now: datetime) -> Metric:
        family = GaugeMetricFamily(
            "reminders_messages_recalled",
            "Messages recalled (every part taken back from its recipient) in the last "
            "reminders_metrics_window_seconds, by channel.",
            labels=["channel"],
        )
        rows = (
            SendLog.objects.filter(recalled_at__gt=since, recalled_at__lte=now)
            .values_list("channel")
            .annotate(n=Count("id"))
            .order_by()
        )
        for channel, n in rows:
            family.add_metric([channel], n)
        return family

    def _backlog(self, now: datetime) -> Iterator[Metric]:
        runs = GaugeMetricFamily(
            "reminders_backlog_runs",
            "Runs waiting and due (their task not paused), by priority.",
            labels=["priority"],
        )
        oldest = GaugeMetricFamily(
            "reminders_backlog_oldest_seconds",
            "How long the longest-waiting due run has been due, by priority.",
            labels=["priority"],
        )
        rows = (
            TaskRun.objects.filter(status__in=TaskRun.WAITING, next_attempt_at__lte=now)
            .exclude(task__status="paused")
            .values_list("priority")
            .annotate(n=Count("id"), since=Min("next_attempt_at"))
            .order_by()
        )
        for rank, n, due in rows:
            name = str(Priority.from_rank(rank).value)
            runs.add_metric([name], n)
            oldest.add_metric([name], max(0.0, (now - due).total_seconds()))
        yield runs
        yield oldest

    def _rate_limited(self) -> Metric:
        family = GaugeMetricFamily(
            "reminders_rate_limited_runs",
            "Runs put back to wait for a rate-limit slot or a provider's pause, by channel.",
            labels=["channel"],
        )
        rows = (
            TaskRun.objects.filter(status__in=TaskRun.WAITING, error_code=RATE_LIMITED)
            .values_list("task__channel")
            .annotate(n=Count("id"))
            .order_by()
        )
        for channel, n in rows:
            family.add_metric([channel], n)
        return family

    def _pauses(self, now: datetime) -> Metric:
        family = GaugeMetricFamily(
            "reminders_rate_limit_pause_seconds",
            'Rate limits the provider paused ("too fast"): seconds left, by bucket. '
            "Kept in the database only (not with REMINDERS_RATE_LIMIT_CACHE).",
            labels=["bucket"],
        )
        for name, until in RateBucket.objects.filter(paused_until__gt=now).values_list(
            "name", "paused_until"
        ):
            if until is not None:
                family.add_metric([name], (until - now).total_seconds())
        return family

    def _schedulers(self, now: datetime) -> Iterator[Metric]:
        max_age = conf.HEARTBEAT_MAX_AGE_SECONDS
        ticks = list(SchedulerHeartbeat.objects.values_list("last_tick_at", flat=True))
        ages = [(now - tick).total_seconds() for tick in ticks]
        count = GaugeMetricFamily(
            "reminders_schedulers",
            "Scheduler heartbeats by state: fresh (ticked within "
            "OPS_HEARTBEAT_MAX_AGE_SECONDS) or stale.",
            labels=["state"],
        )
        count.add_metric(["fresh"], sum(age <= max_age for age in ages))
        count.add_metric(["stale"], sum(age > max_age for age in ages))
        yield count
        if ages:
            yield GaugeMetricFamily(
                "reminders_scheduler_last_tick_age_seconds",
                "Seconds since the most recent tick of any scheduler.",
                value=max(0.0, min(ages)),
            )

    def _alerts(self) -> Iterator[Metric]:
        pending = GaugeMetricFamily(
            "ops_alert_events_pending",
            "Alert events no alert covers yet (waiting for their group's window).",
            value=AlertEvent.objects.pending().count(),
        )
        yield pending
        deliveries = GaugeMetricFamily(
            "ops_alert_deliveries_open",
            "Alert deliveries not sent yet, by alert channel and status.",
            labels=["channel", "status"],
        )
        rows = (
            AlertDelivery.objects.filter(status__in=AlertDelivery.OPEN)
            .values_list("channel", "status")
            .annotate(n=Count("id"))
            .order_by()
        )
        for channel, status, n in rows:
            deliveries.add_metric([channel, status], n)
        yield deliveries

    def _calendars(self, now: datetime) -> Metric:
        family = GaugeMetricFamily(
            "reminders_calendar_covered_until_timestamp_seconds",
            "When each configured working-day calendar stops being covered (by its package "
            "or by ops' entries): the Unix time of midnight, in TIME_ZONE, after its last "
            "covered day. Alert on it minus time() under 60 days.",
            labels=["calendar"],
        )
        today = timezone.localdate(now)
        for name in calendars.names():
            try:
                until = calendars.covered_until(name, today)
            except ImproperlyConfigured:
                continue  # the system checks say so
            end = datetime.combine(
                until + timedelta(days=1), time(), timezone.get_current_timezone()
            )
            family.add_metric([name], end.timestamp())
        return family


def _by(rows: list[dict[str, Any]], key: str) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(str(row[key]), []).append(row)
    return groups


def _buckets(
    rows: list[dict[str, Any]], prefix: str, bounds: tuple[float, ...], total: str
) -> list[tuple[str, float]]:
    """Cumulative ``(le, count)`` pairs from the rows' per-bound counts."""
    pairs = []
    for i, bound in enumerate(bounds):
        field = total if math.isinf(bound) else f"{prefix}{i}"
        count = sum(int(row[field]) for row in rows)
        pairs.append((floatToGoString(bound), float(count)))
    return pairs


def render(now: datetime | None = None) -> bytes:
    """The metrics in Prometheus' text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RemindersCollector(now))
    return generate_latest(registry)
