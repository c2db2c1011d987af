"""``TaskRun``: one occurrence of a task, from planned to ended; its QuerySet verbs (due,
claimable, cancel pending, expire, stuck, give back) and small state changes (closing an
attempt, marking it stuck).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, ClassVar

from django.db import connection, models, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .. import signals
from ..calendars.days import DaySource
from ..conf import settings as conf
from ..schedule import timing
from . import sql
from .choices import (
    CANCELLED_IN_DOUBT,
    EXPIRED_CODE,
    MADE_UP_WITH,
    MAKEUP_CANCELLED,
    MAKEUP_SUFFIX,
    MISSED_CODES,
    SkipReason,
    _saying,
    longest,
)
from .ledger import SendLog
from .tasks import ScheduledTask

logger = logging.getLogger(__name__)


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


class FailedToday(TaskRun):
    """No table, no permissions of its own: the admin's "Failed today" entry in the app
    list, which opens the runs due today that failed and nobody has handled yet."""

    class Meta:
        proxy = True
        default_permissions = ()
        verbose_name = _("run failed today")
        verbose_name_plural = _("failed today")
