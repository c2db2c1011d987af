"""The engine's django-q2 cluster, beside whatever django-q2 the host project runs.

A CRM may run django-q2 for work of its own: its ``Q_CLUSTER`` (a Redis broker, say, and
queues of its own) stays its own, and the engine never reads it. The engine's jobs go to
a cluster of its own, ``REMINDERS_CLUSTER`` (read over sound defaults by
``reminders.conf``): django-q2's ORM broker on the ``default`` database, the queue named
``REMINDERS_CLUSTER['name']`` and, for high priority runs, that name with ``-high``.
Neither cluster ever takes the other's jobs:

* Our jobs are enqueued with an explicit broker (``enqueue``), never through django-q2's
  process-wide configuration. ``async_task(cluster=...)`` names only the queue, on the
  broker *type* of the host's ``Q_CLUSTER`` (a Redis list, for a CRM on Redis). And
  ``ALT_CLUSTERS`` picked by ``Q_CLUSTER_NAME`` is resolved once per process, at import,
  from the environment, merged over the host's settings (where the host's
  ``broker_class`` or ``sqs`` still wins over ``orm``), and it reroutes every
  ``async_task`` of that process, the CRM's own too. The broker enqueues on the claim's
  connection, so a claim and its job commit together (``reminders.E005``).
* ``run_as`` makes a process forked for it run our cluster. It sets the django-q2
  settings that only drive a running cluster (workers, timeout, retry, polling, what is
  saved) to ours, and leaves those that decide where an ``async_task`` goes (the broker,
  ``CLUSTER_NAME``, ``PREFIX``, ``sync``, ``cached``) the host's: CRM code that runs
  inside our workers (a handler of ``reminders.signals.run_sent``, say) and enqueues a
  job of its own still sends it to the CRM's cluster. Our cluster never runs django-q2
  schedules; they are the host's cluster's to run.
* Payloads are signed with the host's ``Q_CLUSTER['name']`` (django-q2's ``PREFIX``) in
  every process, the enqueuing scheduler and our workers alike, as django-q2 means for
  the clusters of one site. One consequence: django-q2 records the host's cluster name
  on the task rows it saves (failed jobs) of our cluster too.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import time
from typing import Any

from django import db
from django.db import DatabaseError, transaction
from django.utils import timezone
from django_q.brokers import Broker
from django_q.brokers.orm import ORM
from django_q.conf import Conf
from django_q.models import OrmQ
from django_q.tasks import async_task

from ..conf import CLUSTER_KEYS
from ..conf import settings as conf
from . import outage, wake

logger = logging.getLogger(__name__)

HIGH_QUEUE_SUFFIX = "-high"
# On PostgreSQL a pusher whose queue is empty reads it again at least this often, heard
# of nothing (seconds; see ``EngineBroker``).
QUIET_POLL_SECONDS = 5.0
# The pusher's connection is health-checked at most this often (seconds).
HEALTH_CHECK_SECONDS = 1.0
# The shortest slice a waiting pusher sleeps before it looks at its stop event again.
MIN_SLICE_SECONDS = 0.05


class EngineBroker(ORM):
    """django-q2's ORM broker on the engine's database, whatever django-q2's settings in
    this process name (a host on Redis has none).

    It takes jobs as django-q2's does (those whose lock has passed, each locked for
    ``retry`` seconds), in one transaction of two statements however many it takes,
    where django-q2 sends one to look and one per job to lock it, each in a transaction
    of its own. Rows another pusher is taking are skipped where the database can
    (``SKIP LOCKED``), else waited for; the oldest jobs go first.

    It takes at most ``bulk`` jobs, and never more than the cluster has workers: with
    the queue in hand one job per worker (``run_as``), a host holds at most three jobs
    a worker (running, queued, in the pusher's hand) and leaves the rest of a burst to
    the other hosts' workers, instead of working through it alone while they idle.

    A database that went away is polled again every ``AWAY_POLL_SECONDS``
    (``reminders.engine.outage``), not after django-q2's 10 s.

    An empty queue is read again ``poll`` seconds later, as django-q2 does; but on
    PostgreSQL the pusher of a cluster (``run_as``) waits instead for the notification
    its queue's claims send when they commit (``enqueue``, ``reminders.engine.wake``'s
    ``job_channel``), on a listening connection of its own, and reads the queue again
    when one arrives, when it starts listening (what was queued before is read then), or
    ``QUIET_POLL_SECONDS`` after its last read at most: the bound for a job whose lock
    passed (its pusher died with it in hand; ``retry`` after it was taken) and for a
    lost notification. A listening connection that breaks ends the wait: the queue is
    read then (or polled as the database away), and the next wait listens again. It
    still sees its cluster's stop within ``poll`` seconds (the pusher's stop event,
    found on the stack: without it, it polls as before).

    The connection that reads the queue is health-checked (``close_old_connections``)
    before a read at most every ``HEALTH_CHECK_SECONDS``, not before each: one that
    broke since fails the read and is polled as the database away.
    """

    away = False  # the last read of the queue failed
    listens = False  # a cluster's pusher reads with this broker (``run_as``)
    _checked_at = -math.inf  # time.monotonic() of the last health check
    _sleeper: wake.Sleeper | None = None
    _stop: Any = None  # the pusher's stop event
    _pid = 0  # the process ``_sleeper`` and ``_stop`` belong to

    def get_connection(self, list_key: str | None = None) -> Any:
        alias = conf.CLUSTER["orm"]
        if transaction.get_autocommit(using=alias):
            # Outside a claim's transaction: drop connections gone stale, as django-q2 does.
            db.close_old_connections()
        return OrmQ.objects.using(alias)

    def enqueue(self, task: str) -> Any:
        """Queue ``task`` in the current transaction, and the notification of its queue's
        pushers for when it commits (once per transaction)."""
        pk = super().enqueue(task)
        wake.notify(conf.CLUSTER["orm"], wake.job_channel(self.list_key))
        return pk

    def dequeue(self) -> list[tuple[int, str]] | None:
        try:
            taken = self._take()
        except DatabaseError:
            self._lost()
            return None
        if self.away:
            self.away = False
            logger.info("the database answers again: taking jobs from %s", self.list_key)
        if taken:
            return taken
        self._await_jobs()
        return None

    def _await_jobs(self) -> None:
        """The queue was empty: sleep until a job may be there (see the class docstring)."""
        sleeper = self._listening()
        if sleeper is None:
            time.sleep(Conf.POLL)  # spare the CPU, as django-q2 does
            return
        stop = self._stop
        deadline = time.monotonic() + QUIET_POLL_SECONDS
        connect = True  # once per quiet period, not once per slice
        while (left := deadline - time.monotonic()) > 0:
            was_listening = sleeper.listening
            if sleeper.wait(min(left, max(Conf.POLL, MIN_SLICE_SECONDS)), connect=connect):
                return
            if was_listening and not sleeper.listening:
                return  # it broke (a restart?): read the queue now, listen again after
            connect = False
            if stop.is_set():
                sleeper.close()  # the pusher ends: its session with it
                self._sleeper = None
                return

    def _listening(self) -> wake.Sleeper | None:
        """This pusher's sleeper, made in its own process; None where it polls instead."""
        alias = conf.CLUSTER["orm"]
        if not self.listens or db.connections[alias].vendor != "postgresql":
            return None
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._stop = _pusher_stop_event()
            self._sleeper = None
            if self._stop is None:
                logger.warning(
                    "%s: the pusher's stop event is out of reach; polling the queue every %ss",
                    self.list_key,
                    Conf.POLL,
                )
            else:
                self._sleeper = wake.Sleeper(
                    alias,
                    channel=wake.job_channel(self.list_key),
                    application_name=wake.JOBS_APPLICATION_NAME,
                    what=f"the jobs of {self.list_key}",
                )
        return self._sleeper

    def _lost(self) -> None:
        """The database failed a read of the queue: django-q2's pusher would sleep 10 s and
        die, for the sentinel to start another; polling again shortly instead takes the
        first jobs within ``AWAY_POLL_SECONDS`` of the database's return (high priority
        runs are due then)."""
        if not self.away:
            logger.warning("could not read %s: the database is away", self.list_key, exc_info=True)
        self.away = True
        self._checked_at = -math.inf
        with contextlib.suppress(DatabaseError):
            db.connections[conf.CLUSTER["orm"]].close()
        time.sleep(outage.AWAY_POLL_SECONDS)

    def _queue(self) -> Any:
        """The queue's rows, the connection health-checked if it was not within
        ``HEALTH_CHECK_SECONDS``."""
        alias = conf.CLUSTER["orm"]
        now = time.monotonic()
        if transaction.get_autocommit(using=alias) and now - self._checked_at >= (
            HEALTH_CHECK_SECONDS
        ):
            db.close_old_connections()
            self._checked_at = now
        return OrmQ.objects.using(alias)

    def _take(self) -> list[tuple[int, str]]:
        queue = self._queue()
        alias = conf.CLUSTER["orm"]
        features = db.connections[alias].features
        with transaction.atomic(using=alias):
            due = queue.filter(key=self.list_key, lock__lt=timezone.now()).order_by("pk")
            if features.has_select_for_update_skip_locked:
                due = due.select_for_update(skip_locked=True)
            elif features.has_select_for_update:
                due = due.select_for_update()
            taken = list(due.values_list("pk", "payload")[: min(Conf.BULK, Conf.WORKERS)])
            if taken:
                queue.filter(pk__in=[pk for pk, _ in taken]).update(lock=self.timeout(None))
        return taken

    def info(self) -> str:
        return f"ORM {conf.CLUSTER['orm']}"


def _pusher_stop_event() -> Any:
    """The stop event of the django-q2 pusher this is called under (its ``event``), or
    None when not under one."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "pusher" and frame.f_globals.get("__name__") == (
            "django_q.pusher"
        ):
            event = frame.f_locals.get("event")
            return event if callable(getattr(event, "is_set", None)) else None
        frame = frame.f_back  # type: ignore[assignment]
    return None


def bulk_queue() -> str:
    """The queue of the bulk cluster: ``REMINDERS_CLUSTER['name']``."""
    return str(conf.CLUSTER["name"])


def high_queue() -> str:
    """The queue of the cluster that executes high priority runs only."""
    return f"{bulk_queue()}{HIGH_QUEUE_SUFFIX}"


def broker(queue: str) -> EngineBroker:
    return EngineBroker(list_key=queue)


def enqueue(queue: str, func: str, *args: Any, task_name: str) -> None:
    """Queue ``func(*args)`` for our cluster reading ``queue``, in the current transaction.

    ``sync`` and ``cached`` are said here so that a host's ``Q_CLUSTER`` setting them
    (a CRM's test settings) can neither run a delivery inside the claim nor keep its
    result in a cache instead of django-q2's tables.
    """
    async_task(func, *args, task_name=task_name, broker=broker(queue), sync=False, cached=False)


def run_as(queue: str, workers: int) -> Broker:
    """Make this process's django-q2 run our cluster: ``workers`` workers reading
    ``queue``; returns the broker to start it with.

    django-q2 fixes its settings when first imported (``Conf``); this process was forked
    to run the cluster, and only it and the processes it forks see the change.
    """
    cluster = conf.CLUSTER
    for key in sorted(CLUSTER_KEYS - {"name", "orm", "queue_limit"}):
        setattr(Conf, key.upper(), cluster[key])
    Conf.WORKERS = workers
    Conf.QUEUE_LIMIT = cluster.get("queue_limit", workers)
    Conf.SCHEDULER = False
    Conf.SAVE_LIMIT_PER = None
    ours = broker(queue)
    ours.listens = True  # its pusher waits for notifications (on PostgreSQL)
    db.connections.close_all()  # the cluster forks its processes next: share no connection
    return ours
