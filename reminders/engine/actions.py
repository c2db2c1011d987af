"""What operators do to a task or a run: pause, resume, cancel, run now, retry, mark
handled. The admin's actions, the commands and the CRM call these, and only these:

* ``run_now`` makes a one-off run due now (``is_manual``): an extra
  message on request, not an occurrence of the schedule. Its occurrence is the request's
  second, or the next one no other run of the task stamps (never :00, which a cron
  occurrence's stamp reads as), so its stamp differs from every other run's and the
  provider's duplicate check does not drop it; its ledger key is
  ``<task>:now:<UTC minute>``. The rule: one run-now per task and minute. A second
  request in the same minute, or while the task's earlier run-now has not finished,
  returns that run and creates nothing; two requests racing in one minute may create
  two runs, but they share the key, and the ledger sends one message. It ignores the
  working-day calendar (someone asked for it) and is outside the rule of one message a
  day (it neither blocks nor is blocked by the day's scheduled message), is never made
  up and never skipped as missed; its kind's deadline holds: a birthday is not run now
  after 12:00 (refused), a follow-up's must go within its lateness. A digest's task is
  refused, as the digest's retry is: its lines are its runs', which go again only by
  their own retry or their own task.
* ``retry_now`` puts a run back in line, but never past its deadline: an
  ``expired`` run is retried only while its deadline is still ahead (a failure whose
  retry would have come too late expires a run early), and keeps that deadline; a run
  whose deadline passed is refused, whatever its status, since the tick would only
  expire it again. A run that a make-up run covers is refused too (retry the make-up),
  checked under the task's row lock, the one the planner (and ``resume``) holds while
  it plans make-ups, so a retry and a make-up of one occurrence never both go.
* ``RunQuerySet.cancel_pending`` (a schedule change, a cancel) ends a run in doubt
  ``unknown``, not ``cancelled``, and ops are told: it may have been delivered, and
  only a run that says so can be retried. Its message names only what ops may do: retry
  it or mark it handled, or, its task cancelled (``retry_refusal`` refuses it), check
  whether it arrived and mark it handled. A make-up it cancels no longer covers its
  occurrence, which is made up again with the next occurrence planned.
* ``mark_handled`` records who (a username, not a user: deleting users never
  touches history) looked after a run that ended unsent, and when. A retry clears it:
  a run that fails again needs someone again.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, NamedTuple

from django.db import IntegrityError, transaction
from django.db.models import Case, Q, Value, When
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from ..conf import settings as conf
from ..exceptions import ActionRefused, UnknownKind, UnplannableTask
from ..messages.digests import is_digest
from ..models import QUIET_CODE, QuietHours, ScheduledTask, SendLog, TaskRun
from ..models.choices import (
    LOST_STATUSES,
    MAKEUP_SUFFIX,
    PASSED_IN_ERROR,
    PASSED_WHILE_PAUSED,
    RUN_NOW_KEY,
    SkipReason,
)
from ..schedule import timing
from . import holds, planning, wake

if TYPE_CHECKING:
    from django.utils.functional import _StrPromise

logger = logging.getLogger(__name__)


class Refusal(NamedTuple):
    """Why an operator's action leaves a task or a run as it is: a stable code and what
    the admin says (in the active language)."""

    code: str
    message: str | _StrPromise


TASK_PAUSED = Refusal("paused", _("the task is paused: resume it first"))


TASK_CANCELLED = Refusal("cancelled", _("its task is cancelled"))


TASK_IN_ERROR = Refusal("error", _("the task cannot be planned: fix it and resume it first"))


DEADLINE_PASSED = Refusal(
    "deadline", _("its deadline has passed: a message is never sent after it")
)


NOT_ENDED_UNSENT = Refusal("status", _("not failed, unknown or expired"))


MADE_UP = Refusal("made_up", _("a make-up run covers it: retry that one instead"))


ALREADY_HANDLED = Refusal("handled", _("already handled"))


DIGEST_ENDED = Refusal(
    "digest", _("a digest that ended is not sent again: retry its runs, which go in a new one")
)


def pause(task: ScheduledTask) -> bool:
    if task.status != task.Status.ACTIVE:
        return False
    task.status = task.Status.PAUSED
    task.save(update_fields=["status", "updated_at"])
    return True


def resume(task: ScheduledTask, now: datetime | None = None) -> bool:
    """Make a paused task, or one in error, active again; False if it is neither.

    Occurrences that passed meanwhile follow the missed-run rule: the latest runs now,
    the others are recorded as skipped, saying they passed while the task was paused
    (or in error). The task is checked again first: one that cannot be planned is put
    (or left) in error with the fresh reason, and ``UnplannableTask`` says why. The
    schedulers are woken once this commits: runs of a paused task are not among the
    moments they sleep until, and the latest owed one is due now.
    """
    if task.status not in task.RESUMABLE:
        return False
    now = now or timezone.now()
    skip = PASSED_WHILE_PAUSED if task.status == task.Status.PAUSED else PASSED_IN_ERROR
    try:
        with transaction.atomic():
            # The planner's lock, which ``retry_now`` takes too: a retry of a run this
            # makes up waits, then sees the make-up and is refused.
            locked = ScheduledTask.objects.select_for_update()
            if not locked.filter(pk=task.pk, status=task.status).exists():
                return False
            _catch_up(task, now, skip)
    except UnplannableTask as exc:
        task.mark_error(exc.code, exc.message, now)
        raise
    wake.notify()
    return True


def _catch_up(task: ScheduledTask, now: datetime, skip: SkipReason) -> None:
    planning.check_plannable(task)
    if task.next_run is None:
        task.plan_first_run(now)
    _skip_planned_due(task, now, skip)
    TaskRun.objects.add_planned(planning.runs_owed(task, now, skip))
    task.status = task.Status.ACTIVE
    task._clear_error()
    task.save(update_fields=["status", "next_run", *task.ERROR_FIELDS, "updated_at"])
    # Active while a run waits; completed at once if all its runs have ended.
    if ScheduledTask.objects.complete_ended(now, among=[task.pk]):
        task.status = task.Status.COMPLETED


def _skip_planned_due(task: ScheduledTask, now: datetime, skip: SkipReason) -> None:
    """Runs planned before the pause that fell due meanwhile follow the kind's rule
    too: all are skipped when a later occurrence is owed (``runs_owed`` then runs it,
    and makes them up under ``compensate``); otherwise the latest still runs, unless
    the rule is ``skip`` and it is late. Make-up runs wait, they are late anyway."""
    since = datetime.min.replace(tzinfo=timing.UTC)
    if task.next_run is not None and task.next_run <= now:
        since = task.next_run  # what runs_owed plans again is kept, not re-planned
    if planning.policy_of(task).missed == "skip":
        since = max(since, now - timedelta(seconds=conf.MISSED_GRACE_SECONDS))
    task.runs.all().skip_all_but_latest_due(now, skip, keep_latest_since=since)


def cancel(task: ScheduledTask) -> int:
    """Stop the task and cancel its runs not yet started; returns how many."""
    with transaction.atomic():
        task.status = task.Status.CANCELLED
        task.next_run = None
        task.save(update_fields=["status", "next_run", "updated_at"])
        return TaskRun.objects.filter(task=task).cancel_pending()


def _reopen(task: ScheduledTask, now: datetime | None = None) -> None:
    """A run of ``task`` waits again: a completed task is active until it ends. Again
    once this commits: a job that ended the task's other run meanwhile, not seeing this
    one yet, may have completed it (a sweep completes it if this run has ended too)."""
    tasks = ScheduledTask.objects.filter(pk=task.pk)
    if tasks.reopen(now):
        task.status = task.Status.ACTIVE
    transaction.on_commit(tasks.reopen)


def stopped_refusal(task: ScheduledTask) -> Refusal | None:
    """Why a run asked of ``task`` now (run now, a snooze) would never come, or None:
    its task is paused, cancelled or in error (its runs wait, end or stay unplanned)."""
    if task.status == task.Status.PAUSED:
        return TASK_PAUSED
    if task.status == task.Status.CANCELLED:
        return TASK_CANCELLED
    if task.status == task.Status.ERROR:
        return TASK_IN_ERROR
    return None


def run_now_refusal(task: ScheduledTask, now: datetime) -> Refusal | None:
    """Why ``run_now`` at ``now`` would make no run, or None: a digest's task (as its
    retry is refused: run again, it would send the lines of its runs, each retried or
    sent on its own, a second time), a paused, cancelled or errored task, or a kind
    whose deadline for a run made now has passed."""
    if is_digest(task):
        return DIGEST_ENDED
    stopped = stopped_refusal(task)
    if stopped is not None:
        return stopped
    try:
        deadline = new_manual_run(task, now).deadline
    except (UnknownKind, timing.InvalidSchedule):
        return TASK_IN_ERROR
    if deadline is not None and deadline <= now:
        return DEADLINE_PASSED
    return None


def new_manual_run(task: ScheduledTask, now: datetime, by: str = "") -> TaskRun:
    """The unsaved run ``run_now`` makes at ``now``, asked for by ``by``."""
    key = RUN_NOW_KEY.format(task=task.pk, minute=now.astimezone(timing.UTC))
    return _requested_run(task, now, key, by)


def _requested_run(task: ScheduledTask, due: datetime, key: str, by: str) -> TaskRun:
    """An unsaved run made on ``by``'s request, due at ``due`` under ``key``: not an
    occurrence of the schedule (``is_manual``), at a second no other run stamps, under
    its kind's deadline counted from ``due``."""
    occurrence = _manual_occurrence(task, due)
    return TaskRun(
        task=task,
        occurrence=occurrence,
        run_date=timing.local_date(occurrence, task.timezone),
        due_at=due,
        next_attempt_at=due,
        priority=task.priority_rank,
        ledger_key=key,
        deadline=planning.policy_of(task).deadline(occurrence, due, task.timezone),
        is_manual=True,
        requested_by=by[:150],
    )


def _manual_occurrence(task: ScheduledTask, now: datetime) -> datetime:
    """``now``'s second, or the first after it that no run of the task (nor its
    one-shot time) has in its stamp; never :00, which a stamp shows as the minute."""
    second = now.replace(microsecond=0)
    taken = {task.run_at} if task.run_at is not None else set()
    if task.pk is not None:
        nearby = task.runs.filter(occurrence__range=(second, second + timedelta(minutes=2)))
        taken.update(nearby.values_list("occurrence", flat=True))
    stamped = {moment.replace(microsecond=0) for moment in taken}
    while second.second == 0 or second in stamped:
        second += timedelta(seconds=1)
    return second


def run_now(
    task: ScheduledTask, now: datetime | None = None, *, by: str = ""
) -> tuple[TaskRun, bool]:
    """Make a one-off run of this task due now, asked for by ``by`` (a username),
    and wake the schedulers once that commits; returns it and whether it is new.

    One per task and minute: in the same minute, or while the task's earlier run-now
    has not finished, that one is returned and nothing is made. Raises
    ``ActionRefused`` with ``run_now_refusal``'s reason.
    """
    now = now or timezone.now()
    refusal = run_now_refusal(task, now)
    if refusal is not None:
        raise ActionRefused(refusal.code, str(refusal.message))
    run = new_manual_run(task, now, by)
    with transaction.atomic():
        earlier = (
            task.runs.filter(is_manual=True)
            .filter(Q(ledger_key=run.ledger_key) | Q(status__in=TaskRun.UNFINISHED))
            .order_by("pk")
            .first()
        )
        if earlier is not None:
            return earlier, False
        try:
            with transaction.atomic():
                run.save()
        except IntegrityError:  # the same second, asked for beside this request
            return task.runs.get(occurrence=run.occurrence), False
        _reopen(task, now)
    wake.notify()
    return run, True


def retry_refusal(run: TaskRun, now: datetime) -> Refusal | None:
    """Why ``retry_now`` at ``now`` would leave this run as it is, or None: not
    waiting nor ended unsent, a digest that ended (its runs are retried instead), its
    task cancelled, its deadline passed, or a make-up run that covers it (waiting, sent
    or in doubt)."""
    if run.status not in run.RETRYABLE:
        return NOT_ENDED_UNSENT
    if run.status in run.UNSENT_ENDS and is_digest(run.task):
        # Its items ended with it: sent again, their lines would go twice if they were
        # retried too. They are what ops retry.
        return DIGEST_ENDED
    if run.task.status == ScheduledTask.Status.CANCELLED:
        return TASK_CANCELLED
    if run.deadline is not None and run.deadline <= now:
        return DEADLINE_PASSED
    if not run.is_compensation and covering_makeup(run) is not None:
        return MADE_UP
    return None


def covering_makeup(run: TaskRun) -> TaskRun | None:
    """The make-up run of this run's key that may still send, or did."""
    return (
        TaskRun.objects.filter(
            task_id=run.task_id,
            is_compensation=True,
            ledger_key=f"{run.ledger_key}{MAKEUP_SUFFIX}",
        )
        .exclude(status__in=(*LOST_STATUSES, run.Status.SKIPPED, run.Status.CANCELLED))
        .first()
    )


def retry_now(run: TaskRun, now: datetime | None = None) -> bool:
    """Put a waiting or ended-unsent run back in line for an immediate attempt, with
    a fresh set of retries and its deadline kept; False (nothing changed) for what
    ``retry_refusal`` refuses. A handled run is no longer handled.

    For an ``unknown`` run this is the operator's word that the message did not
    arrive: its ledger row becomes ``failed`` so that the message is sent again, or
    ``partly_sent`` where parts of it went before the one in doubt, so that the rest
    is. The schedulers are woken once this commits.
    """
    now = now or timezone.now()
    if retry_refusal(run, now) is not None:
        return False
    with transaction.atomic():
        # The planner's lock on the task: a make-up it is planning for this run is
        # committed, and seen here, before the check, or it is planned after this
        # and finds the run waiting (not lost). Never both sent.
        task = ScheduledTask.objects.select_for_update().filter(pk=run.task_id).first()
        if task is None:
            return False
        run.task = task
        if retry_refusal(run, now) is not None:
            return False
        updated = (
            TaskRun.objects.filter(pk=run.pk, status=run.status)
            .filter(Q(deadline__isnull=True) | Q(deadline__gt=now))
            .exclude(task__status=ScheduledTask.Status.CANCELLED)
            .update(
                status=run.Status.RETRYING,
                attempts=0,
                job_failures=0,
                next_attempt_at=now,
                finished_at=None,
                handled_at=None,
                handled_by="",
                # A run of a digest that ended leaves it: it goes again on its own, or
                # in a new digest.
                digest=None,
            )
        )
        if updated:
            _reopen(task, now)
        if updated and run.status == run.Status.UNKNOWN:
            SendLog.objects.filter(key=run.ledger_key, status=SendLog.Status.UNKNOWN).update(
                # Parts that went before the one in doubt did go: only the rest is sent.
                status=Case(
                    When(parts_sent__isnull=False, then=Value(SendLog.Status.PARTLY_SENT)),
                    default=Value(SendLog.Status.FAILED),
                ),
                reply_code="operator_retry",
                error_message="An operator confirmed it was not received.",
            )
    if updated:
        run.refresh_from_db()
        wake.notify()
    return bool(updated)


def handle_refusal(run: TaskRun) -> Refusal | None:
    """Why ``mark_handled`` would leave this run as it is, or None."""
    if run.status not in run.UNSENT_ENDS:
        return NOT_ENDED_UNSENT
    if run.handled_at is not None:
        return ALREADY_HANDLED
    return None


def mark_handled(run: TaskRun, by: str, now: datetime | None = None) -> bool:
    """Record that ``by`` looked after this run, if it ended unsent and nobody did
    yet (``RunQuerySet.mark_handled``)."""
    done = TaskRun.objects.filter(pk=run.pk).mark_handled(by, now or timezone.now())
    if done:
        run.refresh_from_db(fields=["handled_at", "handled_by"])
    return bool(done)


# A snoozed run's ledger key: one snooze per run (``RunAction`` is one per run).
SNOOZE_KEY = "{task}:snooze:{run}"


def snooze(run: TaskRun, until: datetime, *, by: str = "") -> TaskRun:
    """A run of ``run``'s task due at ``until``, made on ``by``'s request from a card:
    the same message again, later, as a message of its own (its own occurrence, stamp and
    key), under its kind's deadline counted from ``until``. ``until`` inside its
    recipient's quiet hours is their end (staggered, as ``holds.quiet`` says), so that
    its due time is the time it goes, and its deadline counts from there. Saved; the
    schedulers are woken once it commits if it is due within a tick. The caller asks
    ``stopped_refusal`` first."""
    task, key = run.task, SNOOZE_KEY.format(task=run.task_id, run=run.pk)
    later = _requested_run(task, until, key, by)
    own = QuietHours.objects.filter(recipient=task.recipient).first()
    held = holds.quiet(later, until, own)
    if held is not None:
        later = _requested_run(task, held.until, key, by)
        later.error_code, later.error_message = QUIET_CODE, held.message
    with transaction.atomic():
        later.save()
        _reopen(task)
    if later.due_at <= timezone.now() + timedelta(seconds=conf.TICK_SECONDS):
        wake.notify()
    return later
