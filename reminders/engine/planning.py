"""Planning: a task's occurrences become runs, by its kind's policy.

Each function takes the task and, where a rule of its kind decides, the kind's policy
(``policy``; by default the one registered, with the settings' overrides); the
scheduler, the API, the admin and the commands all plan through here.

Only ``active`` tasks are planned. A task this process cannot plan (its kind is not
registered here, its stored cron or zone is invalid) is put in ``error`` with the reason,
out of the due set, and ops are told once; it never stops the planning of the others.
Planning never completes a task: a schedule whose last occurrence is planned keeps its
task ``active`` (``next_run`` None) until the runs end, then ``complete_ended`` completes
it (see ``reminders.models.tasks``), so a one-shot whose run waits is never "completed".
Occurrences a task did not run on time (no scheduler, paused, in error) are never
silently dropped nor all sent at once. What becomes of them is the kind's ``missed``
rule (``runs_owed``):

* ``latest``: the most recent runs now, the others are ``skipped`` runs that say why.
* ``skip``: none is sent late. Every occurrence that passed while nothing ran is a
  ``skipped`` run, the most recent one too unless it is planned at most
  ``REMINDERS_MISSED_GRACE_SECONDS`` after its time (an ordinary tick).
* ``compensate``: as ``latest``, and each occurrence that passed unsent (skipped as
  missed, paused or in error) or whose run ended for good unsent (``failed``,
  ``expired``) is made up at the next occurrence the task plans, if at most
  ``compensate_max_age_seconds`` old (older ones are skipped, saying they were too old):
  a make-up run (``is_compensation``), due with that occurrence's run, for the missed
  occurrence (its occurrence plus ``MAKEUP_OFFSET``, so its date and stamp are the
  missed one's), under the missed occurrence's key plus ``MAKEUP_SUFFIX``; its message
  says what it makes up (``kinds.makeup_line``).

Invariants: nothing missed is silent (a skipped run says why, or that a make-up covers
it; beyond ``REMINDERS_MISSED_RUNS_RECORDED`` per tick the rest are counted on the
oldest recorded run and in the log). Nothing is made up twice: one make-up run per
missed occurrence (one run per task and occurrence), one ledger row per make-up key,
and a make-up is never made up again. A make-up never replaces the day's own message:
it is a message of its own, under a key of its own, and the missed occurrence's key and
run are left as they were.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from .. import calendars, kinds, signals
from ..conf import settings as conf
from ..exceptions import UnknownKind, UnplannableTask
from ..models import PrunedOneShot, ScheduledTask, TaskRun
from ..models.choices import (
    MADE_UP_WITH,
    MAKEUP_OFFSET,
    MAKEUP_SUFFIX,
    MISSED,
    SkipReason,
)
from ..schedule import timing
from ..schedule.policies import Policy
from . import wake
from .lost_runs import History, lost_occurrences

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)


_Planned = TypeVar("_Planned")


# Runs one task may have planned ahead in one call of ``runs_planned``.
PLAN_AHEAD_MAX = 60


# The longest a kind with no jitter spreads its digests of one window after its end
# (``digest_release``), as quiet hours spread their end (``holds.QUIET_SPREAD_SECONDS``).
DIGEST_SPREAD_SECONDS = 600


# Tasks whose pending runs ``ScheduledTask.replan_all`` cancels in one UPDATE (well under
# every database's limit of parameters in one statement).
REPLAN_CHUNK = 500


class Owed(NamedTuple):
    """The occurrences a task owes at a tick: the recorded ones (the latest last), how
    many earlier ones were left out (``REMINDERS_MISSED_RUNS_RECORDED``), and the next."""

    occurrences: list[datetime]
    dropped: int
    upcoming: datetime | None


def _on_time(occurrence: datetime, now: datetime) -> bool:
    """Whether an occurrence planned at ``now`` is still on time for the ``skip`` rule."""
    return (now - occurrence).total_seconds() <= conf.MISSED_GRACE_SECONDS


class Upcoming(NamedTuple):
    """One occurrence ahead (``ScheduledTask.upcoming``): when, when its run falls due,
    and the calendar's day off that will skip it (None: it will be sent)."""

    occurrence: datetime
    due_at: datetime
    day_off: calendars.DayOff | None


def policy_of(task: ScheduledTask, policy: Policy | None = None) -> Policy:
    """``policy`` when the caller has it, else the task's kind's as registered, with the
    settings' overrides (read on every call, so a change of settings applies)."""
    return kinds.policy(task.kind) if policy is None else policy


def replan(task: ScheduledTask, now: datetime) -> None:
    """Follow a changed schedule: runs planned under the old one and not yet started
    are cancelled, ``next_run`` is planned from ``now``, and the task is active again
    (had it completed, been cancelled or been in error) unless it is paused, which it
    stays. The API and the admin both call this. The caller saves."""
    replan_all([task], now)


def replan_all(tasks: Sequence[ScheduledTask], now: datetime) -> None:
    """``replan`` for many tasks: the pending runs of the saved ones are cancelled
    with one UPDATE per ``REPLAN_CHUNK`` tasks, not one each. The caller saves."""
    saved = [task.pk for task in tasks if task.pk is not None]
    for start in range(0, len(saved), REPLAN_CHUNK):
        TaskRun.objects.filter(task_id__in=saved[start : start + REPLAN_CHUNK]).cancel_pending()
    for task in tasks:
        task.plan_first_run(now)
        if task.status != ScheduledTask.Status.PAUSED:
            task.status = ScheduledTask.Status.ACTIVE
            task._clear_error()
    _complete_pruned(tasks)


def _complete_pruned(tasks: Sequence[ScheduledTask]) -> None:
    """A keyed one-shot planned for the time of one retention deleted once it had
    completed (``PrunedOneShot``) is completed, with nothing planned: it went."""
    keyed = [task for task in tasks if task.key and task.run_at is not None]
    for start in range(0, len(keyed), REPLAN_CHUNK):
        chunk = {task.key: task for task in keyed[start : start + REPLAN_CHUNK]}
        done = set(PrunedOneShot.objects.filter(key__in=list(chunk)).values_list("key", "run_at"))
        for key, task in chunk.items():
            if (key, task.run_at) in done:
                task.status, task.next_run = ScheduledTask.Status.COMPLETED, None


def wake_if_due(task: ScheduledTask, now: datetime | None = None) -> None:
    """Wake the schedulers once the transaction commits if this task is
    ``due_soon``. The API and the admin call this."""
    if task.due_soon(now):
        wake.notify()


def check_plannable(task: ScheduledTask) -> None:
    """Raise ``UnplannableTask`` when this process cannot plan the task as stored: its
    kind is not registered here, or its cron expression or time zone is invalid (as a
    bulk update or raw SQL can leave them)."""
    try:
        kinds.get(task.kind)
    except UnknownKind as exc:
        raise UnplannableTask(
            f"{exc} Register it with reminders.kinds.register() in an AppConfig.ready(), "
            "so that every process, run_reminders included, knows it.",
            code="unknown_kind",
        ) from None
    try:
        if task.cron:
            timing.validate_cron(task.cron)
    except timing.InvalidSchedule as exc:
        raise UnplannableTask(str(exc), code="invalid_cron") from None
    try:
        timing.zone(task.timezone)
    except timing.InvalidSchedule as exc:
        raise UnplannableTask(str(exc), code="invalid_timezone") from None


def runs_owed(
    task: ScheduledTask,
    now: datetime,
    skip: SkipReason = MISSED,
    *,
    policy: Policy | None = None,
) -> list[TaskRun]:
    """The runs of the occurrences due up to ``now``, from ``next_run`` on, by the
    kind's missed rule (see the module docstring): the latest runs unless the rule
    is ``skip`` and it is late; the earlier ones are recorded as skipped for ``skip``
    (the last ``REMINDERS_MISSED_RUNS_RECORDED``; how many older ones passed is
    logged and said on the oldest recorded); under ``compensate`` each missed or
    lost occurrence young enough gets a make-up run due with the latest. Advances
    ``next_run`` in memory (None once the schedule is exhausted: the task stays
    ``active`` until its runs end, ``TaskQuerySet.complete_ended``): the caller saves.

    Raises ``UnplannableTask`` when the task cannot be planned, whatever the cause;
    the task is left as it was then.
    """
    return _planning(task, lambda: _owed(task, now, skip, policy_of(task, policy)))


def runs_planned(
    task: ScheduledTask,
    now: datetime,
    until: datetime,
    *,
    policy: Policy | None = None,
    history: History | None = None,
) -> list[TaskRun]:
    """``runs_owed`` up to ``now``, then the runs of the occurrences after it up to
    ``until``, planned ahead one by one (at most ``PLAN_AHEAD_MAX`` in one call, so an
    every-minute schedule fills its hour over a few ticks). A run planned ahead is a
    run like any other, due at its time: what was missed is decided by the past
    alone. ``history``: the task's runs ``lost_occurrences`` reads, read for a whole
    batch of tasks (``History.read``). Advances ``next_run`` in memory; raises
    ``UnplannableTask``."""

    def plan() -> list[TaskRun]:
        rules = policy_of(task, policy)
        runs = _owed(task, now, MISSED, rules, history)
        for _planned in range(PLAN_AHEAD_MAX):
            if task.next_run is None or task.next_run > until:
                break
            runs += _owed(task, task.next_run, MISSED, rules, history)
        return runs

    return _planning(task, plan)


def _planning(task: ScheduledTask, plan: Callable[[], _Planned]) -> _Planned:
    """``plan()`` once the task is known to be plannable (checked once per call, not
    per occurrence); anything it raises is ``UnplannableTask``."""
    try:
        check_plannable(task)
        return plan()
    except UnplannableTask:
        raise
    except Exception as exc:
        raise UnplannableTask(
            f"Planning failed: {type(exc).__name__}: {exc}", code="planning_failed"
        ) from exc


def _owed(
    task: ScheduledTask,
    now: datetime,
    skip: SkipReason,
    policy: Policy,
    history: History | None = None,
) -> list[TaskRun]:
    """``runs_owed`` without the check and the error wrapping."""
    if task.next_run is None or task.next_run > now:
        return []
    owed = _occurrences_owed(task, task.next_run, now)
    runs = _plan_owed(task, owed, now, skip, policy, history)
    _log_owed(task, runs, owed, skip)
    # An exhausted schedule stays active until its runs end (``complete_ended``).
    task.next_run = owed.upcoming
    return runs


def _plan_owed(
    task: ScheduledTask,
    owed: Owed,
    now: datetime,
    skip: SkipReason,
    policy: Policy,
    history: History | None,
) -> list[TaskRun]:
    rule = policy.missed
    *missed, last = owed.occurrences
    latest: datetime | None = last
    if rule == "skip" and not _on_time(last, now):
        missed, latest = owed.occurrences, None
    if rule != "compensate" or latest is None:
        runs = [new_run(task, when, skip=skip, policy=policy) for when in missed]
        if latest is not None:
            runs.append(new_run(task, latest, policy=policy))
    else:
        runs = _compensated(task, missed, latest, now, skip, policy, history)
    if owed.dropped and runs and runs[0].status == TaskRun.Status.SKIPPED:
        runs[0].error_message += (
            f" {owed.dropped} earlier occurrences also passed and are not recorded "
            "(REMINDERS_MISSED_RUNS_RECORDED)."
        )
    return runs


def _compensated(
    task: ScheduledTask,
    missed: list[datetime],
    latest: datetime,
    now: datetime,
    skip: SkipReason,
    policy: Policy,
    history: History | None,
) -> list[TaskRun]:
    """The ``compensate`` rule: the latest occurrence's run, the missed ones recorded
    as skipped, and a make-up run, due with the latest, for each missed occurrence and
    each earlier lost one (see ``lost_occurrences``) at most the kind's
    ``compensate_max_age_seconds`` old; older missed ones are skipped as too old."""
    own = new_run(task, latest, policy=policy)
    if own.status == TaskRun.Status.SKIPPED:
        # The latest falls on a day off: no message goes today to carry make-ups.
        # The missed ones stay owed (``lost_occurrences``) for the next that goes.
        return [*(new_run(task, o, skip=skip, policy=policy) for o in missed), own]
    max_age = policy.compensate_max_age_seconds
    since = now - timedelta(seconds=max_age)
    when = latest.astimezone(timing.zone(task.timezone)).strftime("%Y-%m-%d %H:%M")
    made_up = SkipReason(skip.code, f"{skip.message} {MADE_UP_WITH.format(when=when)}")
    too_old = SkipReason(
        skip.code,
        f"{skip.message} It was too old to make up (older than {max_age} seconds).",
    )
    runs = [
        new_run(task, o, skip=made_up if o >= since else too_old, policy=policy) for o in missed
    ]
    # A day off (``holiday``) owed no message: only what was missed is made up.
    young = [r.occurrence for r in runs if r.error_message == made_up.message]
    lost = lost_occurrences(task, since, before=task.next_run or latest, history=history)
    owed = _makeups_owed(task, [*lost, *young], latest)
    return [*runs, own, *(new_makeup(task, o, own) for o in owed)]


def _makeups_owed(
    task: ScheduledTask, occurrences: list[datetime], latest: datetime
) -> list[datetime]:
    """Of ``occurrences``, one per ledger key (the first), leaving out the latest's
    key: for a task keyed by day, the day's own message covers its day."""
    own = task.ledger_key(latest)
    first: dict[str, datetime] = {}
    for occurrence in sorted(occurrences):
        first.setdefault(task.ledger_key(occurrence), occurrence)
    return [occurrence for key, occurrence in first.items() if key != own]


def _log_owed(task: ScheduledTask, runs: list[TaskRun], owed: Owed, skip: SkipReason) -> None:
    skipped = sum(run.status == TaskRun.Status.SKIPPED for run in runs)
    makeups = sum(run.is_compensation for run in runs)
    if skipped or owed.dropped:
        logger.warning(
            "task %s: %d occurrences %s (and %d earlier occurrences, not recorded)",
            task.pk,
            skipped,
            skip.code,
            owed.dropped,
        )
    if makeups:
        logger.info("task %s: %d occurrences made up", task.pk, makeups)


def _occurrences_owed(task: ScheduledTask, first: datetime, now: datetime) -> Owed:
    """``first`` and the occurrences after it up to ``now`` (the most recent ones: one
    more than are recorded), how many earlier ones were left out, and the first one
    after ``now`` (None when exhausted)."""
    occurrences = [first]
    dropped = 0
    upcoming = task.occurrence_after(first)
    while upcoming is not None and upcoming <= now:
        occurrences.append(upcoming)
        if len(occurrences) > conf.MISSED_RUNS_RECORDED + 1:
            occurrences.pop(0)
            dropped += 1
        upcoming = task.occurrence_after(upcoming)
    return Owed(occurrences, dropped, upcoming)


def calendar_in_force(task: ScheduledTask, policy: Policy | None = None) -> str:
    """The working-day calendar's name: the task's own, else its kind's ("": none)."""
    return policy_of(task, policy).calendar if task.calendar is None else task.calendar


def calendar_decision(
    task: ScheduledTask, occurrence: datetime, policy: Policy | None = None
) -> calendars.Decision | None:
    """What the working-day calendar says of ``occurrence``'s local day, and which
    source decided it (None: the task has no calendar)."""
    return calendars.decide(
        calendar_in_force(task, policy), timing.local_date(occurrence, task.timezone)
    )


def calendar_day_off(
    task: ScheduledTask, occurrence: datetime, policy: Policy | None = None
) -> calendars.DayOff | None:
    """What the working-day calendar says of ``occurrence``'s local day (None: worked),
    and nothing else: no one is told of a year it does not cover."""
    decision = calendar_decision(task, occurrence, policy)
    return None if decision is None else decision.day_off()


def day_off(task: ScheduledTask, occurrence: datetime) -> SkipReason | None:
    """Why the calendar says ``occurrence``'s local day gets no message, if it does not
    (``_day_off``)."""
    return _day_off(task, calendar_decision(task, occurrence))


def _day_off(task: ScheduledTask, decision: calendars.Decision | None) -> SkipReason | None:
    """A rest day (``holiday``, naming its source), or under the ``skip`` rule a year
    the calendar does not cover (``calendar_uncovered``). A day the fallback rule
    decided, worked or not, is told to ops through ``signals.calendar_uncovered``
    once the transaction commits: never silent."""
    if decision is None:
        return None
    if decision.uncovered:
        signals.after_commit(
            signals.calendar_uncovered,
            ScheduledTask,
            task=task,
            calendar=decision.calendar,
            year=decision.day.year,
            rule=decision.rule,
        )
    off = decision.day_off()
    return None if off is None else SkipReason(off.code, off.message)


def new_run(
    task: ScheduledTask,
    occurrence: datetime,
    *,
    skip: SkipReason | None = None,
    policy: Policy | None = None,
) -> TaskRun:
    """The run of one occurrence, unsaved; recorded as skipped for ``skip`` if given,
    or for the day off the working-day calendar gives it (which ``skip`` yields to).
    It records which source decided its day (``day_source``, ``day_note``)."""
    policy = policy_of(task, policy)
    decision = calendar_decision(task, occurrence, policy)
    skip = _day_off(task, decision) or skip
    due = due_at(task, occurrence, policy)
    run = TaskRun(
        task=task,
        occurrence=occurrence,
        run_date=timing.local_date(occurrence, task.timezone),
        due_at=due,
        next_attempt_at=due,
        priority=task.priority_rank,
        ledger_key=task.ledger_key(occurrence),
        deadline=policy.deadline(occurrence, due, task.timezone),
    )
    if decision is not None:
        run.day_source, run.day_note = decision.source, decision.note[:200]
    if skip is not None:
        run.status = TaskRun.Status.SKIPPED
        run.error_code, run.error_message = skip
        run.next_attempt_at = None
    return run


def due_at(task: ScheduledTask, occurrence: datetime, policy: Policy | None = None) -> datetime:
    """When the run of ``occurrence`` falls due: staggered (``stagger``), and for a kind
    that folds its occurrences into digests (``Policy.digest_seconds``), when its digest
    goes (``digest_release``), unless its deadline comes before that."""
    policy = policy_of(task, policy)
    if not policy.digest_seconds:
        return occurrence + stagger(task, policy)
    release = digest_release(task, occurrence, policy.digest_seconds, policy)
    deadline = policy.deadline(occurrence, release, task.timezone)
    if deadline is not None and deadline < release:
        # Its deadline (send_by) comes first: due at its own time, it goes with
        # whatever of its digest is ready then, never made to expire waiting.
        return occurrence + stagger(task, policy)
    return release


def stagger(task: ScheduledTask, policy: Policy | None = None) -> timedelta:
    """How long after each occurrence its run falls due (``Policy.stagger``)."""
    return policy_of(task, policy).stagger(task.recipient)


def digest_release(
    task: ScheduledTask, occurrence: datetime, window: int, policy: Policy | None = None
) -> datetime:
    """When the digest of ``occurrence``'s window of ``window`` seconds goes: the
    window's end, staggered by recipient as the kind staggers its waves, or, for a kind
    with no jitter, over a fifth of the window (at most ``DIGEST_SPREAD_SECONDS``): the
    digests of ten thousand recipients due in one window do not all go at its end."""
    _, end = timing.window(occurrence, task.timezone, window)
    spread = min(window // 5, DIGEST_SPREAD_SECONDS)
    return end + policy_of(task, policy).stagger(task.recipient, spread=spread)


def upcoming(task: ScheduledTask, now: datetime, count: int = 5) -> list[Upcoming]:
    """The schedule's next ``count`` occurrences after ``now`` as the scheduler will
    plan them: ``occurrence_after``, the stagger ``new_run`` gives, and the calendar's
    day off (a preview: it tells no one of an uncovered year). Whatever the status:
    the caller says what a paused or ended task's are worth. Raises
    ``UnplannableTask`` as planning does."""

    def preview() -> list[Upcoming]:
        rules = policy_of(task)
        found: list[Upcoming] = []
        occurrence = task.occurrence_after(now)
        while occurrence is not None and len(found) < count:
            found.append(
                Upcoming(
                    occurrence,
                    due_at(task, occurrence, rules),
                    calendar_day_off(task, occurrence, rules),
                )
            )
            occurrence = task.occurrence_after(occurrence)
        return found

    return _planning(task, preview)


def new_makeup(task: ScheduledTask, missed: datetime, with_run: TaskRun) -> TaskRun:
    """The make-up run of the ``missed`` occurrence, unsaved: due with ``with_run``
    (the next occurrence's run), under a ledger key of its own."""
    return TaskRun(
        task=task,
        occurrence=missed + MAKEUP_OFFSET,
        run_date=timing.local_date(missed, task.timezone),
        due_at=with_run.due_at,
        next_attempt_at=with_run.due_at,
        priority=task.priority_rank,
        ledger_key=f"{task.ledger_key(missed)}{MAKEUP_SUFFIX}",
        is_compensation=True,
        # It goes with that run, by that run's deadline: never expired for the day
        # it makes up, which has passed by definition.
        deadline=with_run.deadline,
    )
