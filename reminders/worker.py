"""The long-running process: the scheduler loop plus a django-q2 cluster beside it.

Run any number of these, on any number of hosts, against one database. Each one:

* every tick (``REMINDERS_TICK_SECONDS``) turns due tasks into runs, expires waiting
  runs past their deadline, reports runs running too long (``run_stuck``) and claims due
  runs, no more than ``REMINDERS_MAX_IN_FLIGHT`` waiting for its workers at a time;
* records its heartbeat (``SchedulerHeartbeat``: at most every ``HEARTBEAT_SECONDS``)
  and removes it when it stops gracefully;
* starts the django-q2 cluster that executes them in a child process of its own
  session, with stop signals blocked in all of its processes, so that a SIGTERM sent to
  the process group or to every process (systemd's ``KillMode=control-group``) stops
  the cluster in order instead of killing workers mid-send;
* on SIGTERM or SIGINT stops claiming, hands back what no worker started, lets the
  workers finish what they hold (``REMINDERS_SHUTDOWN_GRACE``), and exits.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import threading
from datetime import datetime, timedelta
from multiprocessing.process import BaseProcess
from types import FrameType

from django.db import DatabaseError, close_old_connections, connections
from django.utils import timezone

from . import dispatch
from .conf import settings as conf
from .models import SchedulerHeartbeat

logger = logging.getLogger(__name__)


STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}
# A scheduler writes its heartbeat at most this often (seconds).
HEARTBEAT_SECONDS = 5.0


def _run_cluster(parent_pid: int) -> None:
    """Body of the cluster child: a django-q2 cluster that stops in order when asked,
    when the scheduler process is gone, and never in pieces.

    SIGTERM and SIGINT are blocked before the cluster forks, so its sentinel, pusher and
    workers inherit the mask: a signal sent to every process of the service (systemd's
    default ``KillMode=control-group``) cannot kill a worker mid-send or the sentinel
    mid-handshake. This process alone takes them, synchronously, and stops the cluster
    the way django-q2 means it to (workers finish what they hold). Job timeouts are
    unaffected: django-q2 enforces them with SIGALRM inside the worker.
    """
    os.setsid()
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    from django_q.cluster import Cluster

    cluster = Cluster()
    cluster.start()
    while cluster.sentinel is not None and cluster.sentinel.is_alive():
        received = signal.sigtimedwait(STOP_SIGNALS, 0.5)
        orphaned = os.getppid() != parent_pid
        if received is not None or orphaned:
            if orphaned:
                logger.warning("scheduler process %s is gone; stopping the cluster", parent_pid)
            cluster.stop()
            break


class ReminderWorker:
    def __init__(self, *, tick: float | None = None, with_cluster: bool = True) -> None:
        self.tick_seconds = conf.TICK_SECONDS if tick is None else tick
        self.with_cluster = with_cluster
        self.owner = f"{conf.WORKER_ID}:{os.getpid()}"
        self.cluster: BaseProcess | None = None
        self._stopping = threading.Event()
        self.started_at = timezone.now()
        self._beat_at: datetime | None = None

    # Lifecycle -----------------------------------------------------------------------

    def run(self) -> None:
        previous = {
            sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)
        }
        logger.info("reminders worker %s starting", self.owner)
        try:
            if self.with_cluster:
                self._start_cluster()
            while not self._stopping.is_set():
                busy = self._tick_safely()
                self._watch_cluster()
                if not busy:
                    self._stopping.wait(self.tick_seconds)
        finally:
            self.shutdown()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        logger.info("reminders worker %s stopped", self.owner)

    def stop(self) -> None:
        self._stopping.set()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        logger.info("got %s; stopping", signal.Signals(signum).name)
        self.stop()

    def shutdown(self) -> None:
        self._stop_beating()
        released = self._release()
        if self.cluster is not None:
            self._stop_cluster()
        released += self._release()
        if released:
            logger.info("handed back %d claimed runs no worker had started", released)
        connections.close_all()

    def _release(self) -> int:
        try:
            return dispatch.release(self.owner)
        except DatabaseError:
            logger.exception("could not hand back claimed runs; their lease will expire")
            return 0

    def _stop_beating(self) -> None:
        try:
            SchedulerHeartbeat.objects.stop(self.owner)
        except DatabaseError:
            logger.exception("could not remove this scheduler's heartbeat")

    # One tick --------------------------------------------------------------------------

    def tick(self, now: datetime | None = None) -> bool:
        """Materialize, expire, report and claim once; True when there was more work
        than one tick takes."""
        now = now or timezone.now()
        self._beat(now)
        dispatch.materialize(now)
        dispatch.expire_overdue(now)
        dispatch.report_stuck(now)
        room = conf.MAX_IN_FLIGHT - dispatch.in_flight(self.owner)
        limit = min(room, conf.CLAIM_BATCH)
        if limit <= 0:
            return False
        claimed = dispatch.claim(self.owner, limit, now)
        # Loop again at once only when the batch size, not back-pressure, was the limit.
        return limit == conf.CLAIM_BATCH and len(claimed.run_ids) == limit

    def _beat(self, now: datetime) -> None:
        """Record this tick, unless one was recorded less than ``HEARTBEAT_SECONDS`` ago."""
        last = self._beat_at
        if last is not None and last <= now < last + timedelta(seconds=HEARTBEAT_SECONDS):
            return
        SchedulerHeartbeat.objects.beat(
            self.owner,
            host=socket.gethostname(),
            pid=os.getpid(),
            started_at=self.started_at,
            now=now,
        )
        self._beat_at = now

    def _tick_safely(self) -> bool:
        close_old_connections()
        try:
            return self.tick()
        except DatabaseError:
            logger.exception("scheduler tick failed; trying again next tick")
            connections.close_all()
            return False

    # The cluster child -------------------------------------------------------------------

    def _start_cluster(self) -> None:
        connections.close_all()  # never share a connection with a forked child
        process = multiprocessing.get_context("fork").Process(
            target=_run_cluster, args=(os.getpid(),), name="reminders-cluster"
        )
        process.start()
        self.cluster = process
        logger.info("django-q2 cluster started (pid %s)", process.pid)

    def _watch_cluster(self) -> None:
        if self.cluster is None or self.cluster.is_alive() or self._stopping.is_set():
            return
        logger.error("django-q2 cluster exited with %s; starting it again", self.cluster.exitcode)
        self._start_cluster()

    def _stop_cluster(self) -> None:
        process = self.cluster
        assert process is not None and process.pid is not None  # noqa: S101
        if process.is_alive():
            os.kill(process.pid, signal.SIGTERM)
            process.join(conf.SHUTDOWN_GRACE)
        if process.is_alive():
            logger.error("cluster did not stop in %ss; killing it", conf.SHUTDOWN_GRACE)
            os.killpg(process.pid, signal.SIGKILL)
            process.join(5)
        self.cluster = None
