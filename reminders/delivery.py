"""Deliver claimed runs: reserve the ledger key, send, record the outcome.

``deliver`` is what django-q2 workers execute. It must be safe to execute twice (the
ORM broker is at-least-once) and after any crash:

* A run is started only by the holder of the claim's token, and starting it swaps that
  token for a fresh one, so a redelivered job, or a stale one from an earlier claim,
  finds nothing to start.
* A message's ledger key is reserved (``sending``) and committed just before its send,
  so a crash leaves at most the message in hand in doubt; ``sent`` and the run's
  completion are committed together afterwards. Where the provider drops an identical
  body sent again, a batch of keys is reserved at once and recorded at once: a crash
  then leaves the batch in doubt, and the re-send below settles it.
* A ``sending`` row found when a run starts means an earlier attempt died between the
  two. The body is re-sent only where the sender's provider drops identical bodies
  (``supports_duplicate_check``) and the row is still inside its window; otherwise the
  run and the row become ``unknown`` and ``run_unknown`` tells ops, because sending
  again could deliver the message twice.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cached_property, partial

from django.db import IntegrityError, connection, transaction
from django.db.models import Case, F, Value, When
from django.utils import timezone

from . import kinds, ratelimit, signals
from .conf import settings as conf
from .exceptions import (
    ConfigurationSendError,
    RemindersError,
    SendError,
    ThrottledSendError,
    TransientSendError,
)
from .models import ScheduledTask, SendLog, TaskRun
from .senders import BaseSender, Message, SendResult, get_sender
from .senders.base import render_body

logger = logging.getLogger(__name__)


@dataclass
class Job:
    """One started run, the message it is to send, and its ledger row.

    ``ledger`` is unsaved for a key never tried (``fresh``); otherwise it is the row as
    read, whose status (``failed``, or ``sending`` for a safe re-send) the reservation
    expects and a hand-back restores.
    """

    run: TaskRun
    ledger: SendLog
    fresh: bool = True
    sender: BaseSender | None = None  # once paced; None if the channel cannot be used

    @property
    def channel(self) -> str:
        return self.ledger.channel

    @cached_property
    def message(self) -> Message:
        return Message.from_rendered(self.ledger.recipient, self.ledger.body, self.ledger.key)

    @property
    def scope(self) -> str:
        return self.sender.rate_scope if self.sender else self.channel


# A batch on a paced channel whose sends fall this far behind its slots gives the rest
# back: slots are meant to be used when they fall, not late and together with other
# workers' on-time ones.
STALE_SLOT_SECONDS = 1.0


def worker_id() -> str:
    return f"{conf.WORKER_ID}:{os.getpid()}"


def deliver(token: str, run_ids: Sequence[int]) -> int:
    """Start the runs of one claim and send them at their rate-limit slots; returns how
    many were sent. Runs that cannot go soon wait for a later claim, without spending
    an attempt.

    Runs go in batches that may leave back to back: one reservation of slots and ledger
    keys, the sends, one record of what was sent. A batch is a whole claim on an
    unlimited channel and usually one message on a busy paced one.
    """
    jobs = start(token, run_ids)
    if not jobs:
        return 0
    sent = 0
    deferred: list[tuple[Job, float]] = []
    pending = jobs
    while pending:
        batch, rest = _next_batch(pending)
        slots = ratelimit.reserve(
            [_limits(job) for job in batch], max_wait=conf.RATE_MAX_WAIT, together=True
        )
        # The first request is refused only when it is too far off: it waits for a later
        # claim. The others just missed this batch.
        if not slots[0].reserved:
            deferred.append((batch[0], slots[0].at))
        ready = [(job, slot.at) for job, slot in zip(batch, slots, strict=True) if slot.reserved]
        pending = [job for job, slot in zip(batch[1:], slots[1:], strict=True) if not slot.reserved]
        pending += rest
        sent += _send_batch(ready, deferred)
    _defer(deferred)
    ScheduledTask.objects.filter(pk__in={job.run.task_id for job in jobs}).update(
        last_run_at=timezone.now()
    )
    return sent


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
        shareable = sender is not None and sender.supports_duplicate_check
        if batch and not shareable:
            break
        batch.append(job)
        # No more can go at one moment than the channel's burst: asking for more slots
        # would only lock more rows.
        rate = sender.channel_rate() if sender else None
        room = min(room, rate.burst if rate else math.inf)
        if not shareable or len(batch) >= room:
            break
    return batch, pending[len(batch) :]


def _ready_sender(job: Job) -> BaseSender | None:
    """The job's sender, ready to send at once (an access token in hand) so that the
    request leaves at its slot; None if it is not: the send meets the error again and
    records it."""
    try:
        job.sender = job.sender or get_sender(job.channel)
        job.sender.prepare()
    except RemindersError:
        job.sender = None
    return job.sender


def _limits(job: Job) -> list[ratelimit.Limit]:
    return job.sender.limits(job.message) if job.sender else []


def _send_batch(ready: list[tuple[Job, float]], deferred: list[tuple[Job, float]]) -> int:
    """Reserve the batch's ledger keys, send each message at its slot, then record the
    sent ones together; returns how many were sent. What is not sent joins ``deferred``."""
    if not ready:
        return 0
    slots = {job.run.pk: at for job, at in ready}
    jobs = reserve([job for job, _ in ready])
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
        outcome = _call(job)
        if isinstance(outcome, SendResult):
            done.append((job, outcome))
        elif isinstance(outcome, ThrottledSendError):
            _record_throttled(job, outcome)
            until = ratelimit.pause(f"{job.scope}:channel", outcome.pause_seconds, outcome.message)
            deferred.append((job, until.timestamp()))
            _hand_back(jobs[index + 1 :], deferred, until.timestamp())
            break
        else:
            _record_failure(job.run, outcome)
    _record_sent(done)
    return len(done)


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


def _defer(items: list[tuple[Job, float]]) -> None:
    """Put runs that were started but not sent back in line, the attempt not spent."""
    if not items:
        return
    until = datetime.fromtimestamp(min(at for _, at in items), tz=UTC)
    TaskRun.objects.filter(pk__in=[job.run.pk for job, _ in items]).update(
        status=Case(
            When(attempts__lte=1, then=Value(TaskRun.Status.SCHEDULED)),
            default=Value(TaskRun.Status.RETRYING),
        ),
        attempts=F("attempts") - 1,
        next_attempt_at=until,
        error_code="rate_limited",
        error_message="Waiting for the channel's rate limit.",
        lease_owner="",
        lease_token="",
        lease_expires_at=None,
    )
    logger.info("deferred %d runs until %s (rate limit)", len(items), until.isoformat())


def start(token: str, run_ids: Sequence[int]) -> list[Job]:
    """Take the claimed runs that are still ours and decide, from the ledger, which may
    be sent; finish the others (already sent, or in doubt)."""
    now = timezone.now()
    execution = uuid.uuid4().hex
    with transaction.atomic():
        TaskRun.objects.filter(
            pk__in=run_ids, lease_token=token, status=TaskRun.Status.QUEUED
        ).update(
            status=TaskRun.Status.RUNNING,
            lease_token=execution,
            lease_owner=worker_id(),
            lease_expires_at=now + timedelta(seconds=conf.LEASE_SECONDS),
            attempts=F("attempts") + 1,
            started_at=now,
            finished_at=None,
        )
        runs = list(
            TaskRun.objects.filter(pk__in=run_ids, lease_token=execution).select_related("task")
        )
        ledger = SendLog.objects.in_bulk([run.ledger_key for run in runs], field_name="key")
        prepared = (_prepare(run, ledger.get(run.ledger_key), now) for run in runs)
        return [job for job in prepared if job is not None]


def _prepare(run: TaskRun, row: SendLog | None, now: datetime) -> Job | None:
    """Decide, from the run's ledger row, whether it may be sent; finish it if not."""
    task = run.task
    max_attempts = len(conf.RETRY_DELAYS) + 1
    if run.attempts > max_attempts:
        # Only reachable when workers keep dying on this run.
        run.close_attempt(
            TaskRun.Status.FAILED, code="attempts", message="Gave up: workers died mid-send."
        )
        return None
    if row is None:
        try:
            content = kinds.render(task, run)
        except RemindersError as exc:
            run.close_attempt(TaskRun.Status.FAILED, code="kind", message=str(exc))
            return None
        fresh = SendLog(
            key=run.ledger_key,
            task=task,
            run=run,
            recipient=task.recipient,
            channel=task.channel,
            body=render_body(content.msgtype, content.body),
        )
        return Job(run, fresh)

    if row.status == SendLog.Status.SENT or row.run_id != run.pk:
        # Someone already sent, or is sending, this key: never a second message.
        _finish_duplicate(run, row)
        return None
    if row.status == SendLog.Status.UNKNOWN:
        run.close_attempt(
            TaskRun.Status.UNKNOWN, code="unknown", message="An earlier attempt may have sent it."
        )
        return None
    if row.status == SendLog.Status.SENDING and not _resend_is_safe(row, now):
        SendLog.objects.filter(pk=row.pk).update(status=SendLog.Status.UNKNOWN, updated_at=now)
        run.close_attempt(
            TaskRun.Status.UNKNOWN,
            code="unknown",
            message="The worker stopped while sending; the provider may or may not have it.",
        )
        transaction.on_commit(lambda: signals.run_unknown.send(TaskRun, run=run))
        return None
    # A failed attempt, or a re-send the provider will de-duplicate: the same bytes again.
    return Job(run, row, fresh=False)


def _finish_duplicate(run: TaskRun, row: SendLog) -> None:
    if row.run_id == run.pk:
        run.close_attempt(TaskRun.Status.SENT)
    else:
        message = f"Key {row.key} belongs to run {row.run_id}."
        run.close_attempt(TaskRun.Status.SKIPPED, code="duplicate", message=message)


def reserve(jobs: Sequence[Job]) -> list[Job]:
    """Mark the jobs' keys ``sending`` and commit, right before their sends; returns the
    jobs whose key is now theirs, in order."""
    fresh = [job for job in jobs if job.fresh]
    lost: set[int] = set()
    for job in fresh:
        job.ledger.attempts = 1
    try:
        with transaction.atomic():
            SendLog.objects.bulk_create([job.ledger for job in fresh])
    except IntegrityError:
        # A key is taken by another run (a schedule moved within its day): one at a time.
        lost.update(job.run.pk for job in fresh if not _insert(job))
    for job in jobs:
        # Zero rows only if the row changed since start(): the run waits for its lease
        # to expire and is decided again from the ledger as it then is.
        if not job.fresh and not _mark_sending(job.ledger):
            lost.add(job.run.pk)
    return [job for job in jobs if job.run.pk not in lost]


def _insert(job: Job) -> bool:
    try:
        with transaction.atomic():
            job.ledger.save(force_insert=True)
    except IntegrityError:
        _finish_duplicate(job.run, SendLog.objects.get(key=job.ledger.key))
        return False
    return True


def _mark_sending(row: SendLog) -> bool:
    return bool(
        SendLog.objects.filter(pk=row.pk, status=row.status).update(
            status=SendLog.Status.SENDING, attempts=F("attempts") + 1, updated_at=timezone.now()
        )
    )


def _hand_back(jobs: Sequence[Job], deferred: list[tuple[Job, float]], until: float) -> None:
    """Undo the reservation of keys that will not be sent now; their runs wait for a
    later claim. A fresh key is dropped, a known one gets its status back."""
    if not jobs:
        return
    fresh = [job.ledger for job in jobs if job.fresh]
    _known_pks(fresh)
    with transaction.atomic():
        SendLog.objects.filter(
            pk__in=[row.pk for row in fresh], status=SendLog.Status.SENDING
        ).delete()
        for job in jobs:
            if not job.fresh:
                SendLog.objects.filter(pk=job.ledger.pk).update(
                    status=job.ledger.status, attempts=F("attempts") - 1
                )
    deferred.extend((job, until) for job in jobs)


def _resend_is_safe(row: SendLog, now: datetime) -> bool:
    try:
        sender = get_sender(row.channel)
    except RemindersError:
        return False
    window = timedelta(seconds=sender.duplicate_check_seconds)
    return sender.supports_duplicate_check and now - row.updated_at < window


def _call(job: Job) -> SendResult | SendError:
    """Hand one reserved message to its sender; the reply, or the error to record."""
    try:
        return (job.sender or get_sender(job.channel)).send(job.message)
    except SendError as exc:
        return exc
    except RemindersError as exc:  # a channel that is not configured
        return ConfigurationSendError(str(exc), code="channel")
    except Exception as exc:
        # A sender must raise SendError; anything else is a bug, counted as a failed
        # attempt that may pass so that the message is not lost.
        logger.exception("sender %r raised an unexpected error", job.channel)
        return TransientSendError(repr(exc), code="exception")


def _record_throttled(job: Job, error: ThrottledSendError) -> None:
    """The provider refused the message as too fast: the key may be sent again later,
    and the run waits without spending its attempt."""
    SendLog.objects.filter(key=job.ledger.key).update(
        status=SendLog.Status.FAILED,
        reply_code=error.code[:64],
        error_message=error.message,
        updated_at=timezone.now(),
    )


@contextmanager
def _recording() -> Iterator[None]:
    """The transaction that records an outcome.

    On PostgreSQL it commits without waiting for the WAL flush: the reservation before
    the send is durable, so a record lost in a server crash leaves the row ``sending``,
    the same in-doubt state as a worker crash, handled the same way. It roughly halves
    what a worker waits for per message.
    """
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL synchronous_commit TO OFF")
        yield


def _record_sent(done: list[tuple[Job, SendResult]]) -> None:
    """Mark a batch's sent keys and runs, in one transaction.

    Replies that agree share one UPDATE, in which only the provider's message ids differ
    row by row (a ``bulk_update`` of every field costs more Python than the sends).
    """
    if not done:
        return
    now = timezone.now()
    replies: dict[str, list[tuple[SendLog, SendResult]]] = {}
    for job, result in done:
        job.ledger.provider_message_id = result.message_id[:128]
        reply = json.dumps([result.code, result.detail], sort_keys=True)
        replies.setdefault(reply, []).append((job.ledger, result))
    _known_pks([job.ledger for job, _ in done])
    with _recording():
        for group in replies.values():
            _, result = group[0]
            SendLog.objects.filter(pk__in=[row.pk for row, _ in group]).update(
                status=SendLog.Status.SENT,
                provider_message_id=Case(
                    *(When(pk=row.pk, then=Value(row.provider_message_id)) for row, _ in group),
                    default=F("provider_message_id"),
                ),
                reply_code=result.code[:64],
                reply_detail=result.detail,
                error_message="",
                sent_at=now,
                updated_at=now,
            )
        TaskRun.close_attempts([job.run for job, _ in done], TaskRun.Status.SENT, now)
        for job, result in done:
            transaction.on_commit(
                partial(signals.run_sent.send, TaskRun, run=job.run, result=result)
            )


def _known_pks(rows: list[SendLog]) -> None:
    """Where ``bulk_create`` could not return primary keys, read them by key."""
    missing = {row.key: row for row in rows if row.pk is None}
    if missing:
        for key, pk in SendLog.objects.filter(key__in=missing).values_list("key", "pk"):
            missing[key].pk = pk


def _record_failure(run: TaskRun, error: SendError) -> None:
    now = timezone.now()
    delays = conf.RETRY_DELAYS
    will_retry = error.retryable and run.attempts <= len(delays)
    with _recording():
        SendLog.objects.filter(key=run.ledger_key).update(
            status=SendLog.Status.FAILED,
            reply_code=error.code[:64],
            error_message=error.message,
            updated_at=now,
        )
        retry_at = now + timedelta(seconds=delays[run.attempts - 1]) if will_retry else None
        status = TaskRun.Status.RETRYING if will_retry else TaskRun.Status.FAILED
        run.close_attempt(
            status, code=error.code, message=error.message, retry_at=retry_at, now=now
        )
        if will_retry:
            ScheduledTask.objects.filter(pk=run.task_id).update(retry_count=F("retry_count") + 1)
        else:
            transaction.on_commit(lambda: signals.run_failed.send(TaskRun, run=run, error=error))
    logger.warning(
        "run %s attempt %d failed (%s): %s%s",
        run.pk,
        run.attempts,
        error.code,
        error.message,
        "; will retry" if will_retry else "",
    )
