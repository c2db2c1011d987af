"""What ops were told and why: events, the alerts that grouped them, and each alert's
delivery to each alert channel.

Invariants:

* Recording an event is one INSERT (``AlertEvent.objects.record``), nothing else: it
  runs in the engine's processes, after the engine's own commit, and must cost the
  engine nothing it can feel. Everything else happens in the alert step (``ops.alerts``).
* Every event is covered by at most one alert (``AlertEvent.alert``); the events of a
  group not covered yet are its pending ones.
* One alert per group and sequence number (a unique constraint): two alert steps that
  race to open the same group's next alert make one, the loser skips the group.
* A delivery is claimed by a compare-and-set with a lease, so one step sends it at a
  time; a step that dies mid-send leaves it to be tried again once the lease runs out
  (alerts are delivered at least once, never silently dropped).
* Checks evaluated by the step (a stale heartbeat, a low success rate) record an event
  once per occurrence of the condition: their ``dedup_key`` is unique.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

from django.db import IntegrityError, models, transaction
from django.db.models import Count, Max, Min, Q
from django.utils.translation import gettext_lazy as _

from reminders.models.choices import longest

if TYPE_CHECKING:
    Render = Callable[["Alert", models.QuerySet["AlertEvent"]], tuple[str, str]]


class Target(NamedTuple):
    """An alert channel's alias, and who it tells (recorded with each delivery)."""

    alias: str
    who: str


class AlertType(models.TextChoices):
    RUN_FAILED = "run_failed", _("Runs failed")
    CONFIGURATION = "configuration", _("Channel configuration error")
    RUN_UNKNOWN = "run_unknown", _("Delivery unknown")
    RUN_EXPIRED = "run_expired", _("Runs expired")
    RUN_STUCK = "run_stuck", _("Runs stuck")
    TASK_ERROR = "task_error", _("Task errors")
    CALENDAR_UNCOVERED = "calendar_uncovered", _("Calendar year not covered")
    CALENDAR_ENDING = "calendar_ending", _("Calendar coverage ending")
    HEARTBEAT_STALE = "heartbeat_stale", _("Scheduler stopped ticking")
    SUCCESS_RATE = "success_rate", _("Low send success rate")
    STATISTICS_MISMATCH = "statistics_mismatch", _("WeCom's count differs from the ledger")
    STATISTICS_UNAVAILABLE = "statistics_unavailable", _("WeCom's count unavailable")
    DAILY_QUOTA = "daily_quota", _("Daily quota would be exceeded")
    DAILY_SUMMARY = "daily_summary", _("Morning summary")


# What the events of each type are grouped by, besides their type.
GROUPED_BY: dict[str, tuple[str, ...]] = {
    AlertType.RUN_FAILED: ("kind", "channel"),
    AlertType.CONFIGURATION: ("channel",),
    AlertType.RUN_UNKNOWN: ("kind", "channel"),
    AlertType.RUN_EXPIRED: ("kind", "channel"),
    AlertType.RUN_STUCK: ("kind", "channel"),
    AlertType.TASK_ERROR: ("kind",),
    AlertType.CALENDAR_UNCOVERED: ("scope",),
    # Every calendar running out in one alert, a day.
    AlertType.CALENDAR_ENDING: (),
    AlertType.HEARTBEAT_STALE: (),
    AlertType.SUCCESS_RATE: ("channel",),
    # Per WeCom app (its corp and agent id).
    AlertType.STATISTICS_MISMATCH: ("scope",),
    AlertType.STATISTICS_UNAVAILABLE: ("scope",),
    # The app's quota for tomorrow, one alert a day.
    AlertType.DAILY_QUOTA: (),
    # Yesterday's figures, one a day (``ops.morning``).
    AlertType.DAILY_SUMMARY: (),
}


def group_key(alert_type: str, kind: str = "", channel: str = "", scope: str = "") -> str:
    """Events of one key are alerted together: their type, and the kind, channel or
    scope (a calendar and year) the type is grouped by (``GROUPED_BY``)."""
    values = {"kind": kind, "channel": channel, "scope": scope}
    parts = [values[name] for name in GROUPED_BY.get(alert_type, ("kind", "channel", "scope"))]
    return ":".join((alert_type, *parts))[:255]


class EventQuerySet(models.QuerySet["AlertEvent"]):
    def record(
        self,
        alert_type: str,
        *,
        occurred_at: datetime,
        kind: str = "",
        channel: str = "",
        scope: str = "",
        code: str = "",
        message: str = "",
        data: dict[str, Any] | None = None,
        run_id: int | None = None,
        task_id: int | None = None,
        dedup_key: str | None = None,
    ) -> AlertEvent:
        """Record one event: a single INSERT."""
        return self.create(
            type=alert_type,
            group_key=group_key(alert_type, kind, channel, scope),
            kind=kind[:64],
            channel=channel[:64],
            scope=scope[:100],
            code=code[:64],
            message=message[:2000],
            data=data or {},
            run_id=run_id,
            task_id=task_id,
            dedup_key=dedup_key[:255] if dedup_key else None,
            occurred_at=occurred_at,
        )

    def record_once(self, dedup_key: str, alert_type: str, **fields: Any) -> bool:
        """``record``, unless an event with ``dedup_key`` exists; True when recorded."""
        if self.filter(dedup_key=dedup_key).exists():
            return False
        try:
            with transaction.atomic():
                self.record(alert_type, dedup_key=dedup_key, **fields)
        except IntegrityError:  # another step recorded it first
            return False
        return True

    def pending(self) -> EventQuerySet:
        return self.filter(alert__isnull=True)

    def pending_groups(self, now: datetime) -> list[str]:
        """The groups with events up to ``now`` that no alert covers yet, oldest first."""
        rows = (
            self.pending()
            .filter(occurred_at__lte=now)
            .values("group_key")
            .annotate(first=Min("occurred_at"))
            .order_by("first")
        )
        return [row["group_key"] for row in rows]


class AlertEvent(models.Model):
    """One thing ops should hear of: a run that failed, a stale heartbeat..."""

    type = models.CharField(_("type"), max_length=32, choices=AlertType.choices)
    group_key = models.CharField(_("group"), max_length=255)
    kind = models.CharField(_("kind"), max_length=64, blank=True)
    channel = models.CharField(_("channel"), max_length=64, blank=True)
    scope = models.CharField(_("scope"), max_length=100, blank=True)
    code = models.CharField(_("code"), max_length=64, blank=True)
    message = models.TextField(_("message"), blank=True)
    data = models.JSONField(_("data"), default=dict, blank=True)
    # Plain ids, not foreign keys: the record outlives a deleted task and its runs.
    run_id = models.BigIntegerField(_("run"), null=True, blank=True)
    task_id = models.BigIntegerField(_("task"), null=True, blank=True)
    # Set for events of checks, so that one condition is recorded once.
    # NULL: no key (NULLs never collide in a unique column).
    dedup_key = models.CharField(
        _("deduplication key"), max_length=255, null=True, blank=True, unique=True
    )
    occurred_at = models.DateTimeField(_("occurred"))
    alert = models.ForeignKey(
        "Alert",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="events",
        verbose_name=_("alert"),
    )

    objects = EventQuerySet.as_manager()

    class Meta:
        verbose_name = _("alert event")
        verbose_name_plural = _("alert events")
        indexes = [
            models.Index(
                fields=["group_key", "occurred_at"],
                name="ops_event_pending_idx",
                condition=Q(alert__isnull=True),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.type} {self.code} @ {self.occurred_at.isoformat()}"


class AlertQuerySet(models.QuerySet["Alert"]):
    def latest_of(self, key: str) -> Alert | None:
        return self.filter(group_key=key).order_by("-seq").first()

    def open_for(
        self,
        key: str,
        now: datetime,
        window: float,
        render: Render,
        targets: Sequence[Target],
    ) -> Alert | None:
        """The group's next alert, covering its pending events up to ``now``, with a
        pending delivery to each of ``targets``; None while the group's window is open
        (its last alert less than ``window`` seconds old) or when another step opened
        it first. ``render(alert, events)`` gives the title and body."""
        last = self.latest_of(key)
        if last is not None and now < last.created_at + timedelta(seconds=window):
            return None
        try:
            with transaction.atomic():
                alert = self._cover(key, (last.seq if last else 0) + 1, now)
                if alert is None:
                    return None
                alert.title, alert.body = render(alert, alert.events.all())
                alert.save(update_fields=["title", "body"])
                AlertDelivery.objects.bulk_create(
                    [
                        AlertDelivery(
                            alert=alert, channel=t.alias, target=t.who, next_attempt_at=now
                        )
                        for t in targets
                    ]
                )
        except IntegrityError:  # another step took this sequence number
            return None
        return alert

    def _cover(self, key: str, seq: int, now: datetime) -> Alert | None:
        first = AlertEvent.objects.pending().filter(group_key=key, occurred_at__lte=now).first()
        if first is None:
            return None
        alert = self.create(
            group_key=key,
            seq=seq,
            type=first.type,
            created_at=now,
            **{name: getattr(first, name) for name in GROUPED_BY.get(first.type, ())},
        )
        AlertEvent.objects.pending().filter(group_key=key, occurred_at__lte=now).update(alert=alert)
        span = alert.events.aggregate(
            n=Count("id"), first=Min("occurred_at"), last=Max("occurred_at")
        )
        alert.event_count = span["n"]
        alert.first_event_at = span["first"]
        alert.last_event_at = span["last"]
        alert.save(update_fields=["event_count", "first_event_at", "last_event_at"])
        return alert


class Alert(models.Model):
    """One message to ops about one group's events: the first of a quiet group at once,
    the next ones as digests of what came while the group's window was open."""

    group_key = models.CharField(_("group"), max_length=255)
    seq = models.PositiveIntegerField(_("number in its group"))
    type = models.CharField(_("type"), max_length=32, choices=AlertType.choices)
    kind = models.CharField(_("kind"), max_length=64, blank=True)
    channel = models.CharField(_("channel"), max_length=64, blank=True)
    scope = models.CharField(_("scope"), max_length=100, blank=True)
    created_at = models.DateTimeField(_("created"))
    event_count = models.PositiveIntegerField(_("events"), default=0)
    first_event_at = models.DateTimeField(_("first event"), null=True, blank=True)
    last_event_at = models.DateTimeField(_("last event"), null=True, blank=True)
    title = models.CharField(_("title"), max_length=255, blank=True)
    body = models.TextField(_("body"), blank=True)
    # Who marked it handled (from its card, or the admin), and when.
    handled_at = models.DateTimeField(_("handled"), null=True, blank=True)
    # The group's earlier alert this one goes on from, when its cards were updated to
    # count this one's events too (``ops.alert_cards``): a chain acted on as one.
    continues = models.OneToOneField(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="continued_by",
        verbose_name=_("goes on from"),
    )
    # db_default: the release before this column inserts alerts without it.
    handled_by = models.CharField(
        _("handled by"), max_length=150, blank=True, default="", db_default=""
    )

    objects = AlertQuerySet.as_manager()

    class Meta:
        verbose_name = _("alert")
        verbose_name_plural = _("alerts")
        permissions = [("mute_alert", _("Can mute an alert's group for a while"))]
        constraints = [
            models.UniqueConstraint(fields=["group_key", "seq"], name="ops_alert_once_per_seq"),
        ]
        # The alert step's retention: the oldest alerts first (``ops.alerts.prune_alerts``).
        indexes = [models.Index(fields=["created_at"], name="ops_alert_created_idx")]

    def __str__(self) -> str:
        return self.title or f"{self.group_key} #{self.seq}"

    @property
    def is_digest(self) -> bool:
        return self.event_count > 1


class DeliveryQuerySet(models.QuerySet["AlertDelivery"]):
    def due(self, now: datetime) -> DeliveryQuerySet:
        return self.filter(status__in=AlertDelivery.OPEN, next_attempt_at__lte=now)


class AlertDelivery(models.Model):
    """One alert to one alert channel: who was told, when, and how it went."""

    class Status(models.TextChoices):
        PENDING = "pending", _("Pending")
        SENDING = "sending", _("Sending")
        SENT = "sent", _("Sent")
        RETRYING = "retrying", _("Waiting to retry")
        FAILED = "failed", _("Failed")

    OPEN = (Status.PENDING, Status.SENDING, Status.RETRYING)

    alert = models.ForeignKey(
        Alert, on_delete=models.CASCADE, related_name="deliveries", verbose_name=_("alert")
    )
    channel = models.CharField(_("alert channel"), max_length=64)
    target = models.CharField(_("told"), max_length=200, blank=True)
    status = models.CharField(
        _("status"), max_length=16, choices=Status.choices, default=Status.PENDING
    )
    attempts = models.PositiveSmallIntegerField(_("attempts"), default=0)
    next_attempt_at = models.DateTimeField(_("next attempt"), null=True, blank=True)
    sent_at = models.DateTimeField(_("sent"), null=True, blank=True)
    error = models.TextField(_("error"), blank=True)

    objects = DeliveryQuerySet.as_manager()

    class Meta:
        verbose_name = _("alert delivery")
        verbose_name_plural = _("alert deliveries")
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                name="ops_delivery_due_idx",
                condition=Q(status__in=["pending", "sending", "retrying"]),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.alert_id} → {self.channel} [{self.status}]"

    def claim(self, now: datetime, lease: float) -> bool:
        """Take this delivery for one attempt, unless another step did; it is tried again
        after ``lease`` seconds should this one die."""
        taken = AlertDelivery.objects.filter(
            pk=self.pk, status=self.status, next_attempt_at=self.next_attempt_at
        ).update(
            status=self.Status.SENDING,
            next_attempt_at=now + timedelta(seconds=lease),
            attempts=models.F("attempts") + 1,
        )
        if taken:
            self.refresh_from_db(fields=["status", "next_attempt_at", "attempts"])
        return bool(taken)

    def mark_sent(self, now: datetime) -> None:
        self.status, self.sent_at, self.next_attempt_at, self.error = (
            self.Status.SENT,
            now,
            None,
            "",
        )
        self.save(update_fields=["status", "sent_at", "next_attempt_at", "error"])

    def mark_failed(self, error: str, now: datetime, delays: Sequence[float]) -> None:
        """Retry after the next of ``delays``, or give up when they are spent."""
        if self.attempts <= len(delays):
            self.status = self.Status.RETRYING
            self.next_attempt_at = now + timedelta(seconds=delays[self.attempts - 1])
        else:
            self.status, self.next_attempt_at = self.Status.FAILED, None
        self.error = error[:2000]
        self.save(update_fields=["status", "next_attempt_at", "error"])


class StatisticsCheck(models.Model):
    """One day's count of one WeCom app's messages: ours (the ledger) against WeCom's
    (``message/get_statistics``), as the alert step compared them (``ops.statistics``).
    One row per app and Beijing day: the comparison is made once WeCom answers, however
    many steps run. ``theirs`` is None when WeCom could not be asked (``error`` says
    why); such a check is asked again in the same row, hourly, until that Beijing day
    ends (``attempts`` counts the askings, ``checked_at`` is the last)."""

    class Outcome(models.TextChoices):
        MATCH = "match", _("Match")
        WITHIN_TOLERANCE = "within_tolerance", _("Within tolerance")
        MISMATCH = "mismatch", _("Mismatch")
        UNAVAILABLE = "unavailable", _("WeCom not reached")

    day = models.DateField(_("day (Beijing)"))
    corp_id = models.CharField(_("corp id"), max_length=64)
    agent_id = models.CharField(_("agent id"), max_length=32)
    app_name = models.CharField(_("app name"), max_length=128, blank=True)
    channels = models.CharField(
        _("channels"), max_length=255, help_text=_("The channels that send as this app.")
    )
    ours = models.PositiveIntegerField(_("our count"))
    theirs = models.PositiveIntegerField(_("WeCom's count"), null=True, blank=True)
    tolerance = models.PositiveIntegerField(_("tolerance"), default=0)
    outcome = models.CharField(_("outcome"), max_length=longest(Outcome), choices=Outcome.choices)
    error = models.TextField(_("error"), blank=True)
    checked_at = models.DateTimeField(_("checked"))
    # db_default: the release before this column inserts checks without it.
    attempts = models.PositiveSmallIntegerField(
        _("attempts"),
        default=1,
        db_default=1,
        help_text=_("Times WeCom was asked; one it did not answer is asked again hourly."),
    )

    class Meta:
        verbose_name = _("WeCom count check")
        verbose_name_plural = _("WeCom count checks")
        ordering = ["-day", "corp_id", "agent_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["day", "corp_id", "agent_id"], name="ops_statisticscheck_one_per_day"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.corp_id}/{self.agent_id}: {self.ours} / {self.theirs}"

    @property
    def difference(self) -> int | None:
        return None if self.theirs is None else self.theirs - self.ours


# The cards' models, in their own module.
from .card_models import AlertAction, AlertCard, AlertMute, WeComMember  # noqa: E402

__all__ = [
    "Alert",
    "AlertAction",
    "AlertCard",
    "AlertDelivery",
    "AlertEvent",
    "AlertMute",
    "AlertType",
    "StatisticsCheck",
    "WeComMember",
]
