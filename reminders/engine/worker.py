"""The long-running process: the scheduler loop plus a django-q2 cluster beside it.

Run any number of these, on any number of hosts, against one database. Each one:

* every tick (``REMINDERS_TICK_SECONDS``) turns due tasks into runs and claims due
  runs, no more than ``REMINDERS_MAX_IN_FLIGHT`` waiting for its workers at a time
  (high priority runs are claimed even then: they wait for workers of their own);
  but a tick whose sleep nothing woke knows, from the moments it read before that sleep
  (``dispatch.next_moments``), when the first task and the first waiting run fall due:
  it plans only if a task falls due within ``REMINDERS_PLAN_AHEAD_SECONDS``, and claims
  only if a run is due, a task was planned, or it last claimed ``CLAIM_SWEEP_SECONDS``
  ago (runs under an expired lease are claimable too, and no moment read says when).
  Whatever fell due since it read them is notified (PostgreSQL) or read with the next
  moments after the tick, which then sleeps ``MIN_SLEEP_SECONDS`` only;
* a claim never takes a waiting run past its deadline: it expires it instead
  (``dispatch.claim``);
* before a claim, at most every ``CLAIM_SWEEP_SECONDS``, sweeps: expires every waiting
  run past its deadline, reports runs running too long (``run_stuck``), ends the items
  of digests that ended without settling them; and that claim alone also takes runs
  held under an expired lease. These are states a run reaches late by minutes, and
  each statement reads, until the table is vacuumed, every index entry a wave left
  dead: swept at every tick they were a third of an idle scheduler's statements, and
  at every claim most of a wave's. Nor does a claim count this process's runs in
  flight while what it knows leaves a full claim's room (``_room``);
* between ticks sleeps until the next task or run falls due if that comes before the
  tick (one due already is picked up at once, ``MIN_SLEEP_SECONDS`` later), and under
  back-pressure wakes early only for high priority work;
* on PostgreSQL also wakes, and ticks at once, when another process makes work due now
  (``reminders.engine.wake``: a one-shot scheduled for now, a task resumed, a run retried);
  elsewhere such work waits for the tick at most;
* records its heartbeat (``SchedulerHeartbeat``: at most every ``HEARTBEAT_SECONDS``)
  and removes it when it stops gracefully;
* tells the CRM of actions on cards (``announce``) and queues the cards to update
  (``cards``) at every tick, but on PostgreSQL, while it listens, only at a tick a
  notification woke (every click kept notifies: ``intake.clicks``) or at most every
  ``CLICKS_SECONDS`` (the net for a notification lost): the two reads cost every
  tick of a wave, where the schedulers wake for each second's runs and clicks are
  rare; and forgets the callback's old nonces at most every ``FORGET_NONCES_SECONDS``;
* completes the tasks whose runs have all ended that no run's end completed (at most
  every ``COMPLETE_SECONDS``: ``reminders.models.tasks`` says why the status follows
  the runs);
* starts the django-q2 clusters that execute them, each in a child process of its own
  session, with stop signals blocked in all of its processes, so that a SIGTERM sent to
  the process group or to every process (systemd's ``KillMode=control-group``) stops
  the clusters in order instead of killing workers mid-send: the bulk cluster
  (``REMINDERS_CLUSTER``, never the host project's ``Q_CLUSTER``: see
  ``reminders.engine.cluster``), and beside it one of ``REMINDERS_HIGH_WORKERS`` workers
  reading only the high priority queue, which bulk work therefore never occupies;
* when the database failed a tick and answers again, hands back what it claimed and no
  worker started, at once rather than after their lease (``reminders.engine.outage``);
* on SIGTERM or SIGINT ends its sleep at once, stops claiming, hands back what no
  worker started, lets the workers finish what they hold (``REMINDERS_SHUTDOWN_GRACE``),
  and exits.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import threading
import time
from datetime import datetime, timedelta
from multiprocessing.process import BaseProcess
from types import FrameType

from django.db import DatabaseError, close_old_connections, connections
from django.utils import timezone

from ..conf import settings as conf
from ..models import SchedulerHeartbeat
from . import announce, cards, cluster, digest_ends, dispatch, wake

logger = logging.getLogger(__name__)


STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}
# A scheduler writes its heartbeat at most this often (seconds).
HEARTBEAT_SECONDS = 5.0
# A scheduler sweeps for tasks whose runs have all ended at most this often (seconds):
# a run's own end completes its task at once; the sweep is for runs ended otherwise (a
# bulk update, a process that died before completing), and it reads every task with no
# occurrence left that is still active: each one-shot planned ahead whose run waits
# (26 ms on PostgreSQL for the 12,000 of a morning of digests, for each scheduler), and
# on MariaDB, which keeps no partial index, every ended task's row too.
COMPLETE_SECONDS = 300.0
# A tick that knows nothing is due still claims if it has not for this long (seconds):
# runs held under an expired lease (their holder died) are claimable whatever is due.
# It is also how often, at most, a claim sweeps first and looks for those runs.
CLAIM_SWEEP_SECONDS = 5.0
# A scheduler that listens (PostgreSQL) looks for actions to announce and cards to
# update at each tick a notification woke, and otherwise at most this often (seconds):
# every click kept notifies, so this is only the net for a notification lost.
CLICKS_SECONDS = 5.0
# A scheduler forgets the callback's nonces past their time window at most this often
# (seconds): the callback refuses their replays by their age anyway.
FORGET_NONCES_SECONDS = 60.0
# Tasks the first tick plans, before it claims them (``ReminderWorker._first_plan``); the
# ticks after it plan ``dispatch.PLAN_BATCH``.
FIRST_PLAN_BATCH = 50
# The shortest sleep between ticks when something is due already but was not claimed
# (held by another scheduler at that moment): never a busy loop.
MIN_SLEEP_SECONDS = 0.05


def _run_cluster(parent_pid: int, queue: str, workers: int) -> None:
    """Body of the cluster child: our django-q2 cluster of ``workers`` workers reading
    ``queue`` (``cluster.run_as``), that stops in order when asked, when the scheduler
    process is gone, and never in pieces.

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

    # What the jobs run, imported once here: every worker the cluster forks (and forks
    # again after ``recycle`` jobs) has it, instead of importing it at its first job.
    from . import delivery  # noqa: F401

    q_cluster = Cluster(cluster.run_as(queue, workers))
    q_cluster.start()
    while q_cluster.sentinel is not None and q_cluster.sentinel.is_alive():
        received = signal.sigtimedwait(STOP_SIGNALS, 0.5)
        orphaned = os.getppid() != parent_pid
        if received is not None or orphaned:
            if orphaned:
                logger.warning("scheduler process %s is gone; stopping the cluster", parent_pid)
            q_cluster.stop()
            break


class ReminderWorker:
    def __init__(self, *, tick: float | None = None, with_cluster: bool = True) -> None:
        self.tick_seconds = conf.TICK_SECONDS if tick is None else tick
        self.with_cluster = with_cluster
        self.owner = f"{conf.WORKER_ID}:{os.getpid()}"
        # Queue name -> the child process running that queue's cluster.
        self.clusters: dict[str, BaseProcess] = {}
        self._pressed = False  # the last tick met back-pressure
        self._stopping = threading.Event()
        self._sleeper: wake.Sleeper | None = None  # while ``run`` runs
        self.started_at = timezone.now()
        self._beat_at: datetime | None = None
        self._completed_at: datetime | None = None
        self._forgot_at: datetime | None = None
        self._clicks_at: datetime | None = None
        self._claimed_at: datetime | None = None
        self._swept_at: datetime | None = None
        # At least as many runs as this process has claimed and no worker started yet
        # (``dispatch.in_flight``): counted, plus every run claimed since the count. None:
        # count at the next claim.
        self._in_flight: int | None = None
        # The database failed a tick or a read since the last good one: what this
        # process claimed and no worker started is given back once it answers again.
        self._lost_database = False
        # Set when the scheduler goes to sleep having read when work is next due (all of
        # it, not under back-pressure): the first waiting run's moment and the first
        # task's (``dispatch.next_moments``). The next tick takes them, unless the sleep
        # was woken.
        self._known: tuple[datetime | None, datetime | None] | None = None
        # The first tick plans a small batch and claims it before planning on: a process
        # started on a backlog of due tasks (a restart, the end of an outage) sends its
        # first messages one small plan after it starts, not after a full one.
        self._first_plan: int | None = min(FIRST_PLAN_BATCH, dispatch.PLAN_BATCH)

    # Lifecycle -----------------------------------------------------------------------

    def run(self) -> None:
        previous = {
            sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)
        }
        logger.info("reminders worker %s starting", self.owner)
        self._sleeper = sleeper = wake.Sleeper()
        try:
            if self.with_cluster:
                self._start_clusters()
            while not self._stopping.is_set():
                busy = self._tick_safely()
                self._watch_clusters()
                if not busy and sleeper.wait(self._sleep_seconds()):
                    # Woken (work made due now elsewhere, or a stop): tick again at once,
                    # looking for everything.
                    self._known = None
        finally:
            self.shutdown()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        logger.info("reminders worker %s stopped", self.owner)

    def stop(self) -> None:
        """Stop after the current tick, without sleeping first; safe from a signal
        handler or another thread."""
        self._stopping.set()
        sleeper = self._sleeper
        if sleeper is not None:
            sleeper.interrupt()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        logger.info("got %s; stopping", signal.Signals(signum).name)
        self.stop()

    def shutdown(self) -> None:
        self._stop_beating()
        released = self._release()
        if self.clusters:
            self._stop_clusters()
        released += self._release()
        if released:
            logger.info("handed back %d claimed runs no worker had started", released)
        sleeper, self._sleeper = self._sleeper, None
        if sleeper is not None:
            sleeper.close()
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
        """Materialize, complete the tasks whose runs have all ended
        (``dispatch.complete_ended``, at most every ``COMPLETE_SECONDS``), tell the CRM
        of actions on cards (``announce``) and queue the cards to update (``cards``)
        (``_clicks``: on PostgreSQL only when they may have come), and
        claim once, having swept first if it last did ``CLAIM_SWEEP_SECONDS`` ago or
        more (``_sweep``: expire, report, end the runs of digests that ended; that claim
        also takes runs under an expired lease); True when there was more work than one
        tick takes: more tasks due than one plan takes (planning goes on under
        back-pressure: a wave of 100,000 is planned at once, not a batch a tick), or a
        full claim batch. What it knows from before its sleep may spare it the plan and
        the claim (the module docstring)."""
        now = now or timezone.now()
        known, self._known = self._known, None
        runs_at, tasks_at = known or (now, now)
        self._beat(now)
        planned = 0
        plan_until = now + timedelta(seconds=conf.PLAN_AHEAD_SECONDS)
        limit, self._first_plan = self._first_plan or dispatch.PLAN_BATCH, None
        if known is None or _falls_due(tasks_at, plan_until):
            planned = dispatch.plan(now, limit).tasks
        more_to_plan = planned == limit
        quiet = (
            known is not None
            and not planned
            and not _falls_due(runs_at, now)
            and _within(self._claimed_at, now, CLAIM_SWEEP_SECONDS)
        )
        self._complete_ended(now)
        self._clicks(now, woken=known is None)
        if quiet:
            return more_to_plan
        self._claimed_at = now
        sweep = not _within(self._swept_at, now, CLAIM_SWEEP_SECONDS)
        if sweep:
            self._sweep(now)
            self._swept_at = now
        limit = min(self._room(), conf.CLAIM_BATCH)
        self._pressed = limit <= 0
        if self._pressed:
            # High runs have workers of their own: bulk back-pressure does not hold them.
            self._claim(conf.CLAIM_BATCH, now, only_high=True, abandoned=sweep)
            return more_to_plan
        claimed = self._claim(limit, now, abandoned=sweep)
        # Claim again at once only when the batch size, not back-pressure, was the limit.
        return more_to_plan or (limit == conf.CLAIM_BATCH and claimed == limit)

    def _claim(self, limit: int, now: datetime, **options: bool) -> int:
        """``dispatch.claim``, counted in what this process knows is in flight; returns
        how many runs it claimed."""
        claimed = len(dispatch.claim(self.owner, limit, now, **options).run_ids)
        if self._in_flight is not None:
            self._in_flight += claimed
        return claimed

    def _room(self) -> int:
        """How many more runs this process may claim under ``REMINDERS_MAX_IN_FLIGHT``.
        It counts its runs in flight (``dispatch.in_flight``) only when what it knows
        leaves less than a full claim's room: the last count plus every run claimed
        since is an upper bound, as only this process's claims put runs in its name
        (workers, hand-backs and takeovers only take them out). Counting at every claim
        read, through the index of leased runs, every entry a wave left dead there
        until a vacuum."""
        known = self._in_flight
        if known is None or conf.MAX_IN_FLIGHT - known < conf.CLAIM_BATCH:
            known = self._in_flight = dispatch.in_flight(self.owner)
        return conf.MAX_IN_FLIGHT - known

    @staticmethod
    def _sweep(now: datetime) -> None:
        """Before a claim, every ``CLAIM_SWEEP_SECONDS`` at most: expire the runs past
        their deadline, report stuck runs, end the items of digests that ended. (A claim
        expires the runs it finds past their deadline itself, rather than claim them.)"""
        dispatch.expire_overdue(now)
        dispatch.report_stuck(now)
        digest_ends.settle_ended(now)

    def _complete_ended(self, now: datetime) -> None:
        """``dispatch.complete_ended``, unless swept less than ``COMPLETE_SECONDS`` ago."""
        if _within(self._completed_at, now, COMPLETE_SECONDS):
            return
        dispatch.complete_ended(now)
        self._completed_at = now

    def _clicks(self, now: datetime, *, woken: bool) -> None:
        """Tell the CRM of actions (``announce.announce``, forgetting old nonces unless
        it did less than ``FORGET_NONCES_SECONDS`` ago) and queue the cards to update
        (``cards.claim``): at every tick, but while this scheduler listens for
        notifications, only at a tick one woke (``woken``: what it knew before its sleep
        is void) or ``CLICKS_SECONDS`` after it last did."""
        sleeper = self._sleeper
        listening = sleeper is not None and sleeper.listening
        if listening and not woken and _within(self._clicks_at, now, CLICKS_SECONDS):
            return
        forget = not _within(self._forgot_at, now, FORGET_NONCES_SECONDS)
        announce.announce(now, forget=forget)
        if forget:
            self._forgot_at = now
        cards.claim(now)
        self._clicks_at = now

    def _beat(self, now: datetime) -> None:
        """Record this tick, unless one was recorded less than ``HEARTBEAT_SECONDS`` ago."""
        if _within(self._beat_at, now, HEARTBEAT_SECONDS):
            return
        SchedulerHeartbeat.objects.beat(
            self.owner,
            host=socket.gethostname(),
            pid=os.getpid(),
            started_at=self.started_at,
            now=now,
        )
        self._beat_at = now

    def _sleep_seconds(self, now: datetime | None = None) -> float:
        """Until the next tick, or sooner when something falls due before it (under
        back-pressure: high priority work only); never less than ``MIN_SLEEP_SECONDS``.
        What it read, when it read all, is the next tick's to know (``tick``)."""
        self._known = None
        try:
            moments = dispatch.next_moments(only_high=self._pressed)
        except DatabaseError:
            logger.exception("could not read when work is next due; sleeping a tick")
            self._lost_database = True
            connections.close_all()
            return self.tick_seconds
        if not self._pressed:
            self._known = moments
        due = min((moment for moment in moments if moment is not None), default=None)
        if due is None:
            return self.tick_seconds
        wait = (due - (now or timezone.now())).total_seconds()
        return min(self.tick_seconds, max(MIN_SLEEP_SECONDS, wait))

    def _tick_safely(self) -> bool:
        close_old_connections()
        try:
            if self._lost_database:
                self._give_back_unstarted()
                self._known = None  # what it gave back is due now: claim it at once
            return self.tick()
        except DatabaseError:
            logger.exception("scheduler tick failed; trying again next tick")
            self._lost_database = True
            self._in_flight = None  # a claim may have committed unheard of: count again
            connections.close_all()
            return False

    def _give_back_unstarted(self) -> None:
        """The database answers again after it failed us: hand back what this process
        claimed and no worker started, as a graceful stop does, rather than leave it to
        the lease. Their jobs failed meanwhile, or wait behind a pusher that could not
        read them; a job that does start later finds its runs gone and does nothing,
        and the tick that follows claims them again at once."""
        released = dispatch.release(self.owner)
        self._lost_database = False
        if released:
            logger.info(
                "the database answers again: handed back %d claimed runs no worker had started",
                released,
            )

    # The cluster children ----------------------------------------------------------------

    def _queues(self) -> dict[str, int]:
        """The clusters to run: queue name -> workers."""
        queues = {dispatch.bulk_queue(): int(conf.CLUSTER["workers"])}
        if conf.HIGH_WORKERS > 0:
            queues[dispatch.high_queue()] = conf.HIGH_WORKERS
        return queues

    def _start_clusters(self) -> None:
        for queue, workers in self._queues().items():
            self._start_cluster(queue, workers)

    def _start_cluster(self, queue: str, workers: int) -> None:
        # Never share a connection with a forked child, the listening one included.
        connections.close_all()
        if self._sleeper is not None:
            self._sleeper.disconnect()
        process = multiprocessing.get_context("fork").Process(
            target=_run_cluster,
            args=(os.getpid(), queue, workers),
            name=f"reminders-cluster-{queue}",
        )
        process.start()
        self.clusters[queue] = process
        logger.info("django-q2 cluster %s started (pid %s)", queue, process.pid)

    def _watch_clusters(self) -> None:
        if self._stopping.is_set():
            return
        for queue, workers in self._queues().items():
            process = self.clusters.get(queue)
            if process is None or process.is_alive():
                continue
            logger.error(
                "django-q2 cluster %s exited with %s; starting it again", queue, process.exitcode
            )
            self._start_cluster(queue, workers)

    def _stop_clusters(self) -> None:
        """Ask every cluster to stop at once, wait for them within one grace, then kill
        what is left, each in its own session."""
        processes = list(self.clusters.values())
        for process in processes:
            if process.is_alive() and process.pid is not None:
                os.kill(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + conf.SHUTDOWN_GRACE
        for process in processes:
            process.join(max(0.0, deadline - time.monotonic()))
        for process in processes:
            if process.is_alive() and process.pid is not None:
                logger.error("cluster did not stop in %ss; killing it", conf.SHUTDOWN_GRACE)
                os.killpg(process.pid, signal.SIGKILL)
                process.join(5)
        self.clusters.clear()


def _falls_due(moment: datetime | None, by: datetime) -> bool:
    """Whether work first due at ``moment`` (None: none) is due by ``by``."""
    return moment is not None and moment <= by


def _within(last: datetime | None, now: datetime, seconds: float) -> bool:
    """Whether ``now`` is less than ``seconds`` after ``last`` (a clock moved back since
    ``last`` is not: the work is done again)."""
    return last is not None and last <= now < last + timedelta(seconds=seconds)
