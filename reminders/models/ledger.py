"""``SendLog``, the idempotency ledger (one row per key), and ``JobTake``, a job's record
that it took its runs (see ``engine.delivery``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from django.db import models, transaction
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from .choices import longest


class SendLog(models.Model):
    """The idempotency ledger: one row per key, written before and after each send.

    A text sent in parts (``senders.parts``) that failed on a later part is
    ``partly_sent``: ``parts_sent`` names the parts delivered (their message ids, in
    order), and the row is never ``failed``, which would say nothing went. Its next
    attempt sends the parts missing, of the same body; ``parts_sent`` is kept through
    it, and an attempt that may have delivered one more part is ``unknown`` as any.
    A ``partly_sent`` row recalled (its parts delivered taken back) is never sent on:
    its run ends ``cancelled`` instead (``engine.recall``)."""

    class Status(models.TextChoices):
        SENDING = "sending", _("Sending")
        SENT = "sent", _("Sent")
        FAILED = "failed", _("Failed")
        UNKNOWN = "unknown", _("Unknown")
        PARTLY_SENT = "partly_sent", _("Partly sent")

    key = models.CharField(_("idempotency key"), max_length=100, unique=True)
    # The ledger outlives a deleted task: it is the record of what was sent.
    task = models.ForeignKey(
        "ScheduledTask",
        on_delete=models.SET_NULL,
        null=True,
        related_name="send_logs",
        verbose_name=_("task"),
    )
    run = models.ForeignKey(
        "TaskRun",
        on_delete=models.SET_NULL,
        null=True,
        related_name="send_logs",
        verbose_name=_("run"),
    )
    status = models.CharField(
        _("status"), max_length=longest(Status), choices=Status.choices, default=Status.SENDING
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
    # None until a part of a split text went and the rest did not (``partly_sent``).
    parts_sent = models.JSONField(
        _("parts sent"),
        null=True,
        blank=True,
        help_text=_("The message ids of the parts of a split text delivered so far, in order."),
    )
    attempts = models.PositiveSmallIntegerField(_("send attempts"), default=0)
    created_at = models.DateTimeField(_("reserved"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)
    sent_at = models.DateTimeField(_("sent"), null=True, blank=True)
    # Taken back from the recipient (``engine.recall``): when, by whom and why. The
    # message ids recalled so far (every part of a split message, one by one; None
    # before any), and what the provider said to the last attempt that failed.
    recalled_at = models.DateTimeField(_("recalled"), null=True, blank=True)
    # db_default: the release before these columns inserts rows without them.
    recalled_by = models.CharField(
        _("recalled by"), max_length=150, blank=True, default="", db_default=""
    )
    recall_reason = models.TextField(_("why recalled"), blank=True, default="", db_default="")
    # None until a recall began.
    recalled_ids = models.JSONField(_("message ids recalled"), null=True, blank=True)
    recall_error = models.TextField(_("recall error"), blank=True, default="", db_default="")
    # What the recall cancelled that the message would still have caused (a reminder
    # its card's snooze made, its card's update), in words; "" for nothing.
    recall_cancelled = models.TextField(
        _("cancelled with the recall"), blank=True, default="", db_default=""
    )

    class Meta:
        verbose_name = _("send log entry")
        verbose_name_plural = _("send log")
        permissions = [("recall_sendlog", _("Can recall a sent message"))]
        indexes = [
            models.Index(fields=["status", "created_at"], name="reminders_sendlog_status_idx"),
            # The messages sent in a day (ops' count against WeCom's, the daily quota),
            # whenever their rows were reserved.
            models.Index(fields=["status", "sent_at"], name="reminders_sendlog_sent_idx"),
            # The dashboard's count of recalls.
            models.Index(
                fields=["recalled_at"],
                name="reminders_sendlog_recall_idx",
                condition=Q(recalled_at__isnull=False),
            ),
        ]
        constraints = [
            # A message partly sent names the parts that went.
            models.CheckConstraint(
                condition=~Q(status="partly_sent") | Q(parts_sent__isnull=False),
                name="reminders_sendlog_partly_sent_parts",
            ),
            # Only a message delivered, whole or in part, is recalled, and always by
            # someone, for a reason.
            models.CheckConstraint(
                condition=Q(recalled_at__isnull=True)
                | (
                    Q(status__in=["sent", "partly_sent"])
                    & ~Q(recalled_by="")
                    & ~Q(recall_reason="")
                ),
                name="reminders_sendlog_recall_sent",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.key} [{self.status}]"

    @property
    def recalled(self) -> bool:
        return self.recalled_at is not None


class JobTakeQuerySet(models.QuerySet["JobTake"]):
    def take(self, job: str, token: str, run_ids: Sequence[int]) -> None:
        """Job ``job`` (its execution's token) took the runs ``run_ids`` claimed under
        ``token``: recorded in a commit of its own, before it prepares any of them."""
        with transaction.atomic(using=self.db):
            self.create(job=job, token=token, run_ids=list(run_ids))

    def lost_runs(
        self, tokens: Iterable[str], run_ids: Iterable[int], queued: models.QuerySet
    ) -> set[int]:
        """The runs among ``run_ids`` that jobs of the claims ``tokens`` took and never
        started, which the caller takes over and counts, once each (``job_failures``).
        Each such take keeps the runs it lists that the caller leaves, still waiting
        under its claim in ``queued`` (the runs still ``queued``): another claim's
        share, counted as that one takes them over. It is deleted once it lists none.
        The takes are locked while read and rewritten (in the caller's transaction), so
        that two claims sharing a dead job's runs count each of them once."""
        taking = set(run_ids)
        takes = list(self.select_for_update().filter(token__in=list(tokens)).order_by("job"))
        listed = {pk for take in takes for pk in take.run_ids}
        left = set(
            queued.filter(pk__in=listed - taking).values_list("pk", "lease_token")
            if listed - taking
            else ()
        )
        for take in takes:
            take.run_ids = [pk for pk in take.run_ids if (pk, take.token) in left]
            if take.run_ids:
                take.save(update_fields=["run_ids"])
            else:
                take.delete()
        return listed & taking

    def ended(self, tokens: Iterable[str], queued: models.QuerySet) -> int:
        """Delete the takes of the claims ``tokens`` under which no run of ``queued``
        (the runs still ``queued``) waits any more: their runs ended without them (a
        cancel), and the job that took them with them. Returns how many."""
        holding = queued.filter(lease_token__in=list(tokens)).values("lease_token")
        return self.filter(token__in=list(tokens)).exclude(token__in=holding).delete()[0]


class JobTake(models.Model):
    """A django-q2 job that took its claim's runs and has not started them yet.

    Written in a commit of its own before the job prepares any run, deleted in the
    transaction that starts them: one still here when the runs' lease ran out says the
    job ended before starting them (a builder that hangs until django-q2 kills the
    worker takes the start's transaction with it). The claim that takes the runs over,
    or the scheduler that hands them back (``RunQuerySet.give_back``), or the job that
    takes them in (``engine.digests.pull``), counts it in each one's ``job_failures``,
    whatever share of them it takes: the row keeps the runs not counted yet, and is
    deleted once it names none; a cancel of its runs deletes it with them. No row
    outlives its job. Runs that only waited in the queue past their lease have none,
    and are not counted. One row per job, not a write per run: a message costs the rows
    it did before.
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
