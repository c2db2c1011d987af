"""Deliver claimed runs: reserve the ledger key, send, record the outcome.

``deliver`` is what django-q2 workers execute. It must be safe to execute twice (the
ORM broker is at-least-once) and after any crash, and every row it writes must tell the
truth:

* A run is started only by the holder of the claim's token, and starting it swaps that
  token for a fresh one. Every later write to the run is guarded by that token, so a
  redelivered job, a stale one from an earlier claim, or a worker whose lease ran out
  and was taken over changes nothing.
* A message's ledger key is reserved (``sending``) and committed just before its send,
  so a crash leaves at most the message in hand in doubt; ``sent`` and the run's
  completion are committed together afterwards, in the transaction that reserves the
  next message's key (or ends the job), so that a message costs one transaction: what
  is in doubt after a crash is still only the message sent last. Where the provider
  drops an identical body sent again, a batch of keys is reserved at once and recorded
  at once: a crash then leaves the batch in doubt, and the re-send below settles it.
* In doubt is not failed. A ``sending`` row found when a run starts (its worker died
  mid-send), or an answer that leaves delivery open (a read timeout, a 5xx, an errcode
  we do not know: ``InDoubtSendError``), may have delivered the message. The body is
  sent again, byte for byte, only where the provider drops identical bodies
  (``supports_duplicate_check``, asked message by message: ``BaseSender.deduplicates``)
  and only inside that window counted from the key's first send, or where the channel
  accepts a possible duplicate (``retry_in_doubt``); otherwise the run and the row
  become ``unknown`` and ``run_unknown`` tells ops. A failure that only proves nothing
  was delivered (refused connection, busy, a recipient error) is ``failed``.
* A worker's death is not a provider failure: the claim that takes over a dead
  worker's run gives the attempt back, and a death while a send was in hand is counted
  apart (``crashes``). A run whose message keeps killing its worker is given up as
  ``unknown`` after ``REMINDERS_MAX_WORKER_DEATHS``.
* One run never poisons its job. Each run's message is prepared (its builder called)
  in a savepoint of its own, so a builder's database error fails that run alone
  (PostgreSQL would abort the job's whole transaction). A job records that it took
  its runs (``JobTake``, one row) in a commit of its own before it prepares any, and
  deletes it as it starts them: runs still ``queued`` under such a row when their lease
  runs out were taken by a job that ended before starting them (a builder that hangs
  until django-q2's timeout kills the worker). The claim that takes them over counts
  each (``job_failures``) and sends it in a job of its own; a start clears the count,
  and after ``REMINDERS_MAX_JOB_FAILURES`` such jobs in a row it is failed without
  being prepared again, and ops told. A run that only waited in a long queue past its
  lease (a burst, a database back from an outage) was never taken: not counted.
* A message in doubt is sent again only if the provider's window is still open when
  it leaves, after its rate-limit wait, not only when its job started.
* A job that loses the database (a restart, a failover) does not leave its runs to
  their lease: as soon as the database answers again (``reminders.engine.outage``), while its
  runs are surely still its own, it gives back those it never started, records what
  it sent and the failures it met, and puts every run it did not send back in line,
  its key's reservation undone (a send that left always has its ``outcome``). Only if
  the database stays away longer than that do its runs wait for their lease.
* A stale holder writes nothing the new holder owns: the ledger rows a job hands back
  or marks throttled change only while its run is still held under its lease (the
  run's row locked meanwhile), and a closed run keeps its lease token in memory until
  the close commits. If the transaction that ends a job fails, the last batch's
  record is tried again on its own: a delivered message left ``sending`` would be
  taken for a crash, and where it cannot be sent again, end ``unknown``.
* A key belongs to one run at a time. A key whose row never reached ``sent`` passes to
  the run of a re-planned occurrence; one that did makes that run a ``skipped``
  duplicate. A task that fires at most once a day never sends twice on one local day,
  whatever its keys (a schedule changed from twice a day to daily); a run made on
  request (run now) is an extra message, outside that rule.
* A run is never sent after its deadline (its kind's ``send_by`` and lateness): a key
  never tried or ``failed`` is left as it is and the run ends ``expired``, as does a run
  whose next retry would come too late. A key in doubt is decided as above, never
  expired: that would say the message was not sent.
* A paused task sends nothing, even runs already claimed; they wait without spending an
  attempt. A job stops taking new sends when its time is nearly up and hands the rest
  back, and renews its lease while it makes progress.
* A bulk run (priority ``normal`` or ``low``) never books the share of a paced
  channel kept for ``high`` runs (``REMINDERS_HIGH_RATE_SHARE``) further ahead than
  ``REMINDERS_RATE_BORROW_SECONDS``, nor a high run bulk's: each class's sends fit its
  share, or the other's idle slots just ahead (``reminders.ratelimit``).
* Error texts reach rows and logs only after the sender's secrets are masked here,
  where every send error passes.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any

from django.db import DatabaseError, IntegrityError, connection, transaction
from django.db.models import Case, F, PositiveSmallIntegerField, Q, Value, When
from django.utils import timezone

from .. import kinds, ratelimit, signals
from ..conf import settings as conf
from ..exceptions import (
    BuilderFailed,
    ConfigurationSendError,
    InDoubtSendError,
    PermanentSendError,
    RemindersError,
    SendError,
    ThrottledSendError,
    UnknownKind,
)
from ..models import EXPIRED_CODE, JobTake, Priority, ScheduledTask, SendLog, TaskRun
from ..schedule import timing
from ..senders import BaseSender, Message, SendResult, get_sender
from ..senders.base import UNLIMITED, Limit, render_body
from . import outage, sql

logger = logging.getLogger(__name__)

LIVE = (*TaskRun.WAITING, *TaskRun.LEASED)
# How long a run waits when its key or its day is in another run's hands right now.
BUSY_WAIT_SECONDS = 5.0


@dataclass
class Job:
    """One started run, the message it is to send, and its ledger row.

    ``ledger`` is unsaved for a key never tried (``fresh``); otherwise it is the row as
    read, whose status and owner (``owner``: the run it belonged to) the reservation
    expects. ``in_doubt`` when an earlier attempt may have delivered this very body.
    """

    run: TaskRun
    ledger: SendLog
    fresh: bool = True
    owner: int | None = None
    in_doubt: bool = False
    sender: BaseSender | None = None  # None if the channel is not configured
    prepared: bool = False  # the sender is ready to send at once
    # What its send came to, once the sender answered: the truth to write even when
    # the database was away at the time (``_settle``).
    outcome: SendResult | SendError | None = None

    @property
    def channel(self) -> str:
        return self.ledger.channel

    @cached_property
    def message(self) -> Message:
        return Message.from_rendered(self.ledger.recipient, self.ledger.body, self.ledger.key)

    @property
    def priority(self) -> str:
        """The run's priority by name (``high``, ``normal``, ``low``)."""
        return Priority.from_rank(self.run.priority)

    @property
    def scope(self) -> str:
        return self.sender.rate_scope if self.sender else self.channel


# A batch on a paced channel whose sends fall this far behind its slots gives the rest
# back: slots are meant to be used when they fall, not late and together with other
# workers' on-time ones.
STALE_SLOT_SECONDS = 1.0


def worker_id() -> str:
    return f"{conf.WORKER_ID}:{os.getpid()}"


@dataclass
class Budget:
    """How long one job may go on starting sends, and its runs' lease.

    django-q2 kills a job at ``Q_CLUSTER['timeout']``; a job stops starting batches
    ``margin`` before that, and hands what is left back. The lease (``start`` stamps it)
    is renewed whenever less than ``margin`` of it is left, so that the runs a job
    still holds are never claimed by another worker while it makes progress. With the
    timeout below the lease (``reminders.E008``) the first limit is the one that bites.
    """

    ends: float  # monotonic
    lease_until: float  # monotonic
    margin: float

    @classmethod
    def begin(cls) -> Budget:
        now = time.monotonic()
        lease = float(conf.LEASE_SECONDS)
        limit = conf.JOB_TIMEOUT or math.inf
        return cls(now + limit, now + lease, margin=0.2 * min(lease, limit))

    def nearly_up(self) -> bool:
        return time.monotonic() > self.ends - self.margin

    def renew(self, jobs: Sequence[Job]) -> None:
        now = time.monotonic()
        if not jobs or self.lease_until - now > self.margin:
            return
        until = timezone.now() + timedelta(seconds=conf.LEASE_SECONDS)
        token = jobs[0].run.lease_token
        TaskRun.objects.filter(pk__in=[job.run.pk for job in jobs], lease_token=token).update(
            lease_expires_at=until
        )
        self.lease_until = now + conf.LEASE_SECONDS


def deliver(token: str, run_ids: Sequence[int], *, now: datetime | None = None) -> int:
    """Start the runs of one claim and send them at their rate-limit slots; returns how
    many were sent. Runs that cannot go soon wait for a later claim, without spending
    an attempt. ``now``: the time the runs start at (default: the clock's).

    Runs go in batches that may leave back to back: one reservation of slots and ledger
    keys, the sends, one record of what was sent. A batch is a whole claim on an
    unlimited channel and usually one message on a busy paced one. What a batch sent is
    recorded in the transaction that reserves the next batch's keys (``_step``), and
    the last batch's when the job ends, with the runs put back and the tasks' last run
    time: one transaction per batch, plus one to start and one to end.
    """
    budget = Budget.begin()
    execution = uuid.uuid4().hex
    taken = False
    try:
        JobTake.objects.take(execution, token, run_ids)
        taken = True
        jobs = start(token, run_ids, now, execution=execution, taken=True)
    except BaseException as exc:
        if _given_back_when_back(exc, budget, token, execution, run_ids, taken=taken):
            return 0
        raise
    if not jobs:
        return 0
    sent = 0
    deferred: list[tuple[Job, float]] = []
    unrecorded: list[tuple[Job, SendResult]] = []
    pending = jobs
    try:
        while pending:
            if budget.nearly_up():
                moment = time.time()
                items = [(job, moment) for job in pending]
                _defer(items, "job_time", "The job's time ran out first.")
                break
            budget.renew(pending)
            batch, rest = _next_batch(pending)
            ready, missed = _step(batch, unrecorded, deferred)
            pending = missed + rest
            done = _send_reserved(ready, deferred)
            sent += len(done)
            unrecorded += done
    except BaseException as exc:
        if _settled_when_back(exc, budget, jobs, deferred):
            return sent
        # What was sent is recorded even so, if the database still answers; else its
        # keys stay ``sending``: in doubt, as after a crash.
        if unrecorded:
            try:
                _record_sent_surely(unrecorded)
            except Exception:
                logger.exception("could not record %d sent messages", len(unrecorded))
        raise
    try:
        _finish(jobs, unrecorded, deferred)
    except DatabaseError as exc:
        if _settled_when_back(exc, budget, jobs, deferred):
            return sent
        logger.warning(
            "could not end the job in one transaction; ending it in parts", exc_info=True
        )
        _finish_apart(jobs, unrecorded, deferred)
    return sent


def _step(
    batch: list[Job], unrecorded: list[tuple[Job, SendResult]], deferred: list[tuple[Job, float]]
) -> tuple[list[tuple[Job, float]], list[Job]]:
    """Reserve the batch's rate-limit slots and ledger keys, and record what the batch
    before it sent (``unrecorded``, emptied), in one transaction committed before any
    of the batch's sends; returns the jobs reserved with their slots, and those that
    just missed this batch (to try again at once). Jobs refused a slot or a key join
    ``deferred``.

    Slots on paced buckets are reserved first, in a transaction of their own (a lost
    deadlock asks it again), as is anything kept in a cache; pauses alone, read from the
    database, are read in this one. A key another run took meanwhile rolls this
    transaction back, and the step is done again the slow way: the record alone, then
    the keys one by one.
    """
    requests = [_limits(job) for job in batch]
    inside = ratelimit.shares_transaction(requests)
    slots = [] if inside else _reserve_slots(requests)
    ready: list[tuple[Job, float]] = []
    try:
        with transaction.atomic():
            if inside:
                slots = _reserve_slots(requests)
            pairs = zip(batch, slots, strict=True)
            ready = [(job, slot.at) for job, slot in pairs if slot.reserved]
            taken, lost = _take_keys([job for job, _ in ready])
            _write_sent(unrecorded)
    except IntegrityError:
        _record_sent(unrecorded)
        taken, lost = _take_keys_one_by_one([job for job, _ in ready])
    unrecorded.clear()
    deferred += [(job, time.time() + BUSY_WAIT_SECONDS) for job in lost]
    # The first request is refused only when it is too far off: it waits for a later
    # claim. The others just missed this batch.
    if not slots[0].reserved:
        deferred.append((batch[0], slots[0].at))
    missed = [job for job, slot in zip(batch[1:], slots[1:], strict=True) if not slot.reserved]
    keyed = {job.run.pk for job in taken}
    return [(job, at) for job, at in ready if job.run.pk in keyed], missed


def _reserve_slots(requests: list[list[Limit]]) -> list[ratelimit.Slot]:
    return ratelimit.reserve(requests, max_wait=conf.RATE_MAX_WAIT, together=True)


def _finish(
    jobs: Sequence[Job], unrecorded: list[tuple[Job, SendResult]], deferred: list[tuple[Job, float]]
) -> None:
    """End the job in one transaction: record the last batch, put back the runs that
    were not sent, and stamp the tasks' last run time."""
    with _recording():
        _write_sent(unrecorded)
        _defer(deferred)
        ScheduledTask.objects.filter(pk__in={job.run.task_id for job in jobs}).update(
            last_run_at=timezone.now()
        )


def _finish_apart(
    jobs: Sequence[Job], unrecorded: list[tuple[Job, SendResult]], deferred: list[tuple[Job, float]]
) -> None:
    """``_finish`` once its one transaction failed (a deadlock, a lost connection): the
    last batch's record first, tried again (``_record_sent_surely``), since a message
    delivered and left ``sending`` would be taken for a crash and, where it cannot be
    sent again, end ``unknown``; then the runs put back and the tasks stamped, each on
    its own (either lost leaves runs to come back after their lease, no more)."""
    _record_sent_surely(unrecorded)
    try:
        _defer(deferred)
    except DatabaseError:
        logger.exception("could not put %d runs back; they wait for their lease", len(deferred))
    try:
        ScheduledTask.objects.filter(pk__in={job.run.task_id for job in jobs}).update(
            last_run_at=timezone.now()
        )
    except DatabaseError:
        logger.exception("could not stamp the tasks' last run time")


# How often the record of messages sent is tried before they are left in doubt, and the
# pause before the first try again (doubled each time).
RECORD_TRIES = 3
RECORD_PAUSE_SECONDS = 0.5


def _record_sent_surely(done: list[tuple[Job, SendResult]]) -> None:
    """``_record_sent``, tried again after a database error: a lost record leaves
    delivered messages ``sending``, as if their worker had died mid-send. Raises the
    last error if every try failed."""
    pause = RECORD_PAUSE_SECONDS
    for attempt in range(1, RECORD_TRIES + 1):
        try:
            _record_sent(done)
            return
        except DatabaseError:
            if attempt == RECORD_TRIES:
                logger.error("could not record %d sent messages; they stay in doubt", len(done))
                raise
            logger.warning("could not record %d sent messages; trying again", len(done))
        if not connection.in_atomic_block:
            connection.close_if_unusable_or_obsolete()  # a broken connection is reopened
        time.sleep(pause)
        pause *= 2


def _next_batch(pending: list[Job]) -> tuple[list[Job], list[Job]]:
    """The jobs, from the first, whose keys may be reserved together; and the rest.

    Only where the provider drops an identical body sent again: a worker that dies
    mid-batch leaves every key of it in doubt, and only there is the re-send that
    settles them safe. Elsewhere a batch is one message, so a crash leaves at most the
    message in hand in doubt.
    """
    batch: list[Job] = []
    room = math.inf
    for job in pending:
        sender = _ready_sender(job)
        shareable = job.prepared and sender is not None and sender.deduplicates(job.message)
        if batch and not shareable:
            break
        batch.append(job)
        # No more can go at one moment than the channel's burst: asking for more slots
        # would only lock more rows.
        room = min(room, _burst(sender))
        if not shareable or len(batch) >= room:
            break
    return batch, pending[len(batch) :]


def _burst(sender: BaseSender | None) -> float:
    """How many sends may go at one moment on the job's channel."""
    rate = sender.channel_rate() if sender else None
    return math.inf if rate is None else rate.burst


def _ready_sender(job: Job) -> BaseSender | None:
    """The job's sender, made ready to send at once (an access token in hand) so that
    the request leaves at its slot. A sender that could not get ready still sends
    through its limits and its channel's pause, and meets the error again there; None
    only when the channel is not configured at all."""
    if job.sender is None:
        try:
            job.sender = get_sender(job.channel)
        except RemindersError:
            return None
    try:
        job.sender.prepare()
        job.prepared = True
    except RemindersError:
        job.prepared = False
    return job.sender


def _limits(job: Job) -> list[Limit]:
    """The buckets the job's send must fit: its sender's, by the run's priority (bulk
    runs leave the channel's high share alone)."""
    if job.sender is None:
        # Still read the channel's pause: nothing goes to a channel told to hold off.
        return [Limit(f"{job.channel}:channel", UNLIMITED)]
    return job.sender.limits(job.message, job.priority)


def _send_reserved(
    ready: list[tuple[Job, float]], deferred: list[tuple[Job, float]]
) -> list[tuple[Job, SendResult]]:
    """Send each reserved message at its slot; returns the sent ones with their replies,
    to record (failures are recorded here). What is not sent joins ``deferred``."""
    if not ready:
        return []
    slots = {job.run.pk: at for job, at in ready}
    jobs = [job for job, _ in ready]
    stale = _stale_after(jobs)
    done: list[tuple[Job, SendResult]] = []
    for index, job in enumerate(jobs):
        now = time.time()
        if now - slots[job.run.pk] > stale:
            _hand_back(jobs[index:], deferred, now)
            break
        # The ledger rows first, the wait last: the request then leaves at its slot, not
        # a database round trip after it (late sends bunch up at the provider).
        time.sleep(max(0.0, slots[job.run.pk] - now))
        if job.in_doubt and not _resend_is_safe(job.ledger, timezone.now()):
            _window_passed(job)
            continue
        outcome = job.outcome = _call(job)
        if isinstance(outcome, SendResult):
            done.append((job, outcome))
        elif isinstance(outcome, ThrottledSendError):
            _record_throttled(job, outcome)
            until = ratelimit.pause(f"{job.scope}:channel", outcome.pause_seconds, outcome.message)
            deferred.append((job, until.timestamp()))
            _hand_back(jobs[index + 1 :], deferred, until.timestamp())
            break
        else:
            _record_failure(job, outcome)
    return done


def _window_passed(job: Job) -> None:
    """A message in doubt whose provider's window closed while it waited for its slot:
    the copy would no longer be dropped, so it is not sent; the run is ``unknown``."""
    sender = job.sender
    seconds = sender.duplicate_check_seconds if sender is not None else 0
    with _recording():
        _give_up_in_doubt(
            job.run,
            job.ledger,
            timezone.now(),
            "unknown",
            f"An earlier attempt may have delivered it, and the provider's window for "
            f"dropping a copy ({seconds} s from its first send) passed before it could "
            "be sent again.",
        )


def _stale_after(jobs: Sequence[Job]) -> float:
    """How late the batch's slots may still be used.

    A limit of n per window (a member's 30 a minute) is never exceeded by sends up to
    one interval late (slightly less, here); a channel's pace gets ``STALE_SLOT_SECONDS``.
    With no limit at all, a slot never goes stale. Slow replies (WeCom answering in
    0.2 s, say) then do not cut an unlimited channel's batches short.
    """
    intervals = [
        limit.rate.interval
        for job in jobs
        for limit in _limits(job)
        if limit.rate.per_second < math.inf
    ]
    if not intervals:
        return math.inf
    return max(STALE_SLOT_SECONDS, 0.9 * min(intervals))


def _defer(
    items: Sequence[tuple[Job, float]],
    code: str = "rate_limited",
    message: str = "Waiting for the channel's rate limit.",
) -> None:
    """Put runs that were started but not sent back in line, the attempt not spent."""
    if not items:
        return
    until = datetime.fromtimestamp(min(at for _, at in items), tz=UTC)
    _wait([job.run for job, _ in items], until, code, message)
    logger.info("deferred %d runs until %s (%s)", len(items), until.isoformat(), code)


def _wait(runs: Sequence[TaskRun], until: datetime, code: str, message: str) -> None:
    """Started runs go back to waiting until ``until`` without spending their attempt;
    only while this worker still holds them."""
    TaskRun.objects.filter(
        pk__in=[run.pk for run in runs], lease_token__in={run.lease_token for run in runs}
    ).update(
        status=Case(
            When(attempts__lte=1, then=Value(TaskRun.Status.SCHEDULED)),
            default=Value(TaskRun.Status.RETRYING),
        ),
        attempts=Case(
            When(attempts__gt=0, then=F("attempts") - 1),
            default=F("attempts"),
            output_field=PositiveSmallIntegerField(),
        ),
        next_attempt_at=until,
        error_code=code,
        error_message=message,
        lease_owner="",
        lease_token="",
        lease_expires_at=None,
    )


# When the database was away ------------------------------------------------------------

AWAY_CODE = "database_away"


def _given_back_when_back(
    exc: BaseException,
    budget: Budget,
    token: str,
    execution: str,
    run_ids: Sequence[int],
    *,
    taken: bool,
) -> bool:
    """A job that lost the database before it started its runs sent nothing: once the
    database answers again it gives back those still ``queued`` under the claim's
    token, and those its start took (``execution``) if that start committed though its
    answer was lost, for the next claim to take at once rather than after their lease;
    its ``JobTake``, if ``taken``, goes too: the database failed the job, not its runs.
    False when ``exc`` is not the database going away, or it did not answer in the
    job's time."""

    def give_back() -> None:
        runs = TaskRun.objects.filter(pk__in=run_ids)
        with transaction.atomic():
            if taken:
                JobTake.objects.filter(job=execution).delete()
            given = runs.filter(lease_token=token).give_back()
            started = list(runs.filter(lease_token=execution).only("pk", "lease_token"))
            _wait(started, timezone.now(), AWAY_CODE, "The database went away as it started.")
        logger.info(
            "the database answers again: gave back %d runs never started", given + len(started)
        )

    return _when_back(exc, budget, give_back)


def _settled_when_back(
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
    """Write in one transaction what the job did with the runs it still holds (``_held``:
    a run recorded already, or taken over, is left alone): ``sent`` what the provider
    took, a failure as its outcome decides, and every other run back in line without
    spending its attempt, its key's reservation undone. A send that left always has its
    ``outcome``, so those others were never sent."""
    later = {job.run.pk: at for job, at in deferred}
    now = time.time()
    with transaction.atomic():
        held = _held(jobs)
        sent: list[tuple[Job, SendResult]] = []
        unsent: list[Job] = []
        for job in held:
            if isinstance(job.outcome, SendResult):
                sent.append((job, job.outcome))
            elif isinstance(job.outcome, SendError) and not isinstance(
                job.outcome, ThrottledSendError
            ):
                _record_failure(job, job.outcome)
            else:
                unsent.append(job)
        _write_sent(sent)
        _unreserve(unsent)
        items = [(job, later.get(job.run.pk, now)) for job in unsent]
        _defer(items, AWAY_CODE, "The database went away before it was sent.")
        ScheduledTask.objects.filter(pk__in={job.run.task_id for job in jobs}).update(
            last_run_at=timezone.now()
        )
    logger.info(
        "the database answers again: recorded %d sent, gave back %d not sent",
        len(sent),
        len(unsent),
    )


def _unreserve(jobs: Sequence[Job]) -> None:
    """Undo the jobs' key reservations, those that reached the database: a fresh key is
    dropped, a known one is ``failed`` again (``unknown`` if an earlier attempt may have
    delivered it). Only rows this very run reserved (``sending`` in its name)."""
    for job in jobs:
        row = SendLog.objects.filter(key=job.ledger.key, run=job.run, status=SendLog.Status.SENDING)
        if job.fresh:
            row.delete()
        else:
            status = SendLog.Status.UNKNOWN if job.in_doubt else SendLog.Status.FAILED
            row.update(status=status, attempts=F("attempts") - 1)


# Starting -------------------------------------------------------------------------------


def start(
    token: str,
    run_ids: Sequence[int],
    now: datetime | None = None,
    *,
    execution: str = "",
    taken: bool = False,
) -> list[Job]:
    """Take the claimed runs that are still ours and decide, from the ledger and the
    task's other runs, which may be sent; finish or put back the others. ``execution``:
    the lease token the started runs take (default: a new one); ``taken``: the job
    recorded its ``JobTake`` under it, which the start deletes."""
    now = now or timezone.now()
    execution = execution or uuid.uuid4().hex
    with transaction.atomic():
        if taken:
            JobTake.objects.filter(job=execution).delete()
        TaskRun.objects.filter(
            pk__in=run_ids, lease_token=token, status=TaskRun.Status.QUEUED
        ).update(
            status=TaskRun.Status.RUNNING,
            lease_token=execution,
            lease_owner=worker_id(),
            lease_expires_at=now + timedelta(seconds=conf.LEASE_SECONDS),
            attempts=F("attempts") + 1,
            # Started: no job lost it since, unless it is to be given up now.
            job_failures=Case(
                When(
                    job_failures__gte=conf.MAX_JOB_FAILURES,
                    then=F("job_failures"),
                ),
                default=Value(0),
                output_field=PositiveSmallIntegerField(),
            ),
            started_at=now,
            finished_at=None,
        )
        # In the order they were claimed: by priority, then by how long they waited.
        runs = list(
            TaskRun.objects.filter(pk__in=run_ids, lease_token=execution)
            .select_related("task")
            .order_by("priority", "next_attempt_at")
        )
        ledger = SendLog.objects.in_bulk([run.ledger_key for run in runs], field_name="key")
        others = Others.read(runs, ledger)
        prepared = (_prepare(run, ledger.get(run.ledger_key), others, now) for run in runs)
        return [job for job in prepared if job is not None]


@dataclass
class Others:
    """What a job's runs must know of other runs: who holds the keys they need, and
    what their tasks' days already had (tasks that fire at most once a day)."""

    holders: dict[int, TaskRun] = field(default_factory=dict)
    same_day: list[TaskRun] = field(default_factory=list)
    # Run pk -> its local day (start, end) in its task's zone as it is now.
    days: dict[int, tuple[datetime, datetime]] = field(default_factory=dict)

    @classmethod
    def read(cls, runs: Sequence[TaskRun], ledger: dict[str, SendLog]) -> Others:
        ours = {run.pk for run in runs}
        held = {row.run_id for row in ledger.values() if row.run_id not in ours}
        holders = TaskRun.objects.in_bulk([pk for pk in held if pk is not None])
        # A run made on request is an extra message: outside the day's rule both ways.
        days = {
            run.pk: timing.local_day(run.occurrence, run.task.timezone)
            for run in runs
            if run.task.keyed_by_day and not run.is_manual
        }
        same_day: list[TaskRun] = []
        if days:
            around = Q()
            for run in runs:
                if run.pk in days:
                    begin, end = days[run.pk]
                    around |= Q(task_id=run.task_id, occurrence__gte=begin, occurrence__lt=end)
            same_day = list(
                TaskRun.objects.filter(around)
                .filter(
                    status__in=(TaskRun.Status.SENT, TaskRun.Status.UNKNOWN, TaskRun.Status.RUNNING)
                )
                .exclude(pk__in=ours)
                .exclude(is_manual=True)
            )
        return cls(holders, same_day, days)

    def day_of(self, run: TaskRun) -> list[TaskRun]:
        """Other runs of ``run``'s task on its local day, for a task that fires at most
        once a day (in the task's zone as it is now)."""
        if run.pk not in self.days:
            return []
        begin, end = self.days[run.pk]
        return [
            other
            for other in self.same_day
            if other.task_id == run.task_id and begin <= other.occurrence < end
        ]


def _prepare(run: TaskRun, row: SendLog | None, others: Others, now: datetime) -> Job | None:
    """Decide whether ``run`` may be sent now and with which ledger row; finish it, or
    put it back to wait, if not."""
    task = run.task
    if task.status == ScheduledTask.Status.PAUSED:
        _wait([run], now, "paused", "The task is paused: the run waits until it is resumed.")
        return None
    if task.status == ScheduledTask.Status.CANCELLED:
        run.close_attempt(TaskRun.Status.CANCELLED, code="cancelled", message="Task cancelled.")
        return None
    if run.job_failures >= conf.MAX_JOB_FAILURES:
        _give_up_lost_jobs(run, row, now)
        return None
    if not _day_is_free(run, others, now):
        return None
    if row is not None and row.run_id != run.pk and not _key_passes(run, row, others, now):
        return None
    if row is None or row.status == SendLog.Status.FAILED:
        if _expired(run, now):
            return None
        # Never delivered: the message as the task says it now (a corrected recipient
        # or text reaches every run not yet sent).
        return _fresh_job(run, row)
    if row.status == SendLog.Status.SENT:
        run.close_attempt(TaskRun.Status.SENT)  # recorded by a worker whose lease ran out
        return None
    return _in_doubt_job(run, row, now)


JOB_FAILURES_CODE = "job_failures"


def _give_up_lost_jobs(run: TaskRun, row: SendLog | None, now: datetime) -> None:
    """End a run whose jobs kept ending before they started it
    (``REMINDERS_MAX_JOB_FAILURES``), without preparing it again: what broke them is
    most likely its own message (a builder that hangs until the job's timeout, or
    kills its worker). ``failed``, and ops told, unless its own key is in doubt
    (``unknown``) or was sent."""
    message = (
        f"Stopped after the jobs that held it ended before starting it, "
        f"{run.job_failures} in a row (failed, timed out or lost with their worker): "
        "preparing its message, its builder above all, may be what breaks them."
    )
    if row is not None and row.run_id == run.pk:
        if row.status == SendLog.Status.SENT:
            run.close_attempt(TaskRun.Status.SENT)
            return
        if row.status in (SendLog.Status.SENDING, SendLog.Status.UNKNOWN):
            _give_up_in_doubt(run, row, now, JOB_FAILURES_CODE, message)
            return
    error = PermanentSendError(message, code=JOB_FAILURES_CODE)
    logger.error("run %s: %s", run.pk, message)
    if run.close_attempt(TaskRun.Status.FAILED, code=JOB_FAILURES_CODE, message=message, now=now):
        signals.after_commit(
            signals.task_error,
            ScheduledTask,
            task=run.task,
            code=JOB_FAILURES_CODE,
            message=message,
        )
        signals.after_commit(signals.run_failed, TaskRun, run=run, error=error)


def _day_is_free(run: TaskRun, others: Others, now: datetime) -> bool:
    """False (and the run finished or put back) when its task already sent, or may
    have sent, on the run's local day under another key, or is sending right now."""
    day = others.day_of(run)
    done = [o for o in day if o.status != TaskRun.Status.RUNNING]
    if done:
        first = done[0]
        run.close_attempt(
            TaskRun.Status.SKIPPED,
            code="duplicate",
            message=f"Run {first.pk} of this task was {first.status} on the same local day.",
        )
        return False
    # Two runs of one day starting at once: the older one goes first.
    if any(o.pk < run.pk for o in day):
        until = now + timedelta(seconds=BUSY_WAIT_SECONDS)
        _wait([run], until, "day_busy", "Another run of this task's day is being sent.")
        return False
    return True


def _expired(run: TaskRun, now: datetime) -> bool:
    """True, and the run ended ``expired``, when its deadline has passed: a message
    never delivered is not sent late. Its ledger key is left as it is."""
    if run.deadline is None or now <= run.deadline:
        return False
    _expire(run, f"Not sent by its deadline, {run.deadline.isoformat()}.", now)
    return True


def _expire(run: TaskRun, message: str, now: datetime) -> bool:
    """End the attempt in hand as ``expired`` and tell ops, while the run is ours."""
    if not run.close_attempt(TaskRun.Status.EXPIRED, code=EXPIRED_CODE, message=message, now=now):
        return False
    signals.after_commit(signals.run_expired, TaskRun, run=run)
    return True


def _key_passes(run: TaskRun, row: SendLog, others: Others, now: datetime) -> bool:
    """Whether the key held by another run's row passes to ``run`` (a re-planned
    occurrence): only once that run is finished, and only if its row never reached
    ``sent`` nor ended in doubt. Otherwise ``run`` waits or is a skipped duplicate."""
    holder = others.holders.get(row.run_id) if row.run_id is not None else None
    if holder is not None and holder.status in LIVE:
        until = holder.next_attempt_at or holder.lease_expires_at or now
        until = min(max(until, now + timedelta(seconds=1)), now + timedelta(minutes=15))
        _wait([run], until, "key_busy", f"Key {row.key} is in use by run {holder.pk}.")
        return False
    if row.status in (SendLog.Status.SENT, SendLog.Status.UNKNOWN):
        what = "sent" if row.status == SendLog.Status.SENT else "in doubt (retry that run)"
        run.close_attempt(
            TaskRun.Status.SKIPPED,
            code="duplicate",
            message=f"Key {row.key} was {what} by run {row.run_id}.",
        )
        return False
    return True


def _fresh_job(run: TaskRun, row: SendLog | None) -> Job | None:
    task = run.task
    try:
        # In a savepoint of its own: a builder's database error rolls back its work
        # alone, not the job's transaction (PostgreSQL aborts it until a rollback).
        with transaction.atomic():
            content = kinds.render(task, run)
    except Exception as exc:  # a CRM's builder may raise anything: it fails this run only
        _render_failed(run, exc)
        return None
    body = render_body(content.msgtype, content.body)
    if row is None:
        ledger = SendLog(
            key=run.ledger_key,
            task=task,
            run=run,
            recipient=task.recipient,
            channel=task.channel,
            body=body,
        )
        return Job(run, ledger)
    owner = row.run_id
    row.run, row.task, row.body = run, task, body
    row.recipient, row.channel = task.recipient, task.channel
    return Job(run, row, fresh=False, owner=owner)


def _in_doubt_job(run: TaskRun, row: SendLog, now: datetime) -> Job | None:
    """A row ``sending`` or ``unknown``: an earlier attempt may have delivered it."""
    if row.status == SendLog.Status.SENDING and row.run_id == run.pk:
        # Our own reservation never recorded: the worker died with the send in hand.
        run.crashes += 1
        TaskRun.objects.filter(pk=run.pk, lease_token=run.lease_token).update(
            crashes=F("crashes") + 1
        )
        if run.crashes >= conf.MAX_WORKER_DEATHS:
            _give_up_in_doubt(
                run,
                row,
                now,
                "worker_died",
                f"Stopped after {run.crashes} workers died sending it; the provider may "
                "or may not have it.",
            )
            return None
    if _resend_is_safe(row, now):
        # The same bytes again: the provider drops them if the first one arrived.
        return Job(run, row, fresh=False, owner=row.run_id, in_doubt=True)
    _give_up_in_doubt(
        run,
        row,
        now,
        "unknown",
        "An earlier attempt may have delivered it, and sending again could deliver it twice.",
    )
    return None


def _give_up_in_doubt(run: TaskRun, row: SendLog, now: datetime, code: str, message: str) -> None:
    """End the run ``unknown`` and its key with it, and tell ops; only while the run is
    still ours (call it in a transaction: both or neither)."""
    if not run.close_attempt(TaskRun.Status.UNKNOWN, code=code, message=message):
        return
    SendLog.objects.filter(pk=row.pk).exclude(status=SendLog.Status.SENT).update(
        status=SendLog.Status.UNKNOWN, run=run, updated_at=now
    )
    signals.after_commit(signals.run_unknown, TaskRun, run=run)


def _render_failed(run: TaskRun, exc: Exception) -> None:
    code = "kind" if isinstance(exc, UnknownKind) else "render"
    # A builder's own bug (what it raised, the cause of BuilderFailed) gets its traceback.
    unexpected = exc.__cause__ if isinstance(exc, BuilderFailed) else exc
    if unexpected is not None and not isinstance(unexpected, RemindersError):
        logger.exception("task %s: rendering its message failed", run.task_id)
    error = PermanentSendError(f"{type(exc).__name__}: {exc}", code=code)
    if run.close_attempt(TaskRun.Status.FAILED, code=code, message=error.message):
        signals.after_commit(
            signals.task_error, ScheduledTask, task=run.task, code=code, message=error.message
        )
        signals.after_commit(signals.run_failed, TaskRun, run=run, error=error)


def _resend_is_safe(row: SendLog, now: datetime) -> bool:
    """Only where the provider drops an identical body inside its window, counted from
    the key's first reservation (the earliest its first send can have left)."""
    try:
        sender = get_sender(row.channel)
    except RemindersError:
        return False
    if not sender.resends(Message.from_rendered(row.recipient, row.body, row.key)):
        return False
    window = timedelta(seconds=sender.duplicate_check_seconds)
    return sender.retry_in_doubt or now - row.created_at < window


# Reserving ------------------------------------------------------------------------------


def reserve(jobs: Sequence[Job]) -> tuple[list[Job], list[Job]]:
    """Mark the jobs' keys ``sending`` and commit, right before their sends; returns
    the jobs whose key is now theirs, in order, and those whose key another run took
    meanwhile (they wait and are decided again)."""
    try:
        with transaction.atomic():
            return _take_keys(jobs)
    except IntegrityError:
        return _take_keys_one_by_one(jobs)


def _take_keys_one_by_one(jobs: Sequence[Job]) -> tuple[list[Job], list[Job]]:
    """``reserve`` once a key of the jobs proved taken by another run (a schedule moved
    within its day): each key on its own, so that the others still go."""
    lost = {job.run.pk for job in jobs if job.fresh and not _insert(job)}
    lost.update(job.run.pk for job in jobs if not job.fresh and not _mark_sending(job))
    return _split(jobs, lost)


def _take_keys(jobs: Sequence[Job]) -> tuple[list[Job], list[Job]]:
    """``reserve`` in the caller's transaction: the fresh keys in one INSERT, which
    raises ``IntegrityError`` if another run took one meanwhile (the caller rolls back),
    then the known rows, each only as it was read."""
    fresh = [job.ledger for job in jobs if job.fresh]
    for row in fresh:
        row.attempts = 1
    sql.insert(fresh)
    lost = {job.run.pk for job in jobs if not job.fresh and not _mark_sending(job)}
    return _split(jobs, lost)


def _split(jobs: Sequence[Job], lost: set[int]) -> tuple[list[Job], list[Job]]:
    return (
        [job for job in jobs if job.run.pk not in lost],
        [job for job in jobs if job.run.pk in lost],
    )


def _insert(job: Job) -> bool:
    try:
        with transaction.atomic():
            job.ledger.save(force_insert=True)
    except IntegrityError:
        return False
    return True


def _mark_sending(job: Job) -> bool:
    """Take a known row for this send: only as it was read (status and owner), so two
    runs never both take one key. It passes to this run with the body it sends."""
    row = job.ledger
    return bool(
        SendLog.objects.filter(pk=row.pk, status=row.status, run_id=job.owner).update(
            status=SendLog.Status.SENDING,
            run=job.run,
            task=job.run.task,
            recipient=row.recipient,
            channel=row.channel,
            body=row.body,
            attempts=F("attempts") + 1,
            updated_at=timezone.now(),
        )
    )


def _hand_back(jobs: Sequence[Job], deferred: list[tuple[Job, float]], until: float) -> None:
    """Undo the reservation of keys that will not be sent now; their runs wait for a
    later claim. A fresh key is dropped; a known one is ``failed`` again, or
    ``unknown`` if an earlier attempt may have delivered it."""
    if not jobs:
        return
    with transaction.atomic():
        held = _held(jobs)
        fresh = [job.ledger for job in held if job.fresh]
        _known_pks(fresh)
        SendLog.objects.filter(
            pk__in=[row.pk for row in fresh], status=SendLog.Status.SENDING
        ).delete()
        for job in held:
            if not job.fresh:
                status = SendLog.Status.UNKNOWN if job.in_doubt else SendLog.Status.FAILED
                SendLog.objects.filter(pk=job.ledger.pk, status=SendLog.Status.SENDING).update(
                    status=status, attempts=F("attempts") - 1
                )
    deferred.extend((job, until) for job in jobs)


def _held(jobs: Sequence[Job]) -> list[Job]:
    """The jobs whose run this worker still holds, their rows locked until the
    transaction ends (where the database locks rows), so that no claim takes one over
    while its ledger row is changed: a stale holder never touches the key of the run's
    new holder, which may be sending it right now."""
    tokens = {job.run.lease_token for job in jobs}
    rows = TaskRun.objects.filter(pk__in=[job.run.pk for job in jobs], lease_token__in=tokens)
    if connection.features.has_select_for_update:
        rows = rows.select_for_update()
    ours = set(rows.values_list("pk", flat=True))
    return [job for job in jobs if job.run.pk in ours]


# Sending --------------------------------------------------------------------------------


def _call(job: Job) -> SendResult | SendError:
    """Hand one reserved message to its sender; the reply, or the error to record with
    the sender's secrets masked (the one place every send error passes)."""
    sender = job.sender
    try:
        if sender is None:
            sender = get_sender(job.channel)
        return sender.send(job.message)
    except SendError as exc:
        error = exc
    except RemindersError as exc:  # a channel that is not configured
        error = ConfigurationSendError(str(exc), code="channel")
    except Exception as exc:
        # A sender must raise SendError; anything else is a bug, and nothing says the
        # request did not leave: in doubt.
        text = traceback.format_exc()
        logger.error(
            "sender %r raised an unexpected error\n%s",
            job.channel,
            sender.redact(text) if sender else text,
        )
        error = InDoubtSendError(f"{type(exc).__name__}: {exc}", code="exception")
    if sender is not None:
        error.message = sender.redact(error.message)
        error.args = (error.message,)
    return error


def _record_throttled(job: Job, error: ThrottledSendError) -> None:
    """The provider refused the message as too fast: the key may be sent again later,
    and the run waits without spending its attempt."""
    status = SendLog.Status.UNKNOWN if job.in_doubt else SendLog.Status.FAILED
    with transaction.atomic():
        if not _held([job]):
            logger.warning("run %s: taken over before its throttled reply was recorded", job.run.pk)
            return
        SendLog.objects.filter(pk=job.ledger.pk, status=SendLog.Status.SENDING).update(
            status=status,
            reply_code=error.code[:64],
            error_message=error.message,
            updated_at=timezone.now(),
        )


@contextmanager
def _recording() -> Iterator[None]:
    """The transaction that records an outcome.

    On PostgreSQL it commits without waiting for the WAL flush: the reservation before
    the send is durable, so a record lost in a server crash leaves the row ``sending``,
    the same in-doubt state as a worker crash, handled the same way; runs put back to
    wait that are lost so are still ``running`` under a lease, and are claimed again
    when it expires, as a dead worker's. A record that shares the next reservation's
    transaction is durable with it, at no cost of its own.
    """
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL synchronous_commit TO OFF")
        yield


def _record_sent(done: list[tuple[Job, SendResult]]) -> None:
    """Mark a batch's sent keys and runs, in one transaction.

    Replies that agree share one UPDATE, in which only the provider's message ids differ
    row by row (a ``bulk_update`` of every field costs more Python than the sends). The
    ledger says ``sent`` whatever happened to the runs meanwhile: it is what happened.
    """
    if not done:
        return
    with _recording():
        _write_sent(done)


def _write_sent(done: Sequence[tuple[Job, SendResult]]) -> None:
    """``_record_sent`` in the caller's transaction."""
    if not done:
        return
    now = timezone.now()
    replies: dict[str, list[tuple[SendLog, SendResult]]] = {}
    for job, result in done:
        job.ledger.provider_message_id = result.message_id[:128]
        reply = json.dumps([result.code, result.detail], sort_keys=True)
        replies.setdefault(reply, []).append((job.ledger, result))
    _known_pks([job.ledger for job, _ in done])
    for group in replies.values():
        first, result = group[0]
        values: dict[str, Any] = {
            "status": SendLog.Status.SENT,
            "provider_message_id": first.provider_message_id,
            "reply_code": result.code[:64],
            "reply_detail": result.detail,
            "error_message": "",
            "sent_at": now,
            "updated_at": now,
        }
        pks = [row.pk for row, _ in group]
        if len({row.provider_message_id for row, _ in group}) == 1:
            sql.update(SendLog, pks, values)  # a message of its own: the usual case
            continue
        values["provider_message_id"] = Case(
            *(When(pk=row.pk, then=Value(row.provider_message_id)) for row, _ in group),
            default=F("provider_message_id"),
        )
        SendLog.objects.filter(pk__in=pks).update(**values)
    closed = TaskRun.close_attempts([job.run for job, _ in done], TaskRun.Status.SENT, now)
    if closed < len(done):
        logger.warning(
            "%d sent runs were taken over by another worker before this one recorded "
            "them; the ledger says sent, and their holder will close them",
            len(done) - closed,
        )
    for job, result in done:
        signals.after_commit(signals.run_sent, TaskRun, run=job.run, result=result)


def _known_pks(rows: list[SendLog]) -> None:
    """Where ``bulk_create`` could not return primary keys, read them by key."""
    missing = {row.key: row for row in rows if row.pk is None}
    if missing:
        for key, pk in SendLog.objects.filter(key__in=missing).values_list("key", "pk"):
            missing[key].pk = pk


@dataclass(frozen=True)
class Outcome:
    """How a failed attempt ends: the run's status, its retry time if it waits for
    one, and whether the message may have been delivered (the ledger row's truth)."""

    status: str
    doubt: bool
    code: str
    message: str
    retry_at: datetime | None = None


def _failure_outcome(job: Job, error: SendError, now: datetime) -> Outcome:
    """In doubt (this answer, or an earlier attempt of the same bytes) the run retries
    only where a re-send is safe, else it is ``unknown``; certain failures retry while
    they may pass, else are ``failed``. A retry that would come after the run's
    deadline is not waited for: the run is ``expired`` (``unknown`` if in doubt)."""
    run = job.run
    delays = _retry_delays(run.task)
    doubt = isinstance(error, InDoubtSendError) or (job.in_doubt and not error.refuses_these_bytes)
    resend_safe = job.sender is not None and job.sender.resends(job.message)
    attempts_left = run.attempts <= len(delays)
    will_retry = error.retryable and attempts_left and (resend_safe or not doubt)
    retry_at = now + timedelta(seconds=delays[run.attempts - 1]) if will_retry else None
    if retry_at is not None and run.deadline is not None and retry_at > run.deadline:
        if not doubt:
            message = (
                f"{error.message} ({error.code}); its retry at {retry_at.isoformat()} would "
                f"come after its deadline, {run.deadline.isoformat()}."
            )
            return Outcome(TaskRun.Status.EXPIRED, False, EXPIRED_CODE, message)
        will_retry, retry_at = False, None
    if doubt and job.sender is not None and job.sender.retry_in_doubt and will_retry:
        # The channel accepts a possible duplicate: the key is an ordinary failure.
        doubt = False
    if will_retry:
        status = TaskRun.Status.RETRYING
    else:
        status = TaskRun.Status.UNKNOWN if doubt else TaskRun.Status.FAILED
    return Outcome(status, doubt, error.code, error.message, retry_at)


def _record_failure(job: Job, error: SendError) -> None:
    """Record an attempt that did not end in ``sent``, as ``_failure_outcome`` decides;
    a final outcome tells ops (``run_unknown``, ``run_expired`` or ``run_failed``)."""
    run = job.run
    now = timezone.now()
    outcome = _failure_outcome(job, error, now)
    with _recording():
        if not run.close_attempt(
            outcome.status,
            code=outcome.code,
            message=outcome.message,
            retry_at=outcome.retry_at,
            now=now,
        ):
            # Our lease ran out and another worker holds the run: it decides from the
            # ledger as it finds it, and this attempt's outcome is not ours to write.
            logger.warning("run %s: taken over before its failure was recorded", run.pk)
            return
        SendLog.objects.filter(pk=job.ledger.pk).exclude(status=SendLog.Status.SENT).update(
            status=SendLog.Status.UNKNOWN if outcome.doubt else SendLog.Status.FAILED,
            reply_code=error.code[:64],
            error_message=error.message,
            updated_at=now,
        )
        _tell_failure(run, outcome, error)
    logger.warning(
        "run %s attempt %d %s (%s): %s%s",
        run.pk,
        run.attempts,
        "in doubt" if outcome.doubt else "failed",
        error.code,
        error.message,
        _LOGGED_ENDINGS.get(outcome.status, ""),
    )


_LOGGED_ENDINGS: dict[str, str] = {
    TaskRun.Status.RETRYING: "; will retry",
    TaskRun.Status.EXPIRED: "; its retry would be past its deadline",
}


def _tell_failure(run: TaskRun, outcome: Outcome, error: SendError) -> None:
    if outcome.status == TaskRun.Status.RETRYING:
        ScheduledTask.objects.filter(pk=run.task_id).update(retry_count=F("retry_count") + 1)
    elif outcome.status == TaskRun.Status.UNKNOWN:
        signals.after_commit(signals.run_unknown, TaskRun, run=run)
    elif outcome.status == TaskRun.Status.EXPIRED:
        signals.after_commit(signals.run_expired, TaskRun, run=run)
    else:
        signals.after_commit(signals.run_failed, TaskRun, run=run, error=error)


def _retry_delays(task: ScheduledTask) -> list[int]:
    """The task's kind's retry delays, or ``REMINDERS_RETRY_DELAYS``."""
    try:
        own = kinds.policy(task.kind).retry_delays
    except UnknownKind:
        own = ()
    return list(own) or conf.RETRY_DELAYS
