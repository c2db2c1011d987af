"""``/healthz``: is this deployment sending? Three cheap checks, each ok or failing with
a short reason.

* ``database``: a ``SELECT 1`` on the default database.
* ``scheduler``: some ``run_reminders`` ticked within ``OPS_HEARTBEAT_MAX_AGE_SECONDS``
  (its ``SchedulerHeartbeat``; a handful of rows).
* ``cluster``: django-q2 workers take the jobs the schedulers queue. No job in the ORM
  queue has waited longer than ``OPS_HEALTH_QUEUE_WAIT_SECONDS`` for a worker (the
  queue holds only jobs in flight: a few dozen rows). Where django-q2's cache is shared
  by every process (Redis, Memcached, the database cache), some cluster must also report
  its status there (``django_q.status.Stat.get_all()``). With a per-process cache (the
  default local memory) that call sees only the clusters of the process asking, which
  for a web process is none, so it is not used: the queue is then the only evidence, and
  with no work queued an absent cluster goes unnoticed until work comes (or, as a
  cluster is a child of ``run_reminders``, which restarts it each tick, the scheduler
  check fails first).

What is said: only whether each check passed and why not, in words and seconds. No
host names, process ids, database names, exception texts or settings: the endpoint is
meant for load balancers and probes, which are not authenticated. The exceptions are
logged (logger ``ops.health``). The names and statuses (``ok``, ``failing``) are for
machines and never change; the reasons are for people, in the request's language
(``LANGUAGE_CODE`` for a probe that asks for none).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings as django_settings
from django.db import connection
from django.db.models import Max, Min
from django.utils import timezone
from django.utils.translation import gettext as _

from reminders.checks import UNSHARED_CACHES
from reminders.models import SchedulerHeartbeat

from .conf import settings as conf

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    reason: str


@dataclass(frozen=True)
class Report:
    checks: list[Check]

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    def as_dict(self) -> dict[str, object]:
        return {
            "status": "ok" if self.ok else "failing",
            "checks": {
                check.name: {"status": "ok" if check.ok else "failing", "reason": check.reason}
                for check in self.checks
            },
        }


def database() -> Check:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception:
        logger.warning("health: the database is unreachable", exc_info=True)
        return Check("database", False, _("unreachable"))
    return Check("database", True, _("reachable"))


def scheduler(now: datetime) -> Check:
    latest = SchedulerHeartbeat.objects.aggregate(latest=Max("last_tick_at"))["latest"]
    if latest is None:
        return Check("scheduler", False, _("no scheduler heartbeat recorded"))
    age = max(0, int((now - latest).total_seconds()))
    if age > conf.HEARTBEAT_MAX_AGE_SECONDS:
        return Check("scheduler", False, _("no scheduler has ticked for %(age)d s") % {"age": age})
    return Check("scheduler", True, _("last tick %(age)d s ago") % {"age": age})


def _oldest_waiting_job(now: datetime) -> datetime | None:
    """When the oldest job a worker may take was queued (the ORM broker stamps ``lock``
    with the enqueue time, and pushes it into the future while a worker holds it)."""
    from django_q.models import OrmQ

    return OrmQ.objects.filter(lock__lte=now).aggregate(oldest=Min("lock"))["oldest"]


def stats_shared() -> bool:
    """Whether django-q2's cache, where clusters report their status, is shared by every
    process (so this one can read the others' reports)."""
    from django_q.conf import Conf

    caches = getattr(django_settings, "CACHES", {})
    backend = caches.get(Conf.CACHE, {}).get("BACKEND", "")
    return bool(backend) and backend not in UNSHARED_CACHES


def _clusters_reporting() -> int:
    from django_q.conf import Conf
    from django_q.status import Stat

    return sum(stat.status != Conf.STOPPED for stat in Stat.get_all())


def cluster(now: datetime) -> Check:
    oldest = _oldest_waiting_job(now)
    if oldest is not None:
        waited = int((now - oldest).total_seconds())
        if waited > conf.HEALTH_QUEUE_WAIT_SECONDS:
            reason = _("a queued job has waited %(waited)d s for a worker") % {"waited": waited}
            return Check("cluster", False, reason)
    if stats_shared():
        try:
            reporting = _clusters_reporting()
        except Exception:
            logger.warning("health: cannot read django-q2's cluster stats", exc_info=True)
            return Check("cluster", False, _("cluster status unreadable"))
        if not reporting:
            return Check("cluster", False, _("no django-q2 cluster reports its status"))
    return Check("cluster", True, _("queued jobs are being taken"))


def check_all(now: datetime | None = None) -> Report:
    now = now or timezone.now()
    db = database()
    if not db.ok:
        skipped = _("not checked: the database is unreachable")
        return Report([db, Check("scheduler", False, skipped), Check("cluster", False, skipped)])
    checks = [db]
    for check in (scheduler, cluster):
        try:
            checks.append(check(now))
        except Exception:
            logger.warning("health: the %s check failed", check.__name__, exc_info=True)
            checks.append(Check(check.__name__, False, _("check failed")))
    return Report(checks)
