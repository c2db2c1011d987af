"""A job that loses the database (a restart, a failover) does not leave its runs to
their lease: as soon as the database answers again (``reminders.engine.outage``), while
its runs are surely still its own, it gives back those it never started, records what
it sent and the failures it met, and puts every run it did not send back in line, its
key's reservation undone.

Invariants: a send that left always has its ``outcome`` (``Job.outcome``), so a run
without one was never sent, and its key may be sent again without doubt. Only runs the
job still holds are written (``held``): one recorded already, or taken over, is left
alone. The wait is bounded by the job's time and its lease; only if the database stays
away longer than that do its runs wait for their lease, as after a crash. A hand-back
locks the runs before it deletes the job's take (``JobTake``), as a claim taking them
over does: the other way round, the two would wait for each other forever.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from django.db import DatabaseError, transaction
from django.utils import timezone

from ..exceptions import SendError, ThrottledSendError
from ..models import JobTake, ScheduledTask, TaskRun
from ..senders import SendResult
from . import outage
from .jobs import Budget, Job, defer, held, logger, tried, wait
from .records import record_failure, write_sent
from .reservations import unreserve
from .starting import BuilderBrokeConnection

AWAY_CODE = "database_away"


def given_back_when_back(
    exc: BaseException,
    budget: Budget,
    token: str,
    execution: str,
    run_ids: Sequence[int],
) -> bool:
    """A job that lost the database before it started its runs sent nothing: once the
    database answers again it gives back those still ``queued`` under the claim's
    token, and those its start took (``execution``) if that start committed though its
    answer was lost, for the next claim to take at once rather than after their lease;
    its ``JobTake`` goes before they are given back (after they are locked: the runs,
    then the take, in every transaction), if its write committed though its answer was
    lost too: the database failed the job, not its runs, which are not counted. Unless
    a builder broke the connection (``BuilderBrokeConnection``): that job is lost as one
    killed at its timeout, and its runs are counted as they are given back
    (``RunQuerySet.give_back``). False when ``exc`` is not the database going away, or
    it did not answer in the job's time."""
    lost = isinstance(exc, BuilderBrokeConnection)

    def give_back() -> None:
        runs = TaskRun.objects.filter(pk__in=run_ids)
        with transaction.atomic():
            # The runs, then the take, as every transaction that locks both (a claim
            # taking them over, a start, a pull), or two wait for each other forever.
            list(runs.filter(lease_token__in=(token, execution)).select_for_update().values("pk"))
            if not lost:
                JobTake.objects.filter(job=execution).delete()
            given = runs.filter(lease_token=token).give_back()
            started = list(runs.filter(lease_token=execution).only("pk", "lease_token"))
            wait(started, timezone.now(), AWAY_CODE, "The database went away as it started.")
        logger.info(
            "the database answers again: gave back %d runs never started", given + len(started)
        )

    return _when_back(exc, budget, give_back)


def settled_when_back(
    exc: BaseException, budget: Budget, jobs: Sequence[Job], deferred: list[tuple[Job, float]]
) -> bool:
    """A job that lost the database mid-way still knows what it did: once the database
    answers again it writes it (``_settle``), for its runs to go on at once rather than
    after their lease. False when ``exc`` is not the database going away, or it did not
    answer in the job's time (the runs then wait for their lease, as after a crash)."""
    return _when_back(exc, budget, lambda: _settle(jobs, deferred))


def _when_back(exc: BaseException, budget: Budget, write: Callable[[], None]) -> bool:
    """Wait for the database to answer again, while the job's runs are surely still its
    own (its lease) and django-q2 lets it run (its time), then ``write``; True once it
    is written."""
    if not outage.is_away(exc):
        return False
    logger.warning("the database failed the job (%s); it writes what it did once it answers", exc)
    deadline = min(budget.ends, budget.lease_until) - budget.margin
    while outage.wait_until_answers(deadline):
        try:
            write()
        except DatabaseError as again:
            if not outage.is_away(again):
                logger.exception("could not write what the job did once the database answered")
                return False
            time.sleep(outage.AWAY_POLL_SECONDS)
            continue
        return True
    logger.error("the database did not answer in the job's time; its runs wait for their lease")
    return False


def _settle(jobs: Sequence[Job], deferred: Sequence[tuple[Job, float]]) -> None:
    """Write in one transaction what the job did with the runs it still holds (``held``:
    a run recorded already, or taken over, is left alone): ``sent`` what the provider
    took, a failure as its outcome decides, and every other run back in line without
    spending its attempt, its key's reservation undone. A send that left always has its
    ``outcome``, so those others were never sent."""
    later = {job.run.pk: at for job, at in deferred}
    now = time.time()
    with transaction.atomic():
        ours = held(jobs)
        sent: list[tuple[Job, SendResult]] = []
        unsent: list[Job] = []
        for job in ours:
            if isinstance(job.outcome, SendResult):
                sent.append((job, job.outcome))
            elif isinstance(job.outcome, SendError) and not isinstance(
                job.outcome, ThrottledSendError
            ):
                record_failure(job, job.outcome)
            else:
                unsent.append(job)
        write_sent(sent)
        unreserve(unsent)
        items = [(job, later.get(job.run.pk, now)) for job in unsent]
        defer(items, AWAY_CODE, "The database went away before it was sent.")
        ScheduledTask.objects.ran(tried(jobs), timezone.now())
    logger.info(
        "the database answers again: recorded %d sent, gave back %d not sent",
        len(sent),
        len(unsent),
    )
