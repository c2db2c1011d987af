"""One scheduler and its workers in this process, on a clock the test moves: the whole
pipeline as ``run_reminders`` runs it, a tick at a time, for the model-based test.

``Pipeline.tick`` is ``ReminderWorker.tick`` (plan, expire, report, settle digests,
announce clicks, queue card updates, claim) and then the jobs it queued, as django-q2's
workers would run them. A job whose worker died (``WorkerDied``, from the faithful
sender) is gone with it: its runs wait for their lease to end, as after a kill.
``Pipeline.advance`` moves the clock forward, ticking at every moment something falls
due on the way (a run, a retry, a lease ending) and at least every ``STEP``, as a
scheduler that never stopped would. ``abandon`` is a worker that dies after taking its
runs, before or after reserving their ledger keys.

The clock is time-machine's, frozen between moves (``tick=False``): what the engine
reads (``timezone.now()``, ``time.time()``) is the moment the test chose.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import time_machine
from django.db.models import Min
from django.test import TestCase
from django.utils import timezone
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from reminders.conf import settings as conf
from reminders.engine import cards, dispatch
from reminders.engine.delivery import deliver, reserve, start
from reminders.engine.worker import ReminderWorker
from reminders.models import TaskRun
from tests.support.faithful import WorkerDied

# The longest the simulated scheduler sleeps between two ticks.
STEP = timedelta(hours=1)
# Ticks of one ``advance`` at most: beyond, the clock jumps (the scheduler was away).
MAX_TICKS = 400


class Pipeline:
    def __init__(self, start_at: datetime) -> None:
        self._travel = time_machine.travel(start_at, tick=False)
        self._clock = self._travel.start()
        self.worker = ReminderWorker(with_cluster=False)
        self.ticks = 0

    def stop(self) -> None:
        self._travel.stop()

    @property
    def now(self) -> datetime:
        return timezone.now()

    def move_to(self, moment: datetime) -> None:
        assert moment >= self.now, "the clock only moves forward"
        self._clock.move_to(moment)

    def tick(self) -> None:
        with TestCase.captureOnCommitCallbacks(execute=True):
            self.worker.tick(self.now)
            self._run_jobs()
        self.ticks += 1

    def advance(self, by: timedelta) -> None:
        target = self.now + by
        for _ in range(MAX_TICKS):
            moment = min(self._next_event(), target)
            self.move_to(max(moment, self.now))
            self.tick()
            if moment >= target:
                return
        self.move_to(target)
        self.tick()

    def abandon(self, *, reserved: bool) -> list[int]:
        """A worker claims what is due, starts it and dies: before any send, or with its
        ledger keys reserved (``sending``), nothing delivered. The claim's job is lost."""
        with TestCase.captureOnCommitCallbacks(execute=True):
            claim = dispatch.claim("doomed", 50, self.now)
            OrmQ.objects.all().delete()
            jobs = start(claim.token, claim.run_ids) if claim.run_ids else []
            if jobs and reserved:
                reserve(jobs)
        return list(claim.run_ids)

    def _run_jobs(self) -> None:
        for row in list(OrmQ.objects.order_by("id")):
            job = SignedPackage.loads(row.payload)
            try:
                if job["func"] == cards.UPDATE:
                    cards.update(*job["args"], **job["kwargs"])
                else:
                    deliver(*job["args"], **job["kwargs"])
            except WorkerDied:
                pass  # the job went with its worker
            finally:
                row.delete()

    def _next_event(self) -> datetime:
        """The next moment a scheduler would wake for: something due, a lease ending,
        or its longest sleep; never before a second from now."""
        leases = TaskRun.objects.filter(status__in=TaskRun.LEASED).aggregate(
            at=Min("lease_expires_at")
        )["at"]
        moments = [dispatch.next_due(), leases, self.now + STEP]
        soonest = min(moment for moment in moments if moment is not None)
        return max(soonest, self.now + timedelta(seconds=conf.TICK_SECONDS))
