"""Tasks, their runs (one per occurrence) and the send ledger (one row per idempotency key).

The database holds the invariants: exactly one of ``cron`` and ``run_at``, one run per
task and occurrence, one ledger row per key, and a task about one CRM object (a content
type and a primary key, ``about``) or about none, never half of one. State changes are
methods here, reused by the scheduler, the worker, the admin and the commands.

Only ``active`` tasks are planned. A task this process cannot plan (its kind is not
registered here, its stored cron or zone is invalid) is put in ``error`` with the reason,
out of the due set, and ops are told once; it never stops the planning of the others.
Occurrences a task did not run on time (no scheduler, paused, in error) are never
silently dropped nor all sent at once. What becomes of them is the kind's ``missed``
rule (``ScheduledTask.runs_owed``):

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

Operators act through methods here too (the admin's actions call them, and only them):

* ``ScheduledTask.run_now`` makes a one-off run due now (``is_manual``): an extra
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
  after 12:00 (refused), a follow-up's must go within its lateness.
* ``TaskRun.retry_now`` puts a run back in line, but never past its deadline: an
  ``expired`` run is retried only while its deadline is still ahead (a failure whose
  retry would have come too late expires a run early), and keeps that deadline; a run
  whose deadline passed is refused, whatever its status, since the tick would only
  expire it again. A run that a make-up run covers is refused too (retry the make-up),
  checked under the task's row lock, the one the planner (and ``resume``) holds while
  it plans make-ups, so a retry and a make-up of one occurrence never both go.
* ``RunQuerySet.cancel_pending`` (a schedule change, a cancel) ends a run in doubt
  ``unknown``, not ``cancelled``, and ops are told: it may have been delivered, and
  only a run that says so can be retried. A make-up it cancels no longer covers its
  occurrence, which is made up again with the next occurrence planned.
* ``TaskRun.mark_handled`` records who (a username, not a user: deleting users never
  touches history) looked after a run that ended unsent, and when. A retry clears it:
  a run that fails again needs someone again.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, TypeVar

from django.contrib.contenttypes.fields import GenericForeignKey
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, models, transaction
from django.db.models import Q
from django.db.models.functions import Coalesce
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from . import calendars, kinds, recipients, signals
from .calendars.days import CalendarDay, CalendarYear, DaySource  # noqa: F401 (models of this app)
from .conf import settings as conf
from .engine import sql, wake
from .exceptions import ActionRefused, UnknownKind, UnplannableTask
from .schedule import timing

if TYPE_CHECKING:
    from django.utils.functional import _StrPromise

logger = logging.getLogger(__name__)

# The longest primary key, as text, of an object a task may be about: an integer, a
# UUID (36 characters) and most text keys fit.
OBJECT_ID_MAX_LENGTH = 64

_Planned = TypeVar("_Planned")


def _max_length(choices: type[models.TextChoices]) -> int:
    return max(len(value) for value in choices.values)


def validate_kind(value: str) -> None:
    if value not in kinds.names():
        raise ValidationError(
            _("%(value)s is not a registered kind (known: %(known)s)."),
            code="unknown_kind",
            params={"value": value, "known": ", ".join(kinds.names())},
        )


def validate_cron(value: str) -> None:
    try:
        timing.validate_cron(value)
    except timing.InvalidSchedule as exc:
        raise ValidationError(str(exc), code="invalid_cron") from None


def validate_timezone(value: str) -> None:
    try:
        timing.zone(value)
    except timing.InvalidSchedule as exc:
        raise ValidationError(str(exc), code="invalid_timezone") from None


def validate_channel(value: str) -> None:
    known = list(conf.CHANNELS)
    if value not in known:
        raise ValidationError(
            _("%(value)s is not a configured channel (known: %(known)s)."),
            code="unknown_channel",
            params={"value": value, "known": ", ".join(known)},
        )


def validate_calendar(value: str) -> None:
    known = calendars.names()
    if value not in known:
        raise ValidationError(
            _("%(value)s is not a configured calendar (known: %(known)s)."),
            code="unknown_calendar",
            params={"value": value, "known": ", ".join(known)},
        )


def validate_recipient(value: str) -> None:
    """One WeCom member id: never "@all", a "|" list or a control character."""
    problem = recipients.member_id_problem(value)
    if problem is not None:
        raise ValidationError(problem.message, code=problem.code, params=problem.params)


def validate_key(value: str) -> None:
    char = recipients.control_character(value)
    if char is not None:
        raise ValidationError(
            _("The key contains the control character %(char)s."),
            code="control_character",
            params={"char": char},
        )


def validate_payload(value: Any) -> None:
    if not isinstance(value, dict):
        raise ValidationError(_("Payload must be a JSON object."), code="invalid_payload")


class Priority(models.TextChoices):
    HIGH = "high", _("High")
    NORMAL = "normal", _("Normal")
    LOW = "low", _("Low")

    @property
    def rank(self) -> int:
        """Claim order: lower goes first."""
        return [Priority.HIGH, Priority.NORMAL, Priority.LOW].index(self)

    @classmethod
    def from_rank(cls, rank: int) -> Priority:
        """The priority of a run's ``priority`` rank; an unknown rank is bulk work."""
        ranked = [cls.HIGH, cls.NORMAL, cls.LOW]
        return ranked[rank] if 0 <= rank < len(ranked) else cls.LOW


class SkipReason(NamedTuple):
    """Why an occurrence was recorded as a ``skipped`` run instead of being run."""

    code: str
    message: str


MISSED = SkipReason("missed", "Occurrence passed while no scheduler was running.")
PASSED_WHILE_PAUSED = SkipReason("paused", "Occurrence passed while the task was paused.")
PASSED_IN_ERROR = SkipReason("task_error", "Occurrence passed while the task could not be planned.")
# The error code of a run that reached its deadline unsent.
EXPIRED_CODE = "deadline"
# Why a run in doubt that was to be cancelled ended ``unknown`` (``cancel_pending``).
CANCELLED_IN_DOUBT = SkipReason(
    "cancelled_in_doubt",
    "Cancelled while waiting to send again: an earlier attempt may have delivered it. "
    "Retry it if it did not arrive.",
)

# Skipped runs whose occurrence passed unsent: the ``compensate`` rule makes them up.
MISSED_CODES = (MISSED.code, PASSED_WHILE_PAUSED.code, PASSED_IN_ERROR.code)
# Runs that ended for good without sending (``TaskRun`` is defined below): the
# ``compensate`` rule makes them up too.
LOST_STATUSES = ("failed", "expired")
# A make-up run's occurrence is its missed occurrence plus this: one run per task and
# occurrence holds for both, while its stamp (to the second) and run date are the
# missed occurrence's. Its ledger key is the missed occurrence's plus the suffix.
MAKEUP_OFFSET = timedelta(microseconds=1)
MAKEUP_SUFFIX = ":makeup"
# What a skipped run says of its make-up: which occurrence's run it goes with, or that it
# was cancelled before it went (the day is then owed again: ``lost_occurrences``).
MADE_UP_WITH = "It is made up with the occurrence of {when}."
MAKEUP_CANCELLED = (
    "Its make-up was cancelled before it went: the next occurrence the task plans makes it up."
)
_MAKEUP_SENTENCE = re.compile(
    r" (?:It is made up with the occurrence of|Its make-up was cancelled)[^.]*\."
)


def _saying(message: str, sentence: str) -> str:
    """``message`` with what it said of its make-up replaced by ``sentence``."""
    return f"{_MAKEUP_SENTENCE.sub('', message)} {sentence}"


# The ledger key of a run made on request (``ScheduledTask.run_now``): one per task and
# minute.
RUN_NOW_KEY = "{task}:now:{minute:%Y-%m-%dT%H:%MZ}"


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


# Runs one task may have planned ahead in one call of ``runs_planned``.
PLAN_AHEAD_MAX = 60
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


class TaskQuerySet(models.QuerySet["ScheduledTask"]):
    def due(self, now: datetime) -> TaskQuerySet:
        return self.filter(status=ScheduledTask.Status.ACTIVE, next_run__lte=now)

    def with_next_send(self) -> TaskQuerySet:
        """Annotated ``next_send_at``: when the task's next message goes, its earliest
        waiting run's next attempt (a run planned ahead, a retry, the last run of a
        one-shot already ``completed``), else its ``next_run``. ``next_run`` alone is
        where planning resumes: the first occurrence *beyond* the planned runs (an hour
        on for an every-minute task), which is not what ops ask a "next run" for. A
        paused task keeps ``next_run``: its waiting runs are not claimed (``claimable``)
        and are skipped when it resumes."""
        waiting = (
            TaskRun.objects.filter(task=models.OuterRef("pk"), status__in=TaskRun.WAITING)
            .order_by("next_attempt_at")
            .values("next_attempt_at")[:1]
        )
        return self.annotate(
            next_send_at=models.Case(
                models.When(status=ScheduledTask.Status.PAUSED, then="next_run"),
                default=Coalesce(models.Subquery(waiting), "next_run"),
                output_field=models.DateTimeField(),
            )
        )


class ScheduledTask(models.Model):
    class Status(models.TextChoices):
        ACTIVE = "active", _("Active")
        PAUSED = "paused", _("Paused")
        COMPLETED = "completed", _("Completed")
        CANCELLED = "cancelled", _("Cancelled")
        ERROR = "error", _("Error")

    # Statuses ``resume`` applies to; ``ended`` ones run again only on a schedule change.
    RESUMABLE: ClassVar[tuple[str, ...]] = (Status.PAUSED, Status.ERROR)
    ENDED: ClassVar[tuple[str, ...]] = (Status.COMPLETED, Status.CANCELLED)

    kind = models.CharField(_("kind"), max_length=64, validators=[validate_kind])
    recipient = models.CharField(
        _("recipient"),
        max_length=64,
        validators=[validate_recipient],
        help_text=_("WeCom user id."),
    )
    channel = models.CharField(_("channel"), max_length=64, validators=[validate_channel])
    cron = models.CharField(
        _("cron expression"), max_length=120, blank=True, validators=[validate_cron]
    )
    run_at = models.DateTimeField(_("one-shot time"), null=True, blank=True)
    timezone = models.CharField(_("time zone"), max_length=64, validators=[validate_timezone])
    payload = models.JSONField(
        _("payload"), default=dict, blank=True, validators=[validate_payload]
    )
    priority = models.CharField(
        _("priority"), max_length=_max_length(Priority), choices=Priority.choices
    )
    status = models.CharField(
        _("status"), max_length=_max_length(Status), choices=Status.choices, default=Status.ACTIVE
    )
    next_run = models.DateTimeField(_("next run"), null=True, blank=True)
    last_run_at = models.DateTimeField(_("last run"), null=True, blank=True)
    retry_count = models.PositiveIntegerField(
        _("retries"), default=0, help_text=_("Retries spent by this task's runs.")
    )
    # NULL: the kind's calendar; "": every day (the one empty value that differs from NULL).
    calendar = models.CharField(  # noqa: DJ001
        _("working-day calendar"),
        max_length=64,
        null=True,
        blank=True,
        validators=[validate_calendar],
        help_text=_("Empty: the kind's. Occurrences on the calendar's rest days are skipped."),
    )
    error_code = models.CharField(_("error code"), max_length=64, blank=True)
    error_message = models.TextField(
        _("error"), blank=True, help_text=_("Why the task cannot run.")
    )
    error_at = models.DateTimeField(_("error since"), null=True, blank=True)
    key = models.CharField(
        _("key"),
        max_length=200,
        null=True,
        blank=True,
        unique=True,
        validators=[validate_key],
        help_text=_("The CRM's own identifier: scheduling again with it updates this task."),
    )
    # The CRM object the task is about, if any (``about``): set together or not at all.
    # PROTECT: a content type goes only when its model is removed from the CRM, and the
    # tasks about its objects (and their runs) are not deleted with it unasked.
    content_type = models.ForeignKey(
        ContentType,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("about (type)"),
    )
    # Text, so that integer, UUID and text primary keys all fit; NULL, as the content
    # type, when the task is about nothing (the GenericForeignKey sets both to None).
    object_id = models.CharField(  # noqa: DJ001
        _("about (id)"), max_length=OBJECT_ID_MAX_LENGTH, null=True, blank=True
    )
    about = GenericForeignKey("content_type", "object_id")
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    objects = TaskQuerySet.as_manager()

    class Meta:
        # Not "scheduled task(s)": django-q2's own admin names its schedules so, and a
        # CRM running django-q2 of its own shows both (reminders.engine.django_q_owner).
        verbose_name = _("scheduled message")
        verbose_name_plural = _("scheduled messages")
        constraints = [
            models.CheckConstraint(
                name="reminders_task_cron_xor_run_at",
                condition=(Q(cron="") & Q(run_at__isnull=False))
                | (~Q(cron="") & Q(run_at__isnull=True)),
                violation_error_message=_("Give exactly one of a cron expression and a time."),
            ),
            # The member id rule of ``reminders.recipients``, for rows that bypass the
            # model's validation (imports, bulk_create, raw SQL).
            models.CheckConstraint(
                name="reminders_task_recipient_is_member_id",
                condition=Q(recipient__regex=recipients.MEMBER_ID_SQL)
                & ~Q(recipient__regex=recipients.OUTSIDE_MEMBER_ID_SQL),
                violation_error_message=_("A recipient is one WeCom member id."),
            ),
            # ``about``: an object (a type and a non-empty id) or nothing, never half.
            models.CheckConstraint(
                name="reminders_task_about_whole",
                condition=(Q(content_type__isnull=True) & Q(object_id__isnull=True))
                | (Q(content_type__isnull=False) & Q(object_id__isnull=False) & ~Q(object_id="")),
                violation_error_message=_(
                    "A task is about an object (its type and id) or about nothing."
                ),
            ),
        ]
        indexes = [
            models.Index(
                fields=["next_run"],
                name="reminders_task_due_idx",
                condition=Q(status="active"),
            ),
            # ``api.cancel_for(obj)``: the tasks about one object.
            models.Index(fields=["content_type", "object_id"], name="reminders_task_about_idx"),
        ]
        permissions = [
            ("pause_scheduledtask", "Can pause and resume scheduled tasks"),
            ("run_now_scheduledtask", "Can run scheduled tasks now"),
        ]

    def __str__(self) -> str:
        return f"{kinds.label(self.kind)} → {self.recipient} ({self.schedule_display})"

    @property
    def schedule_display(self) -> str:
        return self.cron or (self.run_at.isoformat() if self.run_at else "-")

    def clean(self) -> None:
        """What the check constraints hold, said on the fields at fault; so a task that
        passes ``full_clean`` is never refused by them."""
        errors: dict[str, Any] = {}
        if bool(self.cron) == (self.run_at is not None):
            message = _("Give exactly one of a cron expression and a one-shot time.")
            errors.update(cron=message, run_at=message)
        if (self.content_type_id is None) != (self.object_id is None) or self.object_id == "":
            errors["object_id"] = _("A task is about an object (its type and id) or about nothing.")
        if errors:
            raise ValidationError(errors)

    @property
    def priority_rank(self) -> int:
        return Priority(self.priority).rank

    @property
    def fires_at_most_daily(self) -> bool:
        return bool(self.cron) and timing.fires_at_most_daily(self.cron)

    @property
    def keyed_by_day(self) -> bool:
        """Whether this task sends at most one message a local day: its kind's policy
        says so (``key_per``), or, by default, its schedule fires at most daily."""
        try:
            key_per = kinds.policy(self.kind).key_per
        except UnknownKind:
            key_per = "auto"
        if key_per == "auto":
            return self.fires_at_most_daily
        return key_per == "day"

    def occurrence_after(self, moment: datetime) -> datetime | None:
        """The schedule's first occurrence strictly after ``moment``; None when exhausted."""
        if self.cron:
            return timing.next_occurrence(self.cron, self.timezone, moment)
        if self.run_at is not None and self.run_at > moment:
            return self.run_at
        return None

    def plan_first_run(self, now: datetime) -> None:
        """Set ``next_run`` for a new or re-scheduled task (a past one-shot is due now)."""
        if self.cron:
            self.next_run = timing.next_occurrence(self.cron, self.timezone, now)
        else:
            self.next_run = self.run_at

    def replan(self, now: datetime) -> None:
        """Follow a changed schedule: runs planned under the old one and not yet started
        are cancelled, ``next_run`` is planned from ``now``, and the task is active again
        (had it completed, been cancelled or been in error) unless it is paused, which it
        stays. The API and the admin both call this. The caller saves."""
        self.replan_all([self], now)

    @classmethod
    def replan_all(cls, tasks: Sequence[ScheduledTask], now: datetime) -> None:
        """``replan`` for many tasks: the pending runs of the saved ones are cancelled
        with one UPDATE per ``REPLAN_CHUNK`` tasks, not one each. The caller saves."""
        saved = [task.pk for task in tasks if task.pk is not None]
        for start in range(0, len(saved), REPLAN_CHUNK):
            TaskRun.objects.filter(task_id__in=saved[start : start + REPLAN_CHUNK]).cancel_pending()
        for task in tasks:
            task.plan_first_run(now)
            if task.status != cls.Status.PAUSED:
                task.status = cls.Status.ACTIVE
                task._clear_error()
        cls._complete_pruned(tasks)

    @classmethod
    def _complete_pruned(cls, tasks: Sequence[ScheduledTask]) -> None:
        """A keyed one-shot planned for the time of one retention deleted once it had
        completed (``PrunedOneShot``) is completed, with nothing planned: it went."""
        keyed = [task for task in tasks if task.key and task.run_at is not None]
        for start in range(0, len(keyed), REPLAN_CHUNK):
            chunk = {task.key: task for task in keyed[start : start + REPLAN_CHUNK]}
            done = set(
                PrunedOneShot.objects.filter(key__in=list(chunk)).values_list("key", "run_at")
            )
            for key, task in chunk.items():
                if (key, task.run_at) in done:
                    task.status, task.next_run = cls.Status.COMPLETED, None

    def due_soon(self, now: datetime | None = None) -> bool:
        """Whether this task, as saved, is active and falls due within a tick
        (``REMINDERS_TICK_SECONDS``): the schedulers would find it only at their next
        scan, unless woken."""
        soon = (now or timezone.now()) + timedelta(seconds=conf.TICK_SECONDS)
        return (
            self.status == self.Status.ACTIVE
            and self.next_run is not None
            and self.next_run <= soon
        )

    def wake_if_due(self, now: datetime | None = None) -> None:
        """Wake the schedulers once the transaction commits if this task is
        ``due_soon``. The API and the admin call this."""
        if self.due_soon(now):
            wake.notify()

    def check_plannable(self) -> None:
        """Raise ``UnplannableTask`` when this process cannot plan the task as stored: its
        kind is not registered here, or its cron expression or time zone is invalid (as a
        bulk update or raw SQL can leave them)."""
        try:
            kinds.get(self.kind)
        except UnknownKind as exc:
            raise UnplannableTask(
                f"{exc} Register it with reminders.kinds.register() in an AppConfig.ready(), "
                "so that every process, run_reminders included, knows it.",
                code="unknown_kind",
            ) from None
        try:
            if self.cron:
                timing.validate_cron(self.cron)
        except timing.InvalidSchedule as exc:
            raise UnplannableTask(str(exc), code="invalid_cron") from None
        try:
            timing.zone(self.timezone)
        except timing.InvalidSchedule as exc:
            raise UnplannableTask(str(exc), code="invalid_timezone") from None

    def runs_owed(self, now: datetime, skip: SkipReason = MISSED) -> list[TaskRun]:
        """The runs of the occurrences due up to ``now``, from ``next_run`` on, by the
        kind's missed rule (see the module docstring): the latest runs unless the rule
        is ``skip`` and it is late; the earlier ones are recorded as skipped for ``skip``
        (the last ``REMINDERS_MISSED_RUNS_RECORDED``; how many older ones passed is
        logged and said on the oldest recorded); under ``compensate`` each missed or
        lost occurrence young enough gets a make-up run due with the latest. Advances
        ``next_run``, and completes an exhausted schedule, in memory: the caller saves.

        Raises ``UnplannableTask`` when the task cannot be planned, whatever the cause;
        the task is left as it was then.
        """
        return self._planning(lambda: self._owed(now, skip))

    def runs_planned(self, now: datetime, until: datetime) -> list[TaskRun]:
        """``runs_owed`` up to ``now``, then the runs of the occurrences after it up to
        ``until``, planned ahead one by one (at most ``PLAN_AHEAD_MAX`` in one call, so an
        every-minute schedule fills its hour over a few ticks). A run planned ahead is a
        run like any other, due at its time: what was missed is decided by the past
        alone. Advances ``next_run`` in memory; raises ``UnplannableTask``."""

        def plan() -> list[TaskRun]:
            runs = self._owed(now, MISSED)
            for _planned in range(PLAN_AHEAD_MAX):
                if self.next_run is None or self.next_run > until:
                    break
                runs += self._owed(self.next_run, MISSED)
            return runs

        return self._planning(plan)

    def _planning(self, plan: Callable[[], _Planned]) -> _Planned:
        """``plan()`` once the task is known to be plannable (checked once per call, not
        per occurrence); anything it raises is ``UnplannableTask``."""
        try:
            self.check_plannable()
            return plan()
        except UnplannableTask:
            raise
        except Exception as exc:
            raise UnplannableTask(
                f"Planning failed: {type(exc).__name__}: {exc}", code="planning_failed"
            ) from exc

    def _owed(self, now: datetime, skip: SkipReason) -> list[TaskRun]:
        """``runs_owed`` without the check and the error wrapping."""
        if self.next_run is None or self.next_run > now:
            return []
        owed = self._occurrences_owed(self.next_run, now)
        runs = self._plan_owed(owed, now, skip)
        self._log_owed(runs, owed, skip)
        self.next_run = owed.upcoming
        if owed.upcoming is None:
            self.status = self.Status.COMPLETED
        return runs

    def _plan_owed(self, owed: Owed, now: datetime, skip: SkipReason) -> list[TaskRun]:
        rule = kinds.policy(self.kind).missed
        *missed, last = owed.occurrences
        latest: datetime | None = last
        if rule == "skip" and not _on_time(last, now):
            missed, latest = owed.occurrences, None
        if rule != "compensate" or latest is None:
            runs = [self.new_run(when, skip=skip) for when in missed]
            if latest is not None:
                runs.append(self.new_run(latest))
        else:
            runs = self._compensated(missed, latest, now, skip)
        if owed.dropped and runs and runs[0].status == TaskRun.Status.SKIPPED:
            runs[0].error_message += (
                f" {owed.dropped} earlier occurrences also passed and are not recorded "
                "(REMINDERS_MISSED_RUNS_RECORDED)."
            )
        return runs

    def _compensated(
        self, missed: list[datetime], latest: datetime, now: datetime, skip: SkipReason
    ) -> list[TaskRun]:
        """The ``compensate`` rule: the latest occurrence's run, the missed ones recorded
        as skipped, and a make-up run, due with the latest, for each missed occurrence and
        each earlier lost one (see ``lost_occurrences``) at most the kind's
        ``compensate_max_age_seconds`` old; older missed ones are skipped as too old."""
        own = self.new_run(latest)
        if own.status == TaskRun.Status.SKIPPED:
            # The latest falls on a day off: no message goes today to carry make-ups.
            # The missed ones stay owed (``lost_occurrences``) for the next that goes.
            return [*(self.new_run(o, skip=skip) for o in missed), own]
        max_age = kinds.policy(self.kind).compensate_max_age_seconds
        since = now - timedelta(seconds=max_age)
        when = latest.astimezone(timing.zone(self.timezone)).strftime("%Y-%m-%d %H:%M")
        made_up = SkipReason(skip.code, f"{skip.message} {MADE_UP_WITH.format(when=when)}")
        too_old = SkipReason(
            skip.code,
            f"{skip.message} It was too old to make up (older than {max_age} seconds).",
        )
        runs = [self.new_run(o, skip=made_up if o >= since else too_old) for o in missed]
        # A day off (``holiday``) owed no message: only what was missed is made up.
        young = [r.occurrence for r in runs if r.error_message == made_up.message]
        lost = self.lost_occurrences(since, before=self.next_run or latest)
        owed = self._makeups_owed([*lost, *young], latest)
        return [*runs, own, *(self.new_makeup(o, own) for o in owed)]

    def _makeups_owed(self, occurrences: list[datetime], latest: datetime) -> list[datetime]:
        """Of ``occurrences``, one per ledger key (the first), leaving out the latest's
        key: for a task keyed by day, the day's own message covers its day."""
        own = self.ledger_key(latest)
        first: dict[str, datetime] = {}
        for occurrence in sorted(occurrences):
            first.setdefault(self.ledger_key(occurrence), occurrence)
        return [occurrence for key, occurrence in first.items() if key != own]

    def lost_occurrences(self, since: datetime, before: datetime) -> list[datetime]:
        """Occurrences in [``since``, ``before``) that no message went out for and no
        make-up covers yet (none under their key but a cancelled one): their run ended
        for good without sending (``failed``, ``expired``: by status name) or was
        skipped as missed (downtime, a pause, an error). A make-up run's own failure is
        not made up again, nor a run made on request's: it is no occurrence."""
        if self.pk is None:
            return []
        lost = Q(status__in=LOST_STATUSES) | Q(
            status=TaskRun.Status.SKIPPED, error_code__in=MISSED_CODES
        )
        # A make-up covers its occurrence unless it was cancelled before it went (a
        # schedule change): the occurrence is then owed again.
        rows = (
            self.runs.filter(occurrence__gte=since, occurrence__lt=before, is_manual=False)
            .filter(Q(is_compensation=True) | lost)
            .values_list("occurrence", "is_compensation", "ledger_key", "status")
        )
        covered = {key for _, makeup, key, status in rows if makeup and status != "cancelled"}
        return sorted(
            o
            for o, makeup, _, _ in rows
            if not makeup and f"{self.ledger_key(o)}{MAKEUP_SUFFIX}" not in covered
        )

    def _log_owed(self, runs: list[TaskRun], owed: Owed, skip: SkipReason) -> None:
        skipped = sum(run.status == TaskRun.Status.SKIPPED for run in runs)
        makeups = sum(run.is_compensation for run in runs)
        if skipped or owed.dropped:
            logger.warning(
                "task %s: %d occurrences %s (and %d earlier occurrences, not recorded)",
                self.pk,
                skipped,
                skip.code,
                owed.dropped,
            )
        if makeups:
            logger.info("task %s: %d occurrences made up", self.pk, makeups)

    def _occurrences_owed(self, first: datetime, now: datetime) -> Owed:
        """``first`` and the occurrences after it up to ``now`` (the most recent ones: one
        more than are recorded), how many earlier ones were left out, and the first one
        after ``now`` (None when exhausted)."""
        occurrences = [first]
        dropped = 0
        upcoming = self.occurrence_after(first)
        while upcoming is not None and upcoming <= now:
            occurrences.append(upcoming)
            if len(occurrences) > conf.MISSED_RUNS_RECORDED + 1:
                occurrences.pop(0)
                dropped += 1
            upcoming = self.occurrence_after(upcoming)
        return Owed(occurrences, dropped, upcoming)

    def ledger_key(self, occurrence: datetime) -> str:
        """The idempotency key of one occurrence.

        For a task that fires at most once a day, the local day: its midnight with the
        zone's offset (``42:2026-12-03T00:00+08:00``), so that no one gets the same daily
        report twice when the schedule moves within the day, while a move to a zone whose
        day is another stretch of time gets a key of its own. The exact occurrence
        otherwise. Delivery also refuses a second message on one local day for such a
        task whatever the keys (a schedule that went from twice a day to daily).
        """
        if self.keyed_by_day:
            start, _ = timing.local_day(occurrence, self.timezone)
            return f"{self.pk}:{start.isoformat(timespec='minutes')}"
        return f"{self.pk}:{occurrence.astimezone(timing.UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"

    @property
    def calendar_in_force(self) -> str:
        """The working-day calendar's name: the task's own, else its kind's ("": none)."""
        return kinds.policy(self.kind).calendar if self.calendar is None else self.calendar

    def calendar_decision(self, occurrence: datetime) -> calendars.Decision | None:
        """What the working-day calendar says of ``occurrence``'s local day, and which
        source decided it (None: the task has no calendar)."""
        return calendars.decide(
            self.calendar_in_force, timing.local_date(occurrence, self.timezone)
        )

    def calendar_day_off(self, occurrence: datetime) -> calendars.DayOff | None:
        """What the working-day calendar says of ``occurrence``'s local day (None: worked),
        and nothing else: no one is told of a year it does not cover."""
        decision = self.calendar_decision(occurrence)
        return None if decision is None else decision.day_off()

    def day_off(self, occurrence: datetime) -> SkipReason | None:
        """Why the calendar says ``occurrence``'s local day gets no message, if it does not
        (``_day_off``)."""
        return self._day_off(self.calendar_decision(occurrence))

    def _day_off(self, decision: calendars.Decision | None) -> SkipReason | None:
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
                task=self,
                calendar=decision.calendar,
                year=decision.day.year,
                rule=decision.rule,
            )
        off = decision.day_off()
        return None if off is None else SkipReason(off.code, off.message)

    def new_run(self, occurrence: datetime, *, skip: SkipReason | None = None) -> TaskRun:
        """The run of one occurrence, unsaved; recorded as skipped for ``skip`` if given,
        or for the day off the working-day calendar gives it (which ``skip`` yields to).
        It records which source decided its day (``day_source``, ``day_note``)."""
        decision = self.calendar_decision(occurrence)
        skip = self._day_off(decision) or skip
        policy = kinds.policy(self.kind)
        delay = self.stagger()
        run = TaskRun(
            task=self,
            occurrence=occurrence,
            run_date=timing.local_date(occurrence, self.timezone),
            due_at=occurrence + delay,
            next_attempt_at=occurrence + delay,
            priority=self.priority_rank,
            ledger_key=self.ledger_key(occurrence),
            deadline=policy.deadline(occurrence, occurrence + delay, self.timezone),
        )
        if decision is not None:
            run.day_source, run.day_note = decision.source, decision.note[:200]
        if skip is not None:
            run.status = TaskRun.Status.SKIPPED
            run.error_code, run.error_message = skip
            run.next_attempt_at = None
        return run

    def stagger(self) -> timedelta:
        """How long after each occurrence its run falls due (``timing.stagger``)."""
        policy = kinds.policy(self.kind)
        return timing.stagger(
            recipient=self.recipient,
            jitter_seconds=policy.jitter_seconds,
            batches=policy.batches,
            batch_interval_seconds=policy.batch_interval_seconds,
        )

    def upcoming(self, now: datetime, count: int = 5) -> list[Upcoming]:
        """The schedule's next ``count`` occurrences after ``now`` as the scheduler will
        plan them: ``occurrence_after``, the stagger ``new_run`` gives, and the calendar's
        day off (a preview: it tells no one of an uncovered year). Whatever the status:
        the caller says what a paused or ended task's are worth. Raises
        ``UnplannableTask`` as planning does."""

        def preview() -> list[Upcoming]:
            found: list[Upcoming] = []
            occurrence = self.occurrence_after(now)
            while occurrence is not None and len(found) < count:
                found.append(
                    Upcoming(
                        occurrence, occurrence + self.stagger(), self.calendar_day_off(occurrence)
                    )
                )
                occurrence = self.occurrence_after(occurrence)
            return found

        return self._planning(preview)

    def new_makeup(self, missed: datetime, with_run: TaskRun) -> TaskRun:
        """The make-up run of the ``missed`` occurrence, unsaved: due with ``with_run``
        (the next occurrence's run), under a ledger key of its own."""
        return TaskRun(
            task=self,
            occurrence=missed + MAKEUP_OFFSET,
            run_date=timing.local_date(missed, self.timezone),
            due_at=with_run.due_at,
            next_attempt_at=with_run.due_at,
            priority=self.priority_rank,
            ledger_key=f"{self.ledger_key(missed)}{MAKEUP_SUFFIX}",
            is_compensation=True,
            # It goes with that run, by that run's deadline: never expired for the day
            # it makes up, which has passed by definition.
            deadline=with_run.deadline,
        )

    # State changes -------------------------------------------------------------------

    def pause(self) -> bool:
        if self.status != self.Status.ACTIVE:
            return False
        self.status = self.Status.PAUSED
        self.save(update_fields=["status", "updated_at"])
        return True

    def resume(self, now: datetime | None = None) -> bool:
        """Make a paused task, or one in error, active again; False if it is neither.

        Occurrences that passed meanwhile follow the missed-run rule: the latest runs now,
        the others are recorded as skipped, saying they passed while the task was paused
        (or in error). The task is checked again first: one that cannot be planned is put
        (or left) in error with the fresh reason, and ``UnplannableTask`` says why. The
        schedulers are woken once this commits: runs of a paused task are not among the
        moments they sleep until, and the latest owed one is due now.
        """
        if self.status not in self.RESUMABLE:
            return False
        now = now or timezone.now()
        skip = PASSED_WHILE_PAUSED if self.status == self.Status.PAUSED else PASSED_IN_ERROR
        try:
            with transaction.atomic():
                # The planner's lock, which ``retry_now`` takes too: a retry of a run this
                # makes up waits, then sees the make-up and is refused.
                locked = ScheduledTask.objects.select_for_update()
                if not locked.filter(pk=self.pk, status=self.status).exists():
                    return False
                self._catch_up(now, skip)
        except UnplannableTask as exc:
            self.mark_error(exc.code, exc.message, now)
            raise
        wake.notify()
        return True

    def _catch_up(self, now: datetime, skip: SkipReason) -> None:
        self.check_plannable()
        if self.next_run is None:
            self.plan_first_run(now)
        self._skip_planned_due(now, skip)
        TaskRun.objects.add_planned(self.runs_owed(now, skip))
        self.status = self.Status.ACTIVE if self.next_run else self.Status.COMPLETED
        self._clear_error()
        self.save(update_fields=["status", "next_run", *self.ERROR_FIELDS, "updated_at"])

    def _skip_planned_due(self, now: datetime, skip: SkipReason) -> None:
        """Runs planned before the pause that fell due meanwhile follow the kind's rule
        too: all are skipped when a later occurrence is owed (``runs_owed`` then runs it,
        and makes them up under ``compensate``); otherwise the latest still runs, unless
        the rule is ``skip`` and it is late. Make-up runs wait, they are late anyway."""
        since = datetime.min.replace(tzinfo=timing.UTC)
        if self.next_run is not None and self.next_run <= now:
            since = self.next_run  # what runs_owed plans again is kept, not re-planned
        if kinds.policy(self.kind).missed == "skip":
            since = max(since, now - timedelta(seconds=conf.MISSED_GRACE_SECONDS))
        self.runs.all().skip_all_but_latest_due(now, skip, keep_latest_since=since)

    ERROR_FIELDS: ClassVar[tuple[str, ...]] = ("error_code", "error_message", "error_at")

    def mark_error(self, code: str, message: str, now: datetime | None = None) -> None:
        """Take the task out of the due set with the reason why it cannot run, and tell
        ops through ``signals.task_error`` once the transaction commits."""
        self.status = self.Status.ERROR
        self.error_code = code[:64]
        self.error_message = message
        self.error_at = now or timezone.now()
        self.save(update_fields=["status", *self.ERROR_FIELDS, "updated_at"])
        signals.after_commit(
            signals.task_error, ScheduledTask, task=self, code=code, message=message
        )

    def _clear_error(self) -> None:
        self.error_code = self.error_message = ""
        self.error_at = None

    def cancel(self) -> int:
        """Stop the task and cancel its runs not yet started; returns how many."""
        with transaction.atomic():
            self.status = self.Status.CANCELLED
            self.next_run = None
            self.save(update_fields=["status", "next_run", "updated_at"])
            return TaskRun.objects.filter(task=self).cancel_pending()

    # Run now (see the module docstring) ----------------------------------------------

    def run_now_refusal(self, now: datetime) -> Refusal | None:
        """Why ``run_now`` at ``now`` would make no run, or None: a paused, cancelled
        or errored task, or a kind whose deadline for a run made now has passed."""
        if self.status == self.Status.PAUSED:
            return TASK_PAUSED
        if self.status == self.Status.CANCELLED:
            return TASK_CANCELLED
        if self.status == self.Status.ERROR:
            return TASK_IN_ERROR
        try:
            deadline = self.new_manual_run(now).deadline
        except (UnknownKind, timing.InvalidSchedule):
            return TASK_IN_ERROR
        if deadline is not None and deadline <= now:
            return DEADLINE_PASSED
        return None

    def new_manual_run(self, now: datetime, by: str = "") -> TaskRun:
        """The unsaved run ``run_now`` makes at ``now``, asked for by ``by``."""
        occurrence = self._manual_occurrence(now)
        return TaskRun(
            task=self,
            occurrence=occurrence,
            run_date=timing.local_date(occurrence, self.timezone),
            due_at=now,
            next_attempt_at=now,
            priority=self.priority_rank,
            ledger_key=RUN_NOW_KEY.format(task=self.pk, minute=now.astimezone(timing.UTC)),
            deadline=kinds.policy(self.kind).deadline(occurrence, now, self.timezone),
            is_manual=True,
            requested_by=by[:150],
        )

    def _manual_occurrence(self, now: datetime) -> datetime:
        """``now``'s second, or the first after it that no run of the task (nor its
        one-shot time) has in its stamp; never :00, which a stamp shows as the minute."""
        second = now.replace(microsecond=0)
        taken = {self.run_at} if self.run_at is not None else set()
        if self.pk is not None:
            nearby = self.runs.filter(occurrence__range=(second, second + timedelta(minutes=2)))
            taken.update(nearby.values_list("occurrence", flat=True))
        stamped = {moment.replace(microsecond=0) for moment in taken}
        while second.second == 0 or second in stamped:
            second += timedelta(seconds=1)
        return second

    def run_now(self, now: datetime | None = None, *, by: str = "") -> tuple[TaskRun, bool]:
        """Make a one-off run of this task due now, asked for by ``by`` (a username),
        and wake the schedulers once that commits; returns it and whether it is new.

        One per task and minute: in the same minute, or while the task's earlier run-now
        has not finished, that one is returned and nothing is made. Raises
        ``ActionRefused`` with ``run_now_refusal``'s reason.
        """
        now = now or timezone.now()
        refusal = self.run_now_refusal(now)
        if refusal is not None:
            raise ActionRefused(refusal.code, str(refusal.message))
        run = self.new_manual_run(now, by)
        with transaction.atomic():
            earlier = (
                self.runs.filter(is_manual=True)
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
                return self.runs.get(occurrence=run.occurrence), False
        wake.notify()
        return run, True


class Upcoming(NamedTuple):
    """One occurrence ahead (``ScheduledTask.upcoming``): when, when its run falls due,
    and the calendar's day off that will skip it (None: it will be sent)."""

    occurrence: datetime
    due_at: datetime
    day_off: calendars.DayOff | None


# What a re-planned occurrence takes from its new run when its cancelled run is revived.
REPLANNED_FIELDS = [
    "status",
    "due_at",
    "next_attempt_at",
    "priority",
    "ledger_key",
    "attempts",
    "error_code",
    "error_message",
    "finished_at",
    "is_compensation",
    "deadline",
    "day_source",
    "day_note",
]


def _say_of_makeups(says: dict[tuple[int, str], str]) -> None:
    """Make the skipped runs of each (task, ledger key) say ``says[...]`` of their
    make-up instead of what they said."""
    if not says:
        return
    which = Q()
    for task_id, key in says:
        which |= Q(task_id=task_id, ledger_key=key)
    skipped = TaskRun.objects.filter(
        which, status=TaskRun.Status.SKIPPED, error_code__in=MISSED_CODES, is_compensation=False
    ).only("pk", "task_id", "ledger_key", "error_message")
    changed = []
    for run in skipped:
        message = _saying(run.error_message, says[(run.task_id, run.ledger_key)])
        if message != run.error_message:
            run.error_message = message
            changed.append(run)
    TaskRun.objects.bulk_update(changed, ["error_message"])


def _due(now: datetime) -> Q:
    return Q(status__in=TaskRun.WAITING, next_attempt_at__lte=now)


def _abandoned(now: datetime) -> Q:
    return Q(status__in=TaskRun.LEASED, lease_expires_at__lt=now)


class RunQuerySet(models.QuerySet["TaskRun"]):
    def claimable(self, now: datetime) -> RunQuerySet:
        """Runs a scheduler may claim: due and waiting (their task not paused), or held
        under an expired lease."""
        waiting = _due(now) & ~Q(task__status=ScheduledTask.Status.PAUSED)
        return self.filter(waiting | _abandoned(now))

    def due_or_abandoned(self, now: datetime) -> RunQuerySet:
        """``claimable`` on the run's own columns: what a claim's UPDATE re-checks. It
        reads no other table: on MariaDB an UPDATE joined to the tasks locks run rows
        well beyond the claim, and deadlocks with workers starting theirs."""
        return self.filter(_due(now) | _abandoned(now))

    def add_planned(self, runs: Sequence[TaskRun]) -> None:
        """Save newly planned runs. One another scheduler created first is left as it is
        (one run per task and occurrence), and an occurrence planned again gets its
        cancelled run back."""
        TaskRun.objects.bulk_create(runs, ignore_conflicts=True)
        self._revive_cancelled(runs)
        self._say_made_up(runs)

    def _say_made_up(self, runs: Sequence[TaskRun]) -> None:
        """The skipped runs that these make-ups cover say which occurrence's run they
        go with (one planned earlier may have said its make-up was cancelled)."""
        says: dict[tuple[int, str], str] = {}
        # A make-up is due with the run it goes with (``new_makeup``).
        owns = {(run.task_id, run.due_at): run for run in runs if not run.is_compensation}
        for makeup in runs:
            if not makeup.is_compensation:
                continue
            own = owns.get((makeup.task_id, makeup.due_at))
            if own is not None:
                local = own.occurrence.astimezone(timing.zone(own.task.timezone))
                when = MADE_UP_WITH.format(when=f"{local:%Y-%m-%d %H:%M}")
                says[(makeup.task_id, makeup.ledger_key.removesuffix(MAKEUP_SUFFIX))] = when
        _say_of_makeups(says)

    def _revive_cancelled(self, runs: Sequence[TaskRun]) -> None:
        """A schedule moved away and back (09:00 → 10:00 → 09:00) plans an occurrence whose
        run was cancelled; the unique (task, occurrence) makes ``bulk_create`` drop the new
        one, so the old row is put back in line instead."""
        wanted = {(run.task_id, run.occurrence): run for run in runs if run.status == "scheduled"}
        if not wanted:
            return
        cancelled = TaskRun.objects.filter(
            status=TaskRun.Status.CANCELLED,
            task_id__in={task_id for task_id, _ in wanted},
            occurrence__in={occurrence for _, occurrence in wanted},
        )
        revived = []
        for old in cancelled:
            new = wanted.get((old.task_id, old.occurrence))
            if new is None:
                continue
            for field in REPLANNED_FIELDS:
                setattr(old, field, getattr(new, field))
            revived.append(old)
        TaskRun.objects.bulk_update(revived, REPLANNED_FIELDS)

    def skip_all_but_latest_due(
        self, now: datetime, skip: SkipReason, *, keep_latest_since: datetime | None
    ) -> int:
        """Record the waiting runs due by ``now`` as skipped for ``skip``, but the latest
        occurrence when it is at or after ``keep_latest_since`` (None: none is left);
        returns how many were skipped. Make-up runs and runs made on request are left
        to run (their deadline decides)."""
        due = self.filter(status__in=TaskRun.WAITING, next_attempt_at__lte=now).exclude(
            Q(is_compensation=True) | Q(is_manual=True)
        )
        latest = due.order_by("-occurrence").values_list("occurrence", flat=True).first()
        if latest is None:
            return 0
        if keep_latest_since is not None and latest >= keep_latest_since:
            due = due.filter(occurrence__lt=latest)
        return due.update(
            status=TaskRun.Status.SKIPPED,
            error_code=skip.code,
            error_message=skip.message,
            next_attempt_at=None,
            finished_at=now,
        )

    def pending(self) -> RunQuerySet:
        return self.filter(status__in=(*TaskRun.WAITING, TaskRun.Status.QUEUED))

    def cancel_pending(self) -> int:
        """Cancel these runs that have not started; returns how many ended so.

        A run in doubt (waiting to send again what an earlier attempt may have
        delivered: its own ledger row ``sending`` or ``unknown``) is not cancelled but
        ends ``unknown``, its row too, and ops are told (``run_unknown``) once the
        transaction commits. Cancelled, it would say nothing went out, and the run that
        replaces it, a duplicate of its key or its day, would be skipped pointing to a
        run no one can retry; ``unknown``, it is the open question ops settle by
        retrying it or marking it handled. A make-up cancelled no longer covers its
        occurrence, and the skipped run it was for says so (``MAKEUP_CANCELLED``)."""
        now = timezone.now()
        pending = self.pending()
        own_row_in_doubt = SendLog.objects.filter(
            run=models.OuterRef("pk"),
            key=models.OuterRef("ledger_key"),
            status__in=(SendLog.Status.SENDING, SendLog.Status.UNKNOWN),
        )
        # One read of the few that need more than a status: runs in doubt, make-ups.
        special = list(
            pending.annotate(in_doubt=models.Exists(own_row_in_doubt))
            .filter(Q(in_doubt=True) | Q(is_compensation=True))
            .values_list("pk", "in_doubt")
        )
        doubtful = [pk for pk, in_doubt in special if in_doubt]
        makeups = [pk for pk, in_doubt in special if not in_doubt]
        ended = 0
        if doubtful:
            ended = self._end_in_doubt(doubtful, now)
        ended += pending.exclude(pk__in=doubtful).update(
            status=TaskRun.Status.CANCELLED,
            next_attempt_at=None,
            lease_token="",
            lease_expires_at=None,
            finished_at=now,
        )
        if makeups:
            cancelled = TaskRun.objects.filter(
                pk__in=makeups, status=TaskRun.Status.CANCELLED, finished_at=now
            ).values_list("task_id", "ledger_key")
            _say_of_makeups(
                {
                    (task, key.removesuffix(MAKEUP_SUFFIX)): MAKEUP_CANCELLED
                    for task, key in cancelled
                }
            )
        return ended

    @staticmethod
    def _end_in_doubt(doubtful: list[int], now: datetime) -> int:
        """``cancel_pending``'s end of runs in doubt: ``unknown``, and ops told."""
        ended = (
            TaskRun.objects.filter(pk__in=doubtful)
            .pending()
            .update(
                status=TaskRun.Status.UNKNOWN,
                error_code=CANCELLED_IN_DOUBT.code,
                error_message=CANCELLED_IN_DOUBT.message,
                next_attempt_at=None,
                lease_owner="",
                lease_token="",
                lease_expires_at=None,
                finished_at=now,
            )
        )
        SendLog.objects.filter(run_id__in=doubtful, status=SendLog.Status.SENDING).update(
            status=SendLog.Status.UNKNOWN, updated_at=now
        )
        told = TaskRun.objects.filter(
            pk__in=doubtful, status=TaskRun.Status.UNKNOWN, finished_at=now
        ).select_related("task")
        for run in told:
            signals.after_commit(signals.run_unknown, TaskRun, run=run)
        return ended

    def failed(self) -> RunQuerySet:
        return self.filter(status=TaskRun.Status.FAILED)

    def mark_handled(self, by: str, now: datetime) -> int:
        """Record that ``by`` (a username) looked after these runs at ``now``: those that
        ended unsent and nobody handled yet; returns how many."""
        return self.filter(status__in=TaskRun.UNSENT_ENDS, handled_at__isnull=True).update(
            handled_at=now, handled_by=by[:150]
        )

    def overdue(self, now: datetime) -> RunQuerySet:
        """Waiting runs past their deadline that no worker may have sent: none whose own
        ledger row is ``sending`` or ``unknown`` (delivery decides those)."""
        in_doubt = SendLog.objects.filter(
            run=models.OuterRef("pk"),
            status__in=(SendLog.Status.SENDING, SendLog.Status.UNKNOWN),
        )
        return self.filter(status__in=TaskRun.WAITING, deadline__lt=now).exclude(
            models.Exists(in_doubt)
        )

    def expire_overdue(self, now: datetime, limit: int = 500) -> list[TaskRun]:
        """End ``overdue`` runs as ``expired`` (up to ``limit``) and tell ops through
        ``signals.run_expired`` once the transaction commits; returns them.

        The rows are locked (``SKIP LOCKED``) and the UPDATE re-checks their state, so a
        run is expired, and told, once however many schedulers tick; it reads only the
        run's own columns, never the ledger, so that it locks no more than it changes.
        """
        with transaction.atomic():
            candidates = self.overdue(now).order_by("deadline").values_list("pk", flat=True)
            if connection.features.has_select_for_update_skip_locked:
                candidates = candidates.select_for_update(skip_locked=True)
            ids = list(candidates[:limit])
            if not ids:
                return []
            TaskRun.objects.filter(pk__in=ids, status__in=TaskRun.WAITING, deadline__lt=now).update(
                status=TaskRun.Status.EXPIRED,
                error_code=EXPIRED_CODE,
                error_message="Its deadline passed before it could be sent.",
                next_attempt_at=None,
                finished_at=now,
            )
            expired = list(
                TaskRun.objects.filter(
                    pk__in=ids, status=TaskRun.Status.EXPIRED, finished_at=now
                ).select_related("task")
            )
            for run in expired:
                signals.after_commit(signals.run_expired, TaskRun, run=run)
        return expired

    def stuck(self, now: datetime, timeout: float) -> RunQuerySet:
        """Runs ``running`` for more than ``timeout`` seconds, not yet reported."""
        return self.filter(
            status=TaskRun.Status.RUNNING,
            started_at__lt=now - timedelta(seconds=timeout),
            stuck_reported_at__isnull=True,
        )

    def report_stuck(self, now: datetime, limit: int = 500) -> list[TaskRun]:
        """Record and tell (``signals.run_stuck``) the runs running for longer than
        ``REMINDERS_RUN_TIMEOUT``, each once: a compare-and-set on the attempt in hand,
        so several schedulers report it once. The run is otherwise left to its lease."""
        reported = []
        for run in self.stuck(now, conf.RUN_TIMEOUT).select_related("task")[:limit]:
            if run.mark_stuck(now):
                reported.append(run)
        return reported

    def release(self, owner: str) -> int:
        """Hand back runs this owner claimed but no worker started yet."""
        return self.filter(lease_owner=owner).give_back()

    def give_back(self) -> int:
        """Put these runs, where claimed and not started (``queued``), back in line as
        they were before the claim; returns how many. Narrow the selection to the
        holder's (its owner, or its claim's token) first."""
        return self.filter(status=TaskRun.Status.QUEUED).update(
            status=models.Case(
                models.When(attempts=0, then=models.Value(TaskRun.Status.SCHEDULED)),
                default=models.Value(TaskRun.Status.RETRYING),
            ),
            lease_owner="",
            lease_token="",
            lease_expires_at=None,
        )


class TaskRun(models.Model):
    class Status(models.TextChoices):
        SCHEDULED = "scheduled", _("Scheduled")
        QUEUED = "queued", _("Queued")
        RUNNING = "running", _("Running")
        RETRYING = "retrying", _("Waiting to retry")
        SENT = "sent", _("Sent")
        FAILED = "failed", _("Failed")
        SKIPPED = "skipped", _("Skipped")
        CANCELLED = "cancelled", _("Cancelled")
        UNKNOWN = "unknown", _("Outcome unknown")
        EXPIRED = "expired", _("Expired")

    WAITING = (Status.SCHEDULED, Status.RETRYING)
    LEASED = (Status.QUEUED, Status.RUNNING)
    FINISHED = (
        Status.SENT,
        Status.FAILED,
        Status.SKIPPED,
        Status.CANCELLED,
        Status.UNKNOWN,
        Status.EXPIRED,
    )
    UNFINISHED = (*WAITING, *LEASED)
    # Ended without a delivery: what ops look after (``mark_handled``) or retry.
    UNSENT_ENDS = (Status.FAILED, Status.UNKNOWN, Status.EXPIRED)
    RETRYABLE = (*WAITING, *UNSENT_ENDS)

    task = models.ForeignKey(
        ScheduledTask, on_delete=models.CASCADE, related_name="runs", verbose_name=_("task")
    )
    occurrence = models.DateTimeField(_("occurrence"), help_text=_("The nominal time."))
    run_date = models.DateField(_("run date"), help_text=_("Local date in the task's zone."))
    due_at = models.DateTimeField(_("due"), help_text=_("Occurrence plus stagger."))
    status = models.CharField(
        _("status"),
        max_length=_max_length(Status),
        choices=Status.choices,
        default=Status.SCHEDULED,
    )
    priority = models.PositiveSmallIntegerField(_("priority rank"), default=1)
    ledger_key = models.CharField(_("idempotency key"), max_length=100)
    attempts = models.PositiveSmallIntegerField(
        _("attempts"), default=0, help_text=_("Attempts to send, not counting worker deaths.")
    )
    crashes = models.PositiveSmallIntegerField(
        _("worker deaths"),
        default=0,
        help_text=_("Times a worker died while sending this run's message."),
    )
    job_failures = models.PositiveSmallIntegerField(
        _("lost jobs"),
        default=0,
        db_default=0,
        help_text=_(
            "Jobs in a row that held this run and ended before starting it (failed, "
            "timed out or lost with their worker)."
        ),
    )
    next_attempt_at = models.DateTimeField(_("next attempt"), null=True, blank=True)
    lease_owner = models.CharField(_("lease owner"), max_length=200, blank=True)
    lease_token = models.CharField(_("lease token"), max_length=32, blank=True)
    lease_expires_at = models.DateTimeField(_("lease expires"), null=True, blank=True)
    started_at = models.DateTimeField(_("started"), null=True, blank=True)
    finished_at = models.DateTimeField(_("finished"), null=True, blank=True)
    duration = models.DurationField(_("duration of last attempt"), null=True, blank=True)
    error_code = models.CharField(_("error code"), max_length=64, blank=True)
    error_message = models.TextField(_("error"), blank=True)
    is_compensation = models.BooleanField(_("make-up run"), default=False)
    is_manual = models.BooleanField(
        _("run now"), default=False, help_text=_("Made on request, not by the schedule.")
    )
    requested_by = models.CharField(
        _("requested by"), max_length=150, blank=True, help_text=_("Who asked to run it now.")
    )
    handled_at = models.DateTimeField(_("handled"), null=True, blank=True)
    handled_by = models.CharField(
        _("handled by"),
        max_length=150,
        blank=True,
        help_text=_("The username of who marked it handled (kept if the user is deleted)."),
    )
    deadline = models.DateTimeField(
        _("deadline"),
        null=True,
        blank=True,
        help_text=_("Not sent after this, but expired (the kind's send-by and lateness)."),
    )
    stuck_reported_at = models.DateTimeField(
        _("reported stuck"),
        null=True,
        blank=True,
        help_text=_("When ops were told it was running for too long."),
    )
    # What decided the occurrence's day on the working-day calendar ("": no calendar).
    day_source = models.CharField(
        _("day decided by"),
        max_length=16,
        choices=DaySource,
        blank=True,
        default="",
        db_default="",
        help_text=_("The calendar package, an ops entry, or the rule for an uncovered year."),
    )
    day_note = models.CharField(
        _("day's source"),
        max_length=200,
        blank=True,
        default="",
        db_default="",
        help_text=_("The package and version, the notice ops named, or the fallback rule."),
    )
    created_at = models.DateTimeField(_("created"), auto_now_add=True)

    objects = RunQuerySet.as_manager()

    class Meta:
        verbose_name = _("run")
        verbose_name_plural = _("runs")
        constraints = [
            models.UniqueConstraint(
                fields=["task", "occurrence"], name="reminders_run_once_per_occurrence"
            ),
            models.CheckConstraint(
                name="reminders_run_waiting_has_next_attempt",
                condition=~Q(status__in=["scheduled", "retrying"])
                | Q(next_attempt_at__isnull=False),
            ),
            models.CheckConstraint(
                name="reminders_run_leased_has_lease",
                condition=~Q(status__in=["queued", "running"])
                | (Q(lease_expires_at__isnull=False) & ~Q(lease_token="")),
            ),
        ]
        indexes = [
            # The claim query: waiting runs that are due. The due time leads: where the
            # condition is dropped (MariaDB, MySQL) the index still ranges over due runs
            # only (finished ones have none), not over the whole history of a priority.
            models.Index(
                fields=["next_attempt_at", "priority"],
                name="reminders_run_waiting_idx",
                condition=Q(status__in=["scheduled", "retrying"]),
            ),
            # Reclaiming runs whose holder died.
            models.Index(
                fields=["lease_expires_at"],
                name="reminders_run_leased_idx",
                condition=Q(status__in=["queued", "running"]),
            ),
            models.Index(fields=["run_date", "status"], name="reminders_run_day_idx"),
            # The dashboard's days, hours and 14-day charts: runs by due time.
            models.Index(fields=["due_at"], name="reminders_run_due_idx"),
            # A task's waiting runs, without its history: the task list's "next run"
            # (``TaskQuerySet.with_next_send``) for every task, each one probe however
            # long its history. The status follows the task for databases that drop
            # the condition.
            models.Index(
                fields=["task", "status", "next_attempt_at"],
                name="reminders_run_task_waiting_idx",
                condition=Q(status__in=["scheduled", "retrying"]),
            ),
            # Expiring waiting runs past their deadline. The status leads for databases
            # that drop the condition: finished runs keep their deadlines.
            models.Index(
                fields=["status", "deadline"],
                name="reminders_run_deadline_idx",
                condition=Q(status__in=["scheduled", "retrying"], deadline__isnull=False),
            ),
            # Running runs not yet reported stuck (the status leads, as above).
            models.Index(
                fields=["status", "started_at"],
                name="reminders_run_stuck_idx",
                condition=Q(status="running", stuck_reported_at__isnull=True),
            ),
        ]
        permissions = [
            ("retry_taskrun", "Can retry runs"),
            ("mark_handled_taskrun", "Can mark runs handled"),
        ]

    def __str__(self) -> str:
        return f"{self.task_id} @ {self.occurrence.isoformat()} [{self.status}]"

    CLOSING_FIELDS: ClassVar[tuple[str, ...]] = (
        "status",
        "error_code",
        "error_message",
        "finished_at",
        "duration",
        "next_attempt_at",
        "lease_owner",
        "lease_token",
        "lease_expires_at",
    )

    def close_attempt(
        self,
        status: str,
        *,
        code: str = "",
        message: str = "",
        retry_at: datetime | None = None,
        now: datetime | None = None,
    ) -> bool:
        """End the attempt in hand: finished in ``status``, or waiting until ``retry_at``;
        the lease is released either way.

        Written only while the run still holds the lease token it was started with:
        a worker whose lease ran out and was taken over changes nothing (returns False).
        The token is kept in memory until the transaction commits: one rolled back
        leaves the run held, and closing it again must still name its lease.
        """
        held = self.lease_token
        self._set_closed(status, code, message, retry_at, now or timezone.now())
        closing = self.closing_values
        closed = bool(sql.update(TaskRun, [self.pk], closing, lease_token=held))
        self._forget_lease_on_commit(held)
        return closed

    @classmethod
    def close_attempts(cls, runs: Sequence[TaskRun], status: str, now: datetime) -> int:
        """``close_attempt`` for many runs that end the same way: one UPDATE for each
        start time and token (runs started together share both, so usually one in all).
        Returns how many were still held and closed."""
        groups: dict[tuple[datetime | None, str], list[TaskRun]] = {}
        for run in runs:
            groups.setdefault((run.started_at, run.lease_token), []).append(run)
            run._set_closed(status, "", "", None, now)
        closed = 0
        for (_started, token), group in groups.items():
            closing = group[0].closing_values
            closed += sql.update(cls, [run.pk for run in group], closing, lease_token=token)
            for run in group:
                run._forget_lease_on_commit(token)
        return closed

    def _set_closed(
        self, status: str, code: str, message: str, retry_at: datetime | None, now: datetime
    ) -> None:
        self.status = status
        self.error_code = code[:64]
        self.error_message = message
        self.finished_at = None if retry_at else now
        self.duration = now - self.started_at if self.started_at else None
        self.next_attempt_at = retry_at
        self.lease_owner = ""
        self.lease_expires_at = None

    @property
    def closing_values(self) -> dict[str, Any]:
        """The columns a closing UPDATE writes: the closed state, the lease released."""
        return {
            name: "" if name == "lease_token" else getattr(self, name)
            for name in self.CLOSING_FIELDS
        }

    def _forget_lease_on_commit(self, held: str) -> None:
        """Drop the lease token from memory once the closing UPDATE commits (at once
        outside a transaction), unless the run was started again meanwhile."""

        def forget() -> None:
            if self.lease_token == held:
                self.lease_token = ""

        transaction.on_commit(forget)

    def mark_stuck(self, now: datetime) -> bool:
        """Record that this attempt was reported stuck, and tell ops once the transaction
        commits; False if it was reported already or the attempt ended meanwhile."""
        marked = TaskRun.objects.filter(
            pk=self.pk,
            lease_token=self.lease_token,
            status=TaskRun.Status.RUNNING,
            stuck_reported_at__isnull=True,
        ).update(stuck_reported_at=now)
        if marked:
            self.stuck_reported_at = now
            signals.after_commit(signals.run_stuck, TaskRun, run=self)
        return bool(marked)

    @property
    def lateness(self) -> timedelta | None:
        """How long after its due time the run finished."""
        if self.finished_at is None:
            return None
        return self.finished_at - self.due_at

    def retry_refusal(self, now: datetime) -> Refusal | None:
        """Why ``retry_now`` at ``now`` would leave this run as it is, or None: not
        waiting nor ended unsent, its task cancelled, its deadline passed, or a make-up
        run that covers it (waiting, sent or in doubt)."""
        if self.status not in self.RETRYABLE:
            return NOT_ENDED_UNSENT
        if self.task.status == ScheduledTask.Status.CANCELLED:
            return TASK_CANCELLED
        if self.deadline is not None and self.deadline <= now:
            return DEADLINE_PASSED
        if not self.is_compensation and self.covering_makeup() is not None:
            return MADE_UP
        return None

    def covering_makeup(self) -> TaskRun | None:
        """The make-up run of this run's key that may still send, or did."""
        return (
            TaskRun.objects.filter(
                task_id=self.task_id,
                is_compensation=True,
                ledger_key=f"{self.ledger_key}{MAKEUP_SUFFIX}",
            )
            .exclude(status__in=(*LOST_STATUSES, self.Status.SKIPPED, self.Status.CANCELLED))
            .first()
        )

    def retry_now(self, now: datetime | None = None) -> bool:
        """Put a waiting or ended-unsent run back in line for an immediate attempt, with
        a fresh set of retries and its deadline kept; False (nothing changed) for what
        ``retry_refusal`` refuses. A handled run is no longer handled.

        For an ``unknown`` run this is the operator's word that the message did not
        arrive: its ledger row becomes ``failed`` so that the message is sent again. The
        schedulers are woken once this commits.
        """
        now = now or timezone.now()
        if self.retry_refusal(now) is not None:
            return False
        with transaction.atomic():
            # The planner's lock on the task: a make-up it is planning for this run is
            # committed, and seen here, before the check, or it is planned after this
            # and finds the run waiting (not lost). Never both sent.
            task = ScheduledTask.objects.select_for_update().filter(pk=self.task_id).first()
            if task is None:
                return False
            self.task = task
            if self.retry_refusal(now) is not None:
                return False
            updated = (
                TaskRun.objects.filter(pk=self.pk, status=self.status)
                .filter(Q(deadline__isnull=True) | Q(deadline__gt=now))
                .exclude(task__status=ScheduledTask.Status.CANCELLED)
                .update(
                    status=self.Status.RETRYING,
                    attempts=0,
                    job_failures=0,
                    next_attempt_at=now,
                    finished_at=None,
                    handled_at=None,
                    handled_by="",
                )
            )
            if updated and self.status == self.Status.UNKNOWN:
                SendLog.objects.filter(key=self.ledger_key, status=SendLog.Status.UNKNOWN).update(
                    status=SendLog.Status.FAILED,
                    reply_code="operator_retry",
                    error_message="An operator confirmed it was not received.",
                )
        if updated:
            self.refresh_from_db()
            wake.notify()
        return bool(updated)

    def handle_refusal(self) -> Refusal | None:
        """Why ``mark_handled`` would leave this run as it is, or None."""
        if self.status not in self.UNSENT_ENDS:
            return NOT_ENDED_UNSENT
        if self.handled_at is not None:
            return ALREADY_HANDLED
        return None

    def mark_handled(self, by: str, now: datetime | None = None) -> bool:
        """Record that ``by`` looked after this run, if it ended unsent and nobody did
        yet (``RunQuerySet.mark_handled``)."""
        done = TaskRun.objects.filter(pk=self.pk).mark_handled(by, now or timezone.now())
        if done:
            self.refresh_from_db(fields=["handled_at", "handled_by"])
        return bool(done)


class FailedToday(TaskRun):
    """No table, no permissions of its own: the admin's "Failed today" entry in the app
    list, which opens the runs due today that failed and nobody has handled yet."""

    class Meta:
        proxy = True
        default_permissions = ()
        verbose_name = _("run failed today")
        verbose_name_plural = _("failed today")


class SendLog(models.Model):
    """The idempotency ledger: one row per key, written before and after each send."""

    class Status(models.TextChoices):
        SENDING = "sending", _("Sending")
        SENT = "sent", _("Sent")
        FAILED = "failed", _("Failed")
        UNKNOWN = "unknown", _("Unknown")

    key = models.CharField(_("idempotency key"), max_length=100, unique=True)
    # The ledger outlives a deleted task: it is the record of what was sent.
    task = models.ForeignKey(
        ScheduledTask,
        on_delete=models.SET_NULL,
        null=True,
        related_name="send_logs",
        verbose_name=_("task"),
    )
    run = models.ForeignKey(
        TaskRun,
        on_delete=models.SET_NULL,
        null=True,
        related_name="send_logs",
        verbose_name=_("run"),
    )
    status = models.CharField(
        _("status"), max_length=_max_length(Status), choices=Status.choices, default=Status.SENDING
    )
    recipient = models.CharField(_("recipient"), max_length=64)
    channel = models.CharField(_("channel"), max_length=64)
    body = models.TextField(_("body"), help_text=_("The exact rendered message."))
    provider_message_id = models.CharField(_("provider message id"), max_length=128, blank=True)
    reply_code = models.CharField(_("reply code"), max_length=64, blank=True)
    reply_detail = models.JSONField(
        _("reply detail"),
        default=dict,
        blank=True,
        help_text=_("What else the provider said, such as recipients it did not reach."),
    )
    error_message = models.TextField(_("error"), blank=True)
    attempts = models.PositiveSmallIntegerField(_("send attempts"), default=0)
    created_at = models.DateTimeField(_("reserved"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)
    sent_at = models.DateTimeField(_("sent"), null=True, blank=True)

    class Meta:
        verbose_name = _("send log entry")
        verbose_name_plural = _("send log")
        indexes = [
            models.Index(fields=["status", "created_at"], name="reminders_sendlog_status_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.key} [{self.status}]"


class JobTakeQuerySet(models.QuerySet["JobTake"]):
    def take(self, job: str, token: str, run_ids: Sequence[int]) -> None:
        """Job ``job`` (its execution's token) took the runs ``run_ids`` claimed under
        ``token``: recorded in a commit of its own, before it prepares any of them."""
        with transaction.atomic(using=self.db):
            self.create(job=job, token=token, run_ids=list(run_ids))

    def lost_runs(self, tokens: Iterable[str]) -> set[int]:
        """The runs that jobs of the claims ``tokens`` took and never started; those
        jobs' rows deleted (the caller's claim counts each run once)."""
        takes = self.filter(token__in=list(tokens))
        lost = {pk for run_ids in takes.values_list("run_ids", flat=True) for pk in run_ids}
        if lost:
            takes.delete()
        return lost


class JobTake(models.Model):
    """A django-q2 job that took its claim's runs and has not started them yet.

    Written in a commit of its own before the job prepares any run, deleted in the
    transaction that starts them: one still here when the runs' lease ran out says the
    job ended before starting them (a builder that hangs until django-q2 kills the
    worker takes the start's transaction with it). The claim that takes the runs over
    counts it in each one's ``job_failures`` and deletes it. Runs that only waited in
    the queue past their lease have none, and are not counted. One row per job, not a
    write per run: a message costs the rows it did before.
    """

    job = models.CharField(_("job"), max_length=32, primary_key=True)
    token = models.CharField(_("claim token"), max_length=32, db_index=True)
    run_ids = models.JSONField(_("runs"))
    taken_at = models.DateTimeField(_("taken"), auto_now_add=True)

    objects = JobTakeQuerySet.as_manager()

    class Meta:
        verbose_name = _("job taking runs")
        verbose_name_plural = _("jobs taking runs")

    def __str__(self) -> str:
        return f"{self.job} ({len(self.run_ids)} runs of claim {self.token})"


class PrunedOneShot(models.Model):
    """A keyed one-shot task that retention deleted once it had completed: its key and
    time, all that is kept of it. Scheduling that key for that time again completes the
    new task at once instead of sending it a second time (``ScheduledTask.replan_all``);
    another time under the key is a message of its own."""

    key = models.CharField(_("key"), max_length=200)
    run_at = models.DateTimeField(_("one-shot time"))
    pruned_at = models.DateTimeField(_("pruned"), auto_now_add=True)

    class Meta:
        verbose_name = _("pruned one-shot task")
        verbose_name_plural = _("pruned one-shot tasks")
        constraints = [
            models.UniqueConstraint(fields=["key", "run_at"], name="reminders_pruned_one_shot_once")
        ]

    def __str__(self) -> str:
        return f"{self.key} @ {self.run_at.isoformat()}"


class ProviderToken(models.Model):
    """A provider's access token, shared by every process and host that sends.

    Never shown in the admin or logs; ``name`` identifies the credentials (not the secret).
    """

    name = models.CharField(_("name"), max_length=200, unique=True)
    value = models.TextField(_("token"), blank=True)
    expires_at = models.DateTimeField(_("expires"), null=True, blank=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    class Meta:
        verbose_name = _("provider token")
        verbose_name_plural = _("provider tokens")

    def __str__(self) -> str:
        return self.name


class RateBucket(models.Model):
    """Shared pacing state of one rate limit (a channel, or a recipient on a channel).

    ``tat`` is the generic cell rate algorithm's theoretical arrival time, in seconds
    since the epoch; ``paused_until`` holds the whole limit back after the provider said
    "too fast".
    """

    name = models.CharField(_("name"), max_length=200, unique=True)
    tat = models.FloatField(_("theoretical arrival time"), default=0.0)
    paused_until = models.DateTimeField(_("paused until"), null=True, blank=True)
    pause_reason = models.CharField(_("pause reason"), max_length=200, blank=True)

    class Meta:
        verbose_name = _("rate limit")
        verbose_name_plural = _("rate limits")

    def __str__(self) -> str:
        return self.name


class HeartbeatQuerySet(models.QuerySet["SchedulerHeartbeat"]):
    def stale(self, now: datetime, seconds: float) -> HeartbeatQuerySet:
        """Schedulers that have not ticked for more than ``seconds``."""
        return self.filter(last_tick_at__lt=now - timedelta(seconds=seconds))

    def beat(self, owner: str, *, host: str, pid: int, started_at: datetime, now: datetime) -> None:
        """Record a tick of scheduler ``owner``: one UPDATE, or its row the first time."""
        if self.filter(owner=owner).update(last_tick_at=now):
            return
        self.update_or_create(
            owner=owner,
            defaults={"host": host, "pid": pid, "started_at": started_at, "last_tick_at": now},
        )

    def stop(self, owner: str) -> None:
        """Scheduler ``owner`` stopped gracefully."""
        self.filter(owner=owner).delete()


class SchedulerHeartbeat(models.Model):
    """One running ``run_reminders`` process and when its scheduler last ticked."""

    owner = models.CharField(_("owner"), max_length=200, unique=True)
    host = models.CharField(_("host"), max_length=255)
    pid = models.PositiveIntegerField(_("process id"))
    started_at = models.DateTimeField(_("started"))
    last_tick_at = models.DateTimeField(_("last tick"))

    objects = HeartbeatQuerySet.as_manager()

    class Meta:
        verbose_name = _("scheduler heartbeat")
        verbose_name_plural = _("scheduler heartbeats")

    def __str__(self) -> str:
        return f"{self.owner} (last tick {self.last_tick_at.isoformat()})"
