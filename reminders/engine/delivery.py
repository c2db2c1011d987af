"""Deliver claimed runs: reserve the ledger key, send, record the outcome.

``deliver`` is what django-q2 workers execute (``reminders.engine.delivery.deliver``, the
dotted path jobs already queued name). It must be safe to execute twice (the ORM
broker is at-least-once) and after any crash, and every row it writes must tell the
truth. A job's pieces have a module each, every one stating the invariants it keeps;
each imports only those above it in this list:

* ``jobs``: a started run and its message (``Job``), the job's time and its lease
  (``Budget``), putting started runs back in line;
* ``retries``: what a failed or in-doubt attempt comes to, and when a message in doubt
  may be sent again;
* ``reservations``: a message's ledger key, reserved before its send and handed back
  when it is not sent after all;
* ``records``: writing what a send came to;
* ``starting``: which of a claim's runs may be sent, with which ledger row;
* ``sending``: batches, their rate-limit buckets, and the sends of one batch at its
  slots;
* ``job_outage``: what a job that lost the database writes once it answers;
* this module: the job itself, batch after batch.

Invariants of the job as a whole:

* A message's ledger key is reserved (``sending``) and committed just before its send,
  so a crash leaves at most the message in hand in doubt; ``sent`` and the run's
  completion are committed together afterwards, in the transaction that reserves the
  next message's key (or ends the job), so that a message costs one transaction: what
  is in doubt after a crash is still only the message sent last.
* A job records that it took its runs (``JobTake``, one row) in a commit of its own
  before it prepares any (``reminders.engine.starting`` says why).
* A job stops taking new sends when its time is nearly up and hands the rest back, and
  renews its lease while it makes progress.
* If the transaction that ends a job fails, the last batch's record is tried again on
  its own: a delivered message left ``sending`` would be taken for a crash, and where
  it cannot be sent again, end ``unknown``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from contextlib import nullcontext
from datetime import datetime

from django.db import DatabaseError, IntegrityError, transaction
from django.utils import timezone

from .. import ratelimit
from ..conf import settings as conf
from ..models import JobTake, ScheduledTask
from ..senders import SendResult
from ..senders.base import Limit
from .job_outage import given_back_when_back, settled_when_back
from .jobs import BUSY_WAIT_SECONDS, Budget, Job, defer, logger, tried
from .records import (
    at_once,
    record_sent,
    record_sent_surely,
    recording,
    reserve_and_write_sent,
    write_sent,
)
from .reservations import reserve, take_keys, take_keys_one_by_one
from .sending import limits, next_batch, send_reserved
from .starting import start

# Callers import these from here, as before the pieces of a job had modules of their own.
__all__ = ["Job", "deliver", "reserve", "start"]


def deliver(
    token: str,
    run_ids: Sequence[int],
    folding: Sequence[Sequence[str]] = (),
    *,
    now: datetime | None = None,
) -> int:
    """Start the runs of one claim and send them at their rate-limit slots; returns how
    many were sent. Runs that cannot go soon wait for a later claim, without spending
    an attempt. ``folding``: the (recipient, kind) pairs of its runs that fold into
    digests (``engine.digests``); ``now``: the time the runs start at (default: the
    clock's).

    Runs go in batches that may leave back to back: one reservation of slots and ledger
    keys, the sends, one record of what was sent. A batch is a whole claim on an
    unlimited channel and usually one message on a busy paced one. What a batch sent is
    recorded in the transaction that reserves the next batch's keys (``_step``), and
    the last batch's when the job ends, with the runs put back and the tasks' last run
    time: one transaction per batch, plus one to start and one to end.
    """
    budget = Budget.begin()
    pairs = [(recipient, kind) for recipient, kind in folding]
    jobs = _started(token, run_ids, now, budget, pairs)
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
                defer(items, "job_time", "The job's time ran out first.")
                break
            budget.renew(pending)
            batch, rest = next_batch(pending)
            ready, missed = _step(batch, unrecorded, deferred)
            pending = missed + rest
            done = send_reserved(ready, deferred)
            sent += len(done)
            unrecorded += done
    except BaseException as exc:
        if settled_when_back(exc, budget, jobs, deferred):
            return sent
        # What was sent is recorded even so, if the database still answers; else its
        # keys stay ``sending``: in doubt, as after a crash.
        if unrecorded:
            try:
                record_sent_surely(unrecorded)
            except Exception:
                logger.exception("could not record %d sent messages", len(unrecorded))
        raise
    try:
        _finish(jobs, unrecorded, deferred)
    except DatabaseError as exc:
        if settled_when_back(exc, budget, jobs, deferred):
            return sent
        logger.warning(
            "could not end the job in one transaction; ending it in parts", exc_info=True
        )
        _finish_apart(jobs, unrecorded, deferred)
    return sent


def _started(
    token: str,
    run_ids: Sequence[int],
    now: datetime | None,
    budget: Budget,
    folding: Sequence[tuple[str, str]],
) -> list[Job]:
    """Record that the job took its runs (``JobTake``, committed on its own before any
    is prepared), then start them; none if the database went away meanwhile and they
    were given back once it answered (``reminders.engine.job_outage``)."""
    execution = uuid.uuid4().hex
    try:
        JobTake.objects.take(execution, token, run_ids)
        return start(token, run_ids, now, execution=execution, taken=True, folding=folding)
    except BaseException as exc:
        if given_back_when_back(exc, budget, token, execution, run_ids):
            return []
        raise


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
    database, are read in this one. Where the keys and the record can be one statement
    (``records.at_once``: PostgreSQL, keys never tried, plain records: a message of a
    channel without de-duplication), they are, with no transaction around it: atomic on
    its own, and the message's one round trip. A key another run took meanwhile rolls
    the transaction (or the statement) back, and the step is done again the slow way:
    the record alone, then the keys one by one.
    """
    requests = [limits(job) for job in batch]
    inside = ratelimit.shares_transaction(requests)
    slots = [] if inside else _reserve_slots(requests)
    now = timezone.now()
    ledger = at_once(batch, unrecorded, now) if inside else None
    ready: list[tuple[Job, float]] = []
    try:
        # One statement needs no transaction around it: the pauses are read on their own.
        with transaction.atomic() if ledger is None else nullcontext():
            if inside:
                slots = _reserve_slots(requests)
            pairs = zip(batch, slots, strict=True)
            ready = [(job, slot.at) for job, slot in pairs if slot.reserved]
            if ledger is None:
                taken, lost = take_keys([job for job, _ in ready])
                write_sent(unrecorded)
            else:
                taken, lost = [job for job, _ in ready], []
                reserve_and_write_sent(taken, unrecorded, ledger, now)
    except IntegrityError:
        record_sent(unrecorded)
        taken, lost = take_keys_one_by_one([job for job, _ in ready])
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
    were not sent, and stamp the last run time of the tasks it tried (``jobs.tried``),
    completing those whose runs have all ended (``TaskQuerySet.ran``)."""
    with recording():
        write_sent(unrecorded)
        defer(deferred)
        ScheduledTask.objects.ran(tried(jobs), timezone.now())


def _finish_apart(
    jobs: Sequence[Job], unrecorded: list[tuple[Job, SendResult]], deferred: list[tuple[Job, float]]
) -> None:
    """``_finish`` once its one transaction failed (a deadlock, a lost connection): the
    last batch's record first, tried again (``record_sent_surely``), since a message
    delivered and left ``sending`` would be taken for a crash and, where it cannot be
    sent again, end ``unknown``; then the runs put back and the tasks stamped, each on
    its own (either lost leaves runs to come back after their lease, no more)."""
    record_sent_surely(unrecorded)
    try:
        defer(deferred)
    except DatabaseError:
        logger.exception("could not put %d runs back; they wait for their lease", len(deferred))
    try:
        ScheduledTask.objects.ran(tried(jobs), timezone.now())
    except DatabaseError:
        logger.exception("could not stamp the tasks' last run time")
