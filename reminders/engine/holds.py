"""What holds a run back on its recipient's behalf when it starts
(``engine.starting``): their opting out of its kind (``reminders.preferences``), and
quiet hours: the recipient's own (``QuietHours``, on their own clock), else its
kind's (``Policy.quiet_hours``, ``quiet_calendar``, on the task's clock).

Invariants:

* Read when a run starts, so a choice or a policy reaches every run not sent yet,
  whenever it was planned (the planner also plans a run due inside its quiet hours due
  at their end, ``defer_planned``, so that the plan shows when it goes); asked only of
  a message never delivered (a key in doubt is
  decided as any other: it may have reached the recipient).
* What the recipients chose costs a job nothing when they chose nothing: it is looked up
  in the start's own SELECT of its runs (``lookups``), and read (``read``) only
  where there is something; a mandatory kind (``Policy.mandatory``) is never skipped
  for an opt-out.
* Quiet hours defer, never drop, never for good: the run waits for their end
  (``schedule.quiet.release``), on its recipient's clock for their own hours
  (``QuietHours.timezone``), else on the task's, staggered by recipient as the kind
  staggers its waves (over ``QUIET_SPREAD_SECONDS`` for a kind with no stagger), so the
  end of the night is not a burst, the stagger wrapped within the first half of the
  open time that follows so that it never lands inside quiet hours again, even started
  late; a mandatory kind goes at the first open moment, unstaggered; a kind that
  ``breaks_quiet_hours`` goes at once.
  Hours stored before the rule of an hour open (or otherwise unreadable) hold nothing,
  logged. The caller ends a run whose deadline comes first ``expired``
  (``Held.past_deadline`` says why).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from functools import cache

from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.db.models import Model

from .. import registry
from ..calendars.backends import day_off
from ..exceptions import RemindersError, UnknownKind
from ..models import OPTED_OUT_CODE, QUIET_CODE, Preference, QuietHours, ScheduledTask, TaskRun, sql
from ..schedule import timing
from ..schedule.quiet import QuietWindow, release

logger = logging.getLogger("reminders.engine.delivery")

QUIET_SPREAD_SECONDS = 600


@dataclass(frozen=True)
class Chosen:
    """What a job's recipients chose: opt-outs by (recipient, kind), those of mandatory
    kinds left out, and their own quiet hours by recipient."""

    opted_out: dict[tuple[str, str], Preference]
    quiet: dict[str, QuietHours]


@cache
def lookups(alias: str) -> Mapping[str, sql.Extra]:
    """For the start's SELECT of its runs (``sql.select_joined``, the run's task joined):
    each run's opt-out, its move to a digest and its recipient's own quiet hours, by
    primary key (None: none), looked up through their unique indexes in that one
    statement, so that a job whose recipients chose nothing costs nothing more."""
    quote = connections[alias].ops.quote_name
    preference = sql.quoted_columns(Preference, alias)
    quiet_hours = sql.quoted_columns(QuietHours, alias)
    task_column = sql.quoted_columns(ScheduledTask, alias)

    def first(model: type[Model], where: str) -> str:
        table, pk = quote(model._meta.db_table), sql.quoted_columns(model, alias)("pk")
        return f"(SELECT {table}.{pk} FROM {table} WHERE {where} LIMIT 1)"  # noqa: S608

    table = quote(Preference._meta.db_table)
    task = "{joined}"
    same = (
        f"{table}.{preference('recipient')} = {task}.{task_column('recipient')}"
        f" AND {table}.{preference('kind')} = {task}.{task_column('kind')}"
    )
    opted_out = f"{table}.{preference('opted_out')} = %s"
    digest = f"{table}.{preference('digest')} = %s"
    quiet = f"{quote(QuietHours._meta.db_table)}.{quiet_hours('recipient')}"
    return {
        "held_opt_out": sql.Extra(first(Preference, f"{same} AND {opted_out}"), (True,)),
        "held_digest": sql.Extra(
            first(Preference, f"{same} AND {digest} AND {opted_out}"), (True, False)
        ),
        "held_quiet": sql.Extra(first(QuietHours, f"{quiet} = {task}.{task_column('recipient')}")),
    }


def read(runs: Sequence[TaskRun]) -> Chosen:
    """What the runs' recipients chose, from the runs' ``lookups``: no query when
    none chose anything, else one for each table with something to read."""
    opt_outs = {pk for run in runs if (pk := getattr(run, "held_opt_out", None)) is not None}
    quiet = {pk for run in runs if (pk := getattr(run, "held_quiet", None)) is not None}
    rows = Preference.objects.in_bulk(opt_outs).values() if opt_outs else ()
    own = QuietHours.objects.in_bulk(quiet).values() if quiet else ()
    return Chosen(
        {(row.recipient, row.kind): row for row in rows if not registry.mandatory(row.kind)},
        {row.recipient: row for row in own},
    )


def skip_opted_out(run: TaskRun, choice: Preference) -> None:
    """End ``run`` ``skipped``, code ``opted_out``, saying since when, by whom and why."""
    when = choice.changed_at.isoformat(timespec="minutes")
    message = f"{choice.recipient} opted out of {choice.kind} ({choice.changed_by}, {when})"
    if choice.reason:
        message += f": {choice.reason}"
    run.close_attempt(TaskRun.Status.SKIPPED, code=OPTED_OUT_CODE, message=message[:2000] + ".")


@dataclass(frozen=True)
class Held:
    """A run held by quiet hours: until when (stagger included), and the words."""

    until: datetime
    why: str
    span: str

    @property
    def message(self) -> str:
        return f"Due during quiet hours ({self.why}): deferred {self.span}."

    def past_deadline(self, deadline: datetime) -> str:
        return (
            f"Due during quiet hours ({self.why}): deferring it {self.span} would pass its "
            f"deadline, {deadline.isoformat(timespec='minutes')}."
        )


def quiet(run: TaskRun, now: datetime, own: QuietHours | None = None) -> Held | None:
    """When the quiet hours around ``now`` end for ``run``: its recipient's ``own`` (on
    their zone's clock), else its kind's (on the task's); None when ``now`` is outside
    them (or the kind breaks them, or there are none)."""
    task = run.task
    try:
        policy = registry.policy(task.kind)
    except UnknownKind:
        return None
    if policy.breaks_quiet_hours:
        return None
    hours, calendar, zone = (
        (own.hours, own.calendar, own.zone)
        if own
        else (policy.quiet_hours, policy.quiet_calendar, task.timezone)
    )
    if not (hours or calendar):
        return None
    # A mandatory kind goes at the first open moment; the others staggered after it.
    stagger = (
        timedelta(0)
        if policy.mandatory
        else policy.stagger(task.recipient, spread=QUIET_SPREAD_SECONDS)
    )
    try:
        window = QuietWindow.parse(hours) if hours else None
        until = release(now, zone, window, _rest_days(calendar), stagger=stagger)
    except (RemindersError, ImproperlyConfigured, ValueError) as exc:
        # Hours stored wrong (or before the rule of an hour open), or a calendar no
        # longer configured: this run is sent as if there were none, and said so; it
        # never stops its job's other runs.
        logger.warning("run %s: quiet hours %r / %r not applied: %s", run.pk, hours, calendar, exc)
        return None
    if until is None:
        return None
    return _held(now, until, window, calendar, zone, own=own is not None)


def _held(
    now: datetime,
    until: datetime,
    window: QuietWindow | None,
    calendar: str,
    zone: str,
    *,
    own: bool,
) -> Held:
    """A run held from ``now`` to ``until``, in words, on ``zone``'s clock."""
    reasons = []
    if window is not None:
        reasons.append(f"{window} {zone}")
    if calendar:
        reasons.append(f"the rest days of calendar {calendar!r}")
    local = timing.zone(zone)
    span = (
        f"from {now.astimezone(local):%Y-%m-%d %H:%M} "
        f"to {until.astimezone(local):%Y-%m-%d %H:%M} {zone}"
    )
    why = " and ".join(reasons)
    return Held(until, f"the recipient's own: {why}" if own else why, span)


def defer_planned(runs: Sequence[TaskRun]) -> None:
    """Runs just planned (unsaved) whose due time falls inside their quiet hours are
    planned due at their end, staggered, saying so (code ``quiet_hours``): the plan and
    the wave charts show when they will go, and no claim is spent before. One query for
    the recipients' own quiet hours; none when no run is to be sent. A run whose deadline
    comes first is left due as planned: its start ends it ``expired``, saying why. The
    start asks again (``quiet``): a choice changed since still reaches the run."""
    planned = [run for run in runs if run.status == TaskRun.Status.SCHEDULED]
    if not planned:
        return
    recipients = {run.task.recipient for run in planned}
    own = {row.recipient: row for row in QuietHours.objects.filter(recipient__in=recipients)}
    for run in planned:
        held = quiet(run, run.due_at, own.get(run.task.recipient))
        if held is None or (run.deadline is not None and held.until > run.deadline):
            continue
        run.due_at = run.next_attempt_at = held.until
        run.error_code, run.error_message = QUIET_CODE, held.message


def _rest_days(calendar: str) -> Callable[[date], bool] | None:
    if not calendar:
        return None
    return lambda day: day_off(calendar, day) is not None
