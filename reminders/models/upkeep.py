"""The engine's own bookkeeping: pruned one-shots, provider tokens, rate buckets and the
schedulers' heartbeats.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import models
from django.utils.translation import gettext_lazy as _


class PrunedOneShot(models.Model):
    """A time a keyed one-shot task that retention deleted once it had completed was
    sent at (or planned for and ended unsent): every such time, its current one and
    those it was moved from, one row each, with its kind and zone. Scheduling that key
    for one of those times again completes the new task at once instead of sending it a
    second time (``ScheduledTask.replan_all``); another time under the key is a message
    of its own. A row goes once its time can no longer come back: its kind's deadline
    for it has passed (``engine.retention``), so scheduled again it would expire, never
    be sent."""

    key = models.CharField(_("key"), max_length=200)
    run_at = models.DateTimeField(_("one-shot time"))
    # db_default: the release before these columns inserts rows without them; "" (a
    # kind or zone unknown) keeps the row for good.
    kind = models.CharField(_("kind"), max_length=64, blank=True, default="", db_default="")
    timezone = models.CharField(
        _("time zone"), max_length=64, blank=True, default="", db_default=""
    )
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
