"""``TaskRun``: one occurrence of a task, from planned to ended: its fields and
constraints, and small state changes (closing an attempt, marking it stuck). Its
QuerySet verbs are ``run_queries``'.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, ClassVar

from django.db import models, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .. import registry, signals
from ..calendars.days import DaySource
from ..schedule import readable
from . import sql
from .choices import (
    FINISHED,
    LEASED,
    RETRYABLE,
    UNFINISHED,
    UNSENT_ENDS,
    WAITING,
    RunStatus,
    longest,
)
from .run_queries import RunQuerySet
from .tasks import ScheduledTask

logger = logging.getLogger(__name__)


class TaskRun(models.Model):
    Status = RunStatus
    WAITING: ClassVar[tuple[str, ...]] = WAITING
    LEASED: ClassVar[tuple[str, ...]] = LEASED
    FINISHED: ClassVar[tuple[str, ...]] = FINISHED
    UNFINISHED: ClassVar[tuple[str, ...]] = UNFINISHED
    UNSENT_ENDS: ClassVar[tuple[str, ...]] = UNSENT_ENDS
    RETRYABLE: ClassVar[tuple[str, ...]] = RETRYABLE

    # No index of its own: the unique (task, occurrence) leads with it, and every write of
    # a run would keep one more.
    task = models.ForeignKey(
        ScheduledTask,
        on_delete=models.CASCADE,
        related_name="runs",
        verbose_name=_("task"),
        db_index=False,
    )
    occurrence = models.DateTimeField(_("occurrence"), help_text=_("The nominal time."))
    run_date = models.DateField(_("run date"), help_text=_("Local date in the task's zone."))
    due_at = models.DateTimeField(_("due"), help_text=_("Occurrence plus stagger."))
    status = models.CharField(
        _("status"),
        max_length=longest(Status),
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
    # The digest run this run was folded into (``engine.digests``): it was sent, or not,
    # as one line of that message, and ends as its digest does.
    digest = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="items",
        verbose_name=_("digest"),
        help_text=_("The digest this run was folded into, and sent with."),
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
            # A run folded into a digest names it: its digest's run decides how it ends.
            models.CheckConstraint(
                name="reminders_run_folded_has_digest",
                condition=~Q(status="folded") | Q(digest__isnull=False),
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
            # Runs folded into a digest that has not ended them yet (``digests.settle``).
            models.Index(
                fields=["status", "digest"],
                name="reminders_run_folded_idx",
                condition=Q(status="folded"),
            ),
        ]
        permissions = [
            ("retry_taskrun", "Can retry runs"),
            ("mark_handled_taskrun", "Can mark runs handled"),
        ]

    def __str__(self) -> str:
        """Its title, human: its task's kind and recipient and its occurrence on the clock
        of the task's zone ("Follow-up reminder → demo-lisi · 12-05 21:19")."""
        task = self.task
        when = readable.short(self.occurrence, task.timezone)
        return f"{registry.label(task.kind)} → {task.recipient} · {when}"

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
        updates = cls.closing(runs, status, now)
        closed = sum(update.run() for update in updates)
        cls.closed(runs, updates)
        return closed

    @classmethod
    def closing(cls, runs: Sequence[TaskRun], status: str, now: datetime) -> list[sql.Update]:
        """The UPDATEs ``close_attempts`` sends (the runs set closed in memory); once they
        are sent, ``closed`` forgets the runs' lease tokens when they commit."""
        groups: dict[tuple[datetime | None, str], list[TaskRun]] = {}
        for run in runs:
            groups.setdefault((run.started_at, run.lease_token), []).append(run)
            run._set_closed(status, "", "", None, now)
        return [
            sql.Update(
                cls, [run.pk for run in group], group[0].closing_values, {"lease_token": token}
            )
            for (_started, token), group in groups.items()
        ]

    @staticmethod
    def closed(runs: Sequence[TaskRun], updates: Sequence[sql.Update]) -> None:
        """``closing``'s UPDATEs were sent: each run keeps its lease token in memory until
        they commit."""
        tokens = {pk: update.equal["lease_token"] for update in updates for pk in update.pks}
        for run in runs:
            run._forget_lease_on_commit(tokens[run.pk])

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


class FailedToday(TaskRun):
    """No table, no permissions of its own: the admin's "Failed today" entry in the app
    list, which opens the runs due today that failed and nobody has handled yet."""

    class Meta:
        proxy = True
        default_permissions = ()
        verbose_name = _("run failed today")
        verbose_name_plural = _("failed today")
