"""The wave seen before it breaks, as of now: the next hour minute by minute by kind, the
members closest to WeCom's per-member limits, the runs held by quiet hours, and the
corp's daily quota used and forecast.

**What waits.** A waiting run (``scheduled`` or ``retrying``, its task not paused, as
``plan`` and the scheduler read them) is placed at its next attempt, or its due time
when it has none (``Coalesce(next_attempt_at, due_at)``). The hour is the 60 minutes
from the start of the current minute; runs already due before it are the backlog
(``plan``), not the wave.

**WeCom's limits** (of one app, to one member): 30 messages a minute and 1,000 an hour
(``PER_MINUTE``, ``PER_HOUR``); past them WeCom drops messages silently. Per recipient,
the runs waiting in the hour and its busiest minute; the ``TOP_MEMBERS`` closest to
either limit (the larger share of the two) come first. Every channel counts: a robot or
an HTTP channel is not held to WeCom's app limits, so the figures are an upper bound.

**The daily quota**: seats x ``PER_SEAT_DAILY`` person-messages a day per corp
(``OPS_WECOM_SEATS``; unset, no quota and nothing compared), of app messages only, and by
WeCom's day, Beijing's (``Asia/Shanghai``, whatever ``TIME_ZONE`` says). So only the
channels whose sender spends it count (``quota_channels``: ``spends_app_quota``, the
WeCom app sender); a group robot, an HTTP or a console channel does not. Used: those
channels' ``sent`` ledger rows whose ``sent_at`` falls on the Beijing day, however long
before their rows were reserved, each counting its parts (``reply_detail["parts"]``, a
split text being several messages), plus the alerts sent that day through an alert
channel that sends by one of them (``ReminderChannel``): they have no ledger row, and
WeCom counts them. Counted as the nightly comparison with WeCom counts its side
(``ops.statistics.our_count``). Forecast:
used plus their runs waiting that fall before the Beijing day ends (the backlog
included). Tomorrow (the next Beijing day): their waiting runs of one-off tasks due
then, plus, for recurring tasks (a cron), an estimate: the runs of the same tasks
(still active) due on the same Beijing day of the week a week before, make-ups, runs
made on request, cancelled and skipped ones left out (but those the working-day
calendar skipped: their schedule had them), and the runs one digest carried counted
once, as the one message it was; then, by the working-day calendar, none of a task
whose calendar (its own, else its kind's) rests tomorrow. So a holiday tomorrow expects
no report though last week's day was worked, and a make-up working day expects the
reports last week's rest day skipped. Runs are planned only
``REMINDERS_PLAN_AHEAD_SECONDS`` ahead, so last week stands for tomorrow's recurring
work; a run counts as one message (not its parts), a task created since is missed, a
task's run counts on the channel the task names now, and its calendar is asked about
Beijing's date tomorrow, whatever the task's zone.

**Digests** (``reminders.engine.digests``). A digest is one message, and one run of its
own: while it waits to be retried it counts once, as any run, and the runs it carries
(``folded``) wait no more, so they count nowhere here. Runs still waiting to be folded
(for their window, their kind's throttle, or planned at their window's end) count each,
as every waiting run does: of those, the figures of the hour, the members and the
forecast are an upper bound.

**Cost.** Seven queries, whatever the data: the minutes by kind; the
members in three (the 10 with the busiest minutes and the 10 busiest in the hour pick
at most 20 candidates, whose minutes are then read: the 10 closest to either limit are among
them); the waiting runs by kind (held by quiet hours; of the quota's channels, due by
the Beijing day's end, due tomorrow) together with last week's runs of their recurring
tasks; the ledger's messages of those channels sent today; the alerts sent through
them today. Whatever the channels and alert channels (none: an alias nothing has, so
that the queries stay the same) and the calendars
(their ops entries are read once in a while per process, ``reminders.calendars.days``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db.models import Count, Max, Min, Q, QuerySet
from django.db.models.functions import Coalesce, TruncMinute
from django.utils.module_loading import import_string

from reminders import calendars, kinds
from reminders.conf import settings as reminders_conf
from reminders.exceptions import RemindersError
from reminders.models import QUIET_CODE, ScheduledTask, TaskRun
from reminders.senders import get_sender

from ..conf import settings as conf
from ..statistics import BEIJING, beijing_day_bounds, our_count
from .days import iso, label, local_iso

MINUTES = 60
TOP_MEMBERS = 10
PER_MINUTE = 30
PER_HOUR = 1000
PER_SEAT_DAILY = 200
# A run the calendar skipped (its rest day, or a year it does not cover).
CALENDAR_SKIPS = (calendars.HOLIDAY, calendars.UNCOVERED)


@dataclass(frozen=True)
class Minute:
    """The waiting runs of one minute of the hour ahead, by kind."""

    start: datetime
    kinds: dict[str, int]

    @property
    def label(self) -> str:
        return label(self.start, "%H:%M")

    @property
    def total(self) -> int:
        return sum(self.kinds.values())

    def as_dict(self) -> dict[str, Any]:
        return {"start": local_iso(self.start), "total": self.total, "kinds": dict(self.kinds)}


@dataclass(frozen=True)
class Member:
    """One recipient's runs waiting in the hour ahead, and its busiest minute."""

    recipient: str
    next_hour: int
    busiest_minute: int
    busiest_at: datetime | None

    @property
    def closeness(self) -> float:
        """The larger share of WeCom's two limits (1.0: at a limit; above: past it)."""
        return max(self.next_hour / PER_HOUR, self.busiest_minute / PER_MINUTE)

    @property
    def over(self) -> bool:
        return self.next_hour > PER_HOUR or self.busiest_minute > PER_MINUTE

    def as_dict(self) -> dict[str, Any]:
        return {
            "recipient": self.recipient,
            "next_hour": self.next_hour,
            "busiest_minute": self.busiest_minute,
            "busiest_at": iso(self.busiest_at),
            "closeness": round(self.closeness, 4),
            "over": self.over,
        }


@dataclass(frozen=True)
class QuietHeld:
    """The waiting runs of one kind held by quiet hours, and when they resume."""

    kind: str
    runs: int
    first_resume: datetime | None
    last_resume: datetime | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "runs": self.runs,
            "first_resume": iso(self.first_resume),
            "last_resume": iso(self.last_resume),
        }


@dataclass(frozen=True)
class Quota:
    """The corp's daily quota (None without ``OPS_WECOM_SEATS``), today and tomorrow, by
    Beijing's day, of the ``channels`` that spend it."""

    seats: int | None
    used: int
    waiting_today: int
    tomorrow_planned: int  # waiting runs due tomorrow, one-off tasks only
    tomorrow_estimated: int  # recurring tasks: their runs a week before tomorrow
    day: date | None = None  # today in Beijing
    channels: tuple[str, ...] = ()  # the channels counted (``quota_channels``)

    @property
    def tomorrow_day(self) -> date | None:
        return None if self.day is None else self.day + timedelta(days=1)

    @property
    def quota(self) -> int | None:
        return None if self.seats is None else self.seats * PER_SEAT_DAILY

    @property
    def forecast(self) -> int:
        return self.used + self.waiting_today

    @property
    def tomorrow(self) -> int:
        return self.tomorrow_planned + self.tomorrow_estimated

    @property
    def today_over(self) -> bool:
        return self.quota is not None and self.forecast > self.quota

    @property
    def tomorrow_over(self) -> bool:
        return self.quota is not None and self.tomorrow > self.quota

    def as_dict(self) -> dict[str, Any]:
        return {
            "day": None if self.day is None else self.day.isoformat(),
            "time_zone": str(BEIJING),
            "channels": list(self.channels),
            "seats": self.seats,
            "per_seat": PER_SEAT_DAILY,
            "quota": self.quota,
            "used": self.used,
            "waiting_today": self.waiting_today,
            "forecast": self.forecast,
            "today_over": self.today_over,
            "tomorrow": self.tomorrow,
            "tomorrow_planned": self.tomorrow_planned,
            "tomorrow_estimated": self.tomorrow_estimated,
            "tomorrow_over": self.tomorrow_over,
        }


@dataclass(frozen=True)
class Wave:
    start: datetime
    kinds: list[str]
    minutes: list[Minute]
    members: list[Member]
    quiet: list[QuietHeld]
    quota: Quota
    tomorrow_by_kind: dict[str, int] = field(default_factory=dict)

    @property
    def peak(self) -> int:
        return max((minute.total for minute in self.minutes), default=0)

    def as_dict(self) -> dict[str, Any]:
        return {
            "start": local_iso(self.start),
            "minutes_ahead": MINUTES,
            "per_minute_limit": PER_MINUTE,
            "per_hour_limit": PER_HOUR,
            "kinds": list(self.kinds),
            "minutes": [minute.as_dict() for minute in self.minutes],
            "members": [member.as_dict() for member in self.members],
            "quiet_hours": [held.as_dict() for held in self.quiet],
            "quota": self.quota.as_dict(),
            "tomorrow_by_kind": dict(self.tomorrow_by_kind),
        }


def _at() -> Coalesce:
    return Coalesce("next_attempt_at", "due_at")


def _waiting() -> Q:
    return Q(status__in=TaskRun.WAITING) & ~Q(task__status=ScheduledTask.Status.PAUSED)


def _hour(start: datetime) -> QuerySet[Any]:
    return (
        TaskRun.objects.filter(_waiting())
        .annotate(at=_at())
        .filter(at__gte=start, at__lt=start + timedelta(minutes=MINUTES))
        .annotate(minute=TruncMinute("at", tzinfo=UTC))
    )


def wave(now: datetime) -> Wave:
    start = now.replace(second=0, microsecond=0)
    hour = _hour(start)
    by_minute: dict[datetime, dict[str, int]] = defaultdict(dict)
    kinds: set[str] = set()
    rows = hour.values("minute", "task__kind").annotate(n=Count("pk")).order_by()
    for row in rows:  # query: the minutes by kind
        by_minute[_utc(row["minute"])][row["task__kind"]] = row["n"]
        kinds.add(row["task__kind"])
    minutes = []
    for i in range(MINUTES):
        moment = start + timedelta(minutes=i)
        minutes.append(Minute(moment, by_minute.get(moment, {})))
    by_kind, quota = _by_kind(now)
    return Wave(
        start=start,
        kinds=sorted(kinds),
        minutes=minutes,
        members=_members(hour),
        quiet=by_kind[0],
        quota=quota,
        tomorrow_by_kind=by_kind[1],
    )


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _members(hour: QuerySet[Any]) -> list[Member]:
    """Two queries: the candidates (the busiest in one minute, and in the hour); one:
    their minutes. The ``TOP_MEMBERS`` closest to either
    limit are among the candidates: a member behind 10 others on both counts is behind
    them on the larger share too."""
    per_minute = hour.values("task__recipient", "minute").annotate(n=Count("pk"))
    # A recipient has at most MINUTES rows: the first TOP_MEMBERS * MINUTES rows hold the
    # TOP_MEMBERS recipients with the busiest minutes (each first seen at its busiest).
    busiest = per_minute.order_by("-n", "task__recipient", "minute")[: TOP_MEMBERS * MINUTES]
    in_hour = (
        hour.values("task__recipient")
        .annotate(n=Count("pk"))
        .order_by("-n", "task__recipient")[:TOP_MEMBERS]
    )
    candidates: set[str] = set()
    for row in busiest:  # query
        if len(candidates) == TOP_MEMBERS:
            break
        candidates.add(row["task__recipient"])
    candidates |= {row["task__recipient"] for row in in_hour}  # query
    totals: dict[str, int] = defaultdict(int)
    peaks: dict[str, tuple[int, datetime | None]] = {}
    # Without candidates, "" (never a member id) keeps the query, and the count, fixed.
    for row in per_minute.filter(task__recipient__in=sorted(candidates) or [""]).order_by():
        who, n, at = row["task__recipient"], row["n"], _utc(row["minute"])
        totals[who] += n
        best = peaks.get(who)
        if best is None or n > best[0] or (n == best[0] and best[1] is not None and at < best[1]):
            peaks[who] = (n, at)
    members = [Member(who, totals[who], *peaks[who]) for who in totals]
    members.sort(key=lambda m: (-m.closeness, -m.next_hour, m.recipient))
    return members[:TOP_MEMBERS]


def quota_channels() -> tuple[str, ...]:
    """The channels whose messages spend WeCom's daily quota: those whose sender says so
    (``BaseSender.spends_app_quota``: the WeCom app sender and its subclasses). Read from
    the backend's class in ``REMINDERS_CHANNELS``, without building the sender, so that a
    channel whose options are wrong still counts what it sent; one whose backend does
    not import is left out (the reminders system checks say why)."""
    found = []
    for alias, config in reminders_conf.CHANNELS.items():
        try:
            backend = import_string(str((config or {})["BACKEND"]))
        except (ImportError, KeyError, TypeError):
            continue
        if getattr(backend, "spends_app_quota", False):
            found.append(alias)
    return tuple(sorted(found))


def app_paces() -> list[tuple[str, float]]:
    """The pace of each WeCom app the quota's channels send as, in messages a minute:
    its channel's ``rate_limit`` (else ``WECOM_RATE_LIMIT``), the most the engine sends
    it, set under what WeCom takes (beyond, WeCom answers 45009). One per app
    (``rate_scope``: aliases of one app share it), named by its channels; none for an
    app with no pace set, or a channel that cannot be built (the reminders system checks
    say why)."""
    paces: dict[str, tuple[list[str], float]] = {}
    for alias in quota_channels():
        try:
            sender = get_sender(alias)
            paced = sender.channel_rate() is not None
        except (RemindersError, ImproperlyConfigured, ValueError, TypeError):
            continue
        if paced:
            names, _pace = paces.setdefault(
                sender.rate_scope, ([], float(sender.options["rate_limit"]) * 60)
            )
            names.append(alias)
    return [(", ".join(names), pace) for names, pace in paces.values()]


def beijing_today(now: datetime) -> date:
    """WeCom's day at ``now``: the date in Beijing."""
    return now.astimezone(BEIJING).date()


def _by_kind(now: datetime) -> tuple[tuple[list[QuietHeld], dict[str, int]], Quota]:
    """Query: the waiting runs by kind (held by quiet hours and when they resume; of the
    quota's channels, due by the Beijing day's end, due tomorrow) and last week's runs of
    the quota's recurring tasks; two queries: the quota's messages and alerts sent today."""
    day = beijing_today(now)
    channels = quota_channels()
    _, end = beijing_day_bounds(day)
    tomorrow_start, tomorrow_end = beijing_day_bounds(day + timedelta(days=1))
    week_start, week_end = beijing_day_bounds(day - timedelta(days=6))
    waiting = _waiting()
    quiet = waiting & Q(error_code=QUIET_CODE)
    # Without such a channel, "" (never an alias) keeps the query, and the count, fixed.
    spends = Q(task__channel__in=list(channels) or [""])
    recurring = ~Q(task__cron="")
    # The runs of the week before that the schedule had: sent or not, or skipped for the
    # calendar's rest day (tomorrow may be worked); then none of a task resting tomorrow.
    had = ~Q(status__in=(TaskRun.Status.CANCELLED, TaskRun.Status.SKIPPED)) | Q(
        status=TaskRun.Status.SKIPPED, error_code__in=CALENDAR_SKIPS
    )
    week_before = (
        Q(due_at__gte=week_start, due_at__lt=week_end)
        & recurring
        & Q(task__status=ScheduledTask.Status.ACTIVE, is_manual=False, is_compensation=False)
        & had
    )
    expected = week_before & ~resting_on(day + timedelta(days=1))
    # A digest's runs were one message: counted once, by their digest.
    alone, carried = Q(digest__isnull=True), Q(digest__isnull=False)
    planned_tomorrow = waiting & Q(at__gte=tomorrow_start, at__lt=tomorrow_end) & ~recurring
    rows = (
        TaskRun.objects.annotate(at=_at())
        .filter(waiting | week_before)
        .values("task__kind")
        .annotate(
            quiet=Count("pk", filter=quiet),
            first=Min("at", filter=quiet),
            last=Max("at", filter=quiet),
            today=Count("pk", filter=waiting & Q(at__lt=end) & spends),
            planned=Count("pk", filter=planned_tomorrow & spends),
            estimated=Count("pk", filter=expected & alone & spends),
            digests=Count("digest", filter=expected & carried & spends, distinct=True),
        )
        .order_by("task__kind")
    )
    held: list[QuietHeld] = []
    tomorrow: dict[str, int] = {}
    waiting_today = planned = estimated = 0
    for row in rows:
        kind = row["task__kind"]
        if row["quiet"]:
            held.append(QuietHeld(kind, row["quiet"], row["first"], row["last"]))
        waiting_today += row["today"]
        planned += row["planned"]
        kind_estimated = row["estimated"] + row["digests"]
        estimated += kind_estimated
        if row["planned"] or kind_estimated:
            tomorrow[kind] = row["planned"] + kind_estimated
    quota = Quota(
        seats=conf.SEATS,
        used=our_count(channels, day),
        waiting_today=waiting_today,
        tomorrow_planned=planned,
        tomorrow_estimated=estimated,
        day=day,
        channels=channels,
    )
    return (held, tomorrow), quota


def resting_on(day: date) -> Q:
    """The runs of tasks whose working-day calendar (their own, else their kind's) rests
    on ``day``; nothing when none does. A calendar not configured rests on no day."""
    policies = {name: kinds.policy(name).calendar for name in kinds.names()}
    resting = set()
    for name in {*calendars.names(), *policies.values()} - {""}:
        try:
            if calendars.day_off(name, day) is not None:
                resting.add(name)
        except calendars.UnknownCalendar:
            continue  # the reminders system checks say so
    if not resting:
        return Q(pk__isnull=True)  # no run: the same query, whatever the calendars
    by_kind = [kind for kind, calendar in policies.items() if calendar in resting]
    return Q(task__calendar__in=sorted(resting)) | Q(
        task__calendar__isnull=True, task__kind__in=by_kind or [""]
    )


def quota(now: datetime) -> Quota:
    """The daily quota alone (two queries): for the deploy check and the alert step,
    which count what the dashboard does."""
    return _by_kind(now)[1]
