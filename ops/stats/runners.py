"""What runs the runs, as of now: the schedulers' heartbeats (one per running
``run_reminders``; stale past ``ops.conf``'s ``HEARTBEAT_MAX_AGE_SECONDS``), and django-q2's
workers as this process can know them.

Two queries: the heartbeats, and django-q2's ORM queue. The clusters' own reports come
from django-q2's cache, only where it is shared (``ops.health``); reading them never
fails the numbers: a failure is logged and the clusters count as unknown.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from django.db.models import Count, Min, Q

from reminders.models import SchedulerHeartbeat

from .. import health
from ..conf import settings as conf
from .days import local_iso, tenths

# The name the module had before it was a package's: logging configured for it still is.
logger = logging.getLogger("ops.stats")


@dataclass(frozen=True)
class Scheduler:
    owner: str
    host: str
    pid: int
    started_at: datetime
    last_tick_at: datetime
    age_seconds: float
    stale: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "owner": self.owner,
            "host": self.host,
            "pid": self.pid,
            "started_at": local_iso(self.started_at),
            "last_tick_at": local_iso(self.last_tick_at),
            "age_seconds": round(self.age_seconds, 1),
            "stale": self.stale,
        }


@dataclass(frozen=True)
class ClusterStatus:
    """A django-q2 cluster as it reports itself in django-q2's cache."""

    cluster_id: str
    host: str
    status: str
    workers: int
    uptime_seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class Workers:
    """What this process can know of the django-q2 workers: the ORM queue always (jobs
    waiting for a worker, and the oldest one's wait; jobs a worker holds), each cluster's
    own report only where django-q2's cache is shared (``ops.health``)."""

    queued: int
    taken: int
    oldest_wait_seconds: float | None
    clusters_known: bool
    clusters: list[ClusterStatus] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "queued": self.queued,
            "taken": self.taken,
            "oldest_wait_seconds": tenths(self.oldest_wait_seconds),
            "clusters_known": self.clusters_known,
            "clusters": [cluster.as_dict() for cluster in self.clusters],
        }


def schedulers(now: datetime) -> list[Scheduler]:
    """Query: every scheduler heartbeat (one row per running ``run_reminders``)."""
    max_age = conf.HEARTBEAT_MAX_AGE_SECONDS
    result = []
    for beat in SchedulerHeartbeat.objects.order_by("host", "pid", "owner"):
        age = max(0.0, (now - beat.last_tick_at).total_seconds())
        result.append(
            Scheduler(
                beat.owner,
                beat.host,
                beat.pid,
                beat.started_at,
                beat.last_tick_at,
                age,
                age > max_age,
            )
        )
    return result


def workers(now: datetime) -> Workers:
    """Query: django-q2's ORM queue; and the clusters' own reports where knowable."""
    from django_q.models import OrmQ

    queue = OrmQ.objects.aggregate(
        waiting=Count("pk", filter=Q(lock__lte=now)),
        taken=Count("pk", filter=Q(lock__gt=now)),
        oldest=Min("lock", filter=Q(lock__lte=now)),
    )
    oldest = queue["oldest"]
    clusters: list[ClusterStatus] = []
    known = health.stats_shared()
    if known:
        try:
            clusters = _clusters()
        except Exception:
            logger.warning("stats: cannot read django-q2's cluster stats", exc_info=True)
            known = False
    return Workers(
        queued=queue["waiting"],
        taken=queue["taken"],
        oldest_wait_seconds=max(0.0, (now - oldest).total_seconds()) if oldest else None,
        clusters_known=known,
        clusters=clusters,
    )


def _clusters() -> list[ClusterStatus]:
    from django_q.status import Stat

    return [
        ClusterStatus(
            str(stat.cluster_id),
            str(stat.host),
            str(stat.status),
            len(stat.workers or []),
            float(stat.uptime()),
        )
        for stat in Stat.get_all()
    ]
