"""What holds a run back on its recipient's behalf when it starts
(``engine.starting``): their opting out of its kind (``reminders.preferences``), and
the quiet hours of its kind (``Policy.quiet_hours``, ``quiet_calendar``).

Invariants:

* Read when a run starts, so a choice or a policy reaches every run not sent yet,
  whenever it was planned; asked only of a message never delivered (a key in doubt is
  decided as any other: it may have reached the recipient).
* Opting out is read in one query a job (``opted_out``); a mandatory kind
  (``Policy.mandatory``) is never skipped for it.
* Quiet hours defer, never drop: the run waits for their end on the task's clock
  (``schedule.quiet``), staggered by recipient as the kind staggers its waves (over
  ``QUIET_SPREAD_SECONDS`` for a kind with no stagger), so the end of the night is not
  a burst; a kind that ``breaks_quiet_hours`` goes at once. The caller ends a run whose
  deadline comes first ``expired`` (``Held.past_deadline`` says why).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime

from .. import registry
from ..calendars.backends import day_off
from ..exceptions import UnknownKind
from ..models import OPTED_OUT_CODE, Preference, TaskRun
from ..schedule import timing
from ..schedule.quiet import QuietWindow, quiet_until

QUIET_CODE = "quiet_hours"
QUIET_SPREAD_SECONDS = 600


def opted_out(runs: Sequence[TaskRun]) -> dict[tuple[str, str], Preference]:
    """The opt-outs of the runs' recipients from the runs' kinds, by (recipient, kind),
    those of mandatory kinds left out: one query."""
    if not runs:
        return {}
    rows = Preference.objects.filter(
        opted_out=True,
        recipient__in={run.task.recipient for run in runs},
        kind__in={run.task.kind for run in runs},
    )
    return {(row.recipient, row.kind): row for row in rows if not registry.mandatory(row.kind)}


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


def quiet(run: TaskRun, now: datetime) -> Held | None:
    """When ``run``'s kind's quiet hours around ``now`` end for its recipient, or None
    when ``now`` is outside them (or the kind breaks them, or has none)."""
    task = run.task
    try:
        policy = registry.policy(task.kind)
    except UnknownKind:
        return None
    if policy.breaks_quiet_hours or not (policy.quiet_hours or policy.quiet_calendar):
        return None
    window = QuietWindow.parse(policy.quiet_hours) if policy.quiet_hours else None
    end = quiet_until(now, task.timezone, window, _rest_days(policy.quiet_calendar))
    if end is None:
        return None
    until = end + timing.stagger(
        recipient=task.recipient,
        jitter_seconds=policy.jitter_seconds or QUIET_SPREAD_SECONDS,
        batches=policy.batches,
        batch_interval_seconds=policy.batch_interval_seconds,
    )
    reasons = []
    if window is not None:
        reasons.append(f"{window} {task.timezone}")
    if policy.quiet_calendar:
        reasons.append(f"the rest days of calendar {policy.quiet_calendar!r}")
    local = timing.zone(task.timezone)
    span = (
        f"from {now.astimezone(local):%Y-%m-%d %H:%M} "
        f"to {until.astimezone(local):%Y-%m-%d %H:%M} {task.timezone}"
    )
    return Held(until, " and ".join(reasons), span)


def _rest_days(calendar: str) -> Callable[[date], bool] | None:
    if not calendar:
        return None
    return lambda day: day_off(calendar, day) is not None
