"""``ScheduledTask``: what to send, to whom, on which schedule; its fields, constraints,
QuerySet verbs and small state changes. Planning its runs is ``engine.planning``'s, acting
on it ``engine.actions``'.

A task's status never contradicts its runs: ``completed`` means its schedule has no
occurrence left (``next_run`` is NULL) *and* every run it planned has ended. A one-shot
whose run waits (planned ahead, retrying, in a worker's hands, folded in a digest) is
``active`` until that run ends, so it can still be paused or cancelled, and the admin's
filters count it among the live ones. Planning leaves an exhausted schedule ``active``;
``TaskQuerySet.complete_ended`` completes it once its runs have ended: a delivery job does
in the UPDATE that stamps its tasks' last run (``TaskQuerySet.ran``), as do a digest's
items as they end with it, expiry and planning a run skipped at once; each scheduler
sweeps for the rest (runs ended before starting, bulk updates, a job that died before
its end) at most every ``worker.COMPLETE_SECONDS``. What makes a completed task's run
wait again (run now, a retry, a snooze) makes the task active again
(``TaskQuerySet.reopen``) in its transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any, ClassVar

from django.apps import apps
from django.contrib.contenttypes.fields import GenericForeignKey
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ValidationError
from django.db import connections, models
from django.db.models import Q
from django.db.models.functions import Coalesce
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .. import recipients, registry, signals
from ..conf import settings as conf
from ..exceptions import UnknownKind
from ..schedule import cron_text, readable, timing
from . import sql
from .choices import Priority, longest
from .validators import (
    validate_calendar,
    validate_channel,
    validate_cron,
    validate_key,
    validate_kind,
    validate_payload,
    validate_recipient,
    validate_timezone,
)

logger = logging.getLogger(__name__)


# The longest primary key, as text, of an object a task may be about: an integer, a
# UUID (36 characters) and most text keys fit.
OBJECT_ID_MAX_LENGTH = 64


def _ended(among: Collection[int] | None = None) -> Q:
    """An active task whose schedule has no occurrence left and none of whose runs is
    unfinished: one to complete. ``among``: the tasks asked about, whose runs alone the
    subquery reads, however the planner runs it (once per task, or hashed once for all:
    over every unfinished run of every task, on statistics that undercount them)."""
    # TaskRun by name: it refers to this module's ScheduledTask, not the reverse.
    runs: Any = apps.get_model("reminders", "TaskRun")
    unfinished = runs.objects.filter(task=models.OuterRef("pk"), status__in=runs.UNFINISHED)
    if among is not None:
        unfinished = unfinished.filter(task_id__in=among)
    return Q(status=ScheduledTask.Status.ACTIVE, next_run__isnull=True) & Q(
        ~models.Exists(unfinished)
    )


@lru_cache(maxsize=64)
def _ran_sql(alias: str, n: int) -> str:
    """``TaskQuerySet.ran``'s UPDATE of ``n`` tasks: ``_ended`` by hand. Its parameters:
    the condition's (active, the unfinished statuses), the time, the
    condition's again, completed, the time, the ``n`` tasks. ``updated_at`` is assigned
    before ``status``: MySQL and MariaDB evaluate a SET's assignments left to right, each
    seeing the ones before it."""
    runs: Any = apps.get_model("reminders", "TaskRun")
    quote = connections[alias].ops.quote_name
    task, run = quote(ScheduledTask._meta.db_table), quote(runs._meta.db_table)
    own, theirs = sql.quoted_columns(ScheduledTask, alias), sql.quoted_columns(runs, alias)
    among = ", ".join(["%s"] * n)
    statuses = ", ".join(["%s"] * len(runs.UNFINISHED))
    # Per task, through the task's own runs, and only for a task left with no occurrence
    # (the conditions before it): a scalar subquery, which PostgreSQL never turns into
    # one hashed scan of every unfinished run (as it may an EXISTS), and a status tested
    # through a CASE that no index matches. Else it reaches the unfinished runs through
    # their status (an index led by the day) on statistics that undercount them: a wave
    # planned since the last ANALYZE, 5 ms of its CPU a job of 20, against 1.
    unfinished = (
        f"SELECT 1 FROM {run} WHERE {run}.{theirs('task')} = {task}.{own('pk')}"  # noqa: S608
        f" AND CASE WHEN {run}.{theirs('status')} IN ({statuses}) THEN 1 ELSE 0 END = 1"
    )
    ended = (
        f"{task}.{own('status')} = %s AND {task}.{own('next_run')} IS NULL"
        f" AND ({unfinished} LIMIT 1) IS NULL"
    )
    return (
        f"UPDATE {task} SET"  # noqa: S608
        f" {own('updated_at')} = CASE WHEN {ended} THEN %s ELSE {own('updated_at')} END,"
        f" {own('status')} = CASE WHEN {ended} THEN %s ELSE {own('status')} END,"
        f" {own('last_run_at')} = %s WHERE {task}.{own('pk')} IN ({among})"
    )


class TaskQuerySet(models.QuerySet["ScheduledTask"]):
    def due(self, now: datetime) -> TaskQuerySet:
        return self.filter(status=ScheduledTask.Status.ACTIVE, next_run__lte=now)

    def complete_ended(
        self, now: datetime | None = None, *, among: Collection[int] | None = None
    ) -> int:
        """Complete the active tasks (of ``among``, if given) whose schedule has no
        occurrence left and whose runs have all ended (none unfinished); returns how
        many. One UPDATE: safe to call from any number of processes at once, and again."""
        tasks = self if among is None else self.filter(pk__in=among)
        ended = tasks.filter(_ended(among))
        return ended.update(status=ScheduledTask.Status.COMPLETED, updated_at=now or timezone.now())

    def ran(self, among: Collection[int], now: datetime) -> int:
        """Stamp the ``last_run_at`` of tasks ``among`` (a job tried their runs) and, in
        the same UPDATE, complete those whose runs have all ended (``complete_ended``):
        the job's own statement, in its own transaction, so ending its runs' tasks costs
        it none. Returns how many tasks matched.

        Every job ends with it, so it is written once per number of tasks
        (``_ran_sql``) rather than built through the ORM, which cost the worker 6 ms of
        CPU a job (the database spends 2), and sent as the message's statements are
        (``sql.cursor_of``: prepared where the connection prepares). Of the tasks
        ``among`` alone, whatever this queryset's filters."""
        pks = sorted(among)
        if not pks:
            return 0
        connection = connections[self.db]
        at = ScheduledTask._meta.get_field("updated_at").get_db_prep_save(now, connection)
        runs: Any = apps.get_model("reminders", "TaskRun")
        ended = [ScheduledTask.Status.ACTIVE, *runs.UNFINISHED]
        completed = ScheduledTask.Status.COMPLETED
        params = [*ended, at, *ended, completed, at, *pks]
        with sql.cursor_of(connection) as cursor:
            cursor.execute(_ran_sql(self.db, len(pks)), params)
            return int(cursor.rowcount)

    def reopen(self, now: datetime | None = None) -> int:
        """Make the completed tasks active again: one has a run waiting again (run now,
        a retry, a snooze), and is completed again once it ends. Returns how many."""
        completed = self.filter(status=ScheduledTask.Status.COMPLETED)
        active = ScheduledTask.Status.ACTIVE
        return completed.update(status=active, updated_at=now or timezone.now())

    def with_next_send(self) -> TaskQuerySet:
        """Annotated ``next_send_at``: when the task's next message goes, its earliest
        waiting run's next attempt (a run planned ahead, a retry, the last run of a
        one-shot whose schedule has no occurrence left), else its ``next_run``.
        ``next_run`` alone is where planning resumes: the first occurrence *beyond* the
        planned runs (an hour on for an every-minute task), which is not what ops ask a
        "next run" for. A paused task keeps ``next_run``: its waiting runs are not
        claimed (``claimable``) and are skipped when it resumes."""
        # TaskRun by name: it refers to this module's ScheduledTask, not the reverse.
        runs: Any = apps.get_model("reminders", "TaskRun")
        waiting = (
            runs.objects.filter(task=models.OuterRef("pk"), status__in=runs.WAITING)
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
        _("priority"), max_length=longest(Priority), choices=Priority.choices
    )
    status = models.CharField(
        _("status"), max_length=longest(Status), choices=Status.choices, default=Status.ACTIVE
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
        # No index of its own: ``reminders_task_about_idx`` leads with it.
        db_index=False,
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
            # A recipient's tasks of one kind: the runs a digest folds and a throttle
            # counts (``engine.digests``).
            models.Index(fields=["recipient", "kind"], name="reminders_task_recipient_idx"),
        ]
        permissions = [
            ("pause_scheduledtask", "Can pause and resume scheduled tasks"),
            ("run_now_scheduledtask", "Can run scheduled tasks now"),
        ]

    def __str__(self) -> str:
        """Its title, human: "Follow-up reminder → demo-lisi · 12-05 21:19 (Asia/Shanghai)"."""
        return f"{registry.label(self.kind)} → {self.recipient} · {self.schedule_display}"

    @property
    def schedule_display(self) -> str:
        """The schedule as people read it: a cron in words, a one-shot's time on the
        clock of the task's zone, the zone named ("12-05 21:19 (Asia/Shanghai)",
        ``reminders.schedule.readable.moment``) as every time the admin shows; never
        ISO UTC."""
        if self.cron:
            return cron_text.describe(self.cron)
        return readable.moment(self.run_at, self.timezone)

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
            key_per = registry.policy(self.kind).key_per
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

    # State changes -------------------------------------------------------------------

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
