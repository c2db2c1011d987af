"""Deliver claimed runs: reserve the ledger key, send, record the outcome.

``deliver`` is what django-q2 workers execute. It must be safe to execute twice (the
ORM broker is at-least-once) and after any crash:

* A run is started only by the holder of the claim's token, and starting it swaps that
  token for a fresh one, so a redelivered job, or a stale one from an earlier claim,
  finds nothing to start.
* Each message's ledger key is reserved (``sending``) and committed just before its own
  send, so a crash leaves at most the message in hand in doubt; ``sent`` and the run's
  completion are committed together afterwards.
* A ``sending`` row found when a run starts means an earlier attempt died between the
  two. The body is re-sent only where the sender's provider drops identical bodies
  (``supports_duplicate_check``) and the row is still inside its window; otherwise the
  run and the row become ``unknown`` and ``run_unknown`` tells ops, because sending
  again could deliver the message twice.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cached_property

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

    ``ledger`` is unsaved for a key never tried; otherwise it is the row as read, whose
    status (``failed``, or ``sending`` for a safe re-send) the reservation expects.
    """

    run: TaskRun
    ledger: SendLog
    scope: str = ""  # the sender's rate scope, once paced

    @property
    def channel(self) -> str:
        return self.ledger.channel

    @cached_property
    def message(self) -> Message:
        return Message.from_rendered(self.ledger.recipient, self.ledger.body, self.ledger.key)


def worker_id() -> str:
    return f"{conf.WORKER_ID}:{os.getpid()}"


def deliver(token: str, run_ids: Sequence[int]) -> int:
    """Start the runs of one claim and send each at its rate-limit slot; returns how
    many were sent. Runs that cannot go soon wait for a later claim, without spending
    an attempt."""
    jobs = start(token, run_ids)
    if not jobs:
        return 0
    sent = 0
    deferred: list[tuple[Job, float]] = []
    for job in jobs:
        slot = _pace(job)  # also where a pause put on the channel meanwhile is seen
        if not slot.reserved:
            deferred.append((job, slot.at))
            continue
        if not reserve(job):
            continue
        # The ledger row first, the wait last: the request then leaves at its slot, not a
        # database round trip after it (late sends bunch up at the provider).
        time.sleep(max(0.0, slot.at - time.time()))
        outcome = send(job)
        if isinstance(outcome, ThrottledSendError):
            until = ratelimit.pause(f"{job.scope}:channel", outcome.pause_seconds, outcome.message)
            deferred.append((job, until.timestamp()))
        elif outcome is None:
            sent += 1
    _defer(deferred)
    ScheduledTask.objects.filter(pk__in={job.run.task_id for job in jobs}).update(
        last_run_at=timezone.now()
    )
    return sent


def _pace(job: Job) -> ratelimit.Slot:
    """Reserve the job's send slot in the shared rate limits of its channel.

    One message at a time, right before its send: slots reserved ahead for a whole job
    go out late, and then together with other workers' on-time ones, whenever a worker
    falls behind; that breaks the per-second bound the provider enforces.
    """
    try:
        sender = get_sender(job.channel)
        sender.prepare()
    except RemindersError:
        return ratelimit.Slot(time.time(), True)  # send() meets the error and records it
    job.scope = sender.rate_scope
    [slot] = ratelimit.reserve([sender.limits(job.message)], max_wait=conf.RATE_MAX_WAIT)
    return slot


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
            content = kinds.get(task.kind).render(task, run)
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
    return Job(run, row)


def _finish_duplicate(run: TaskRun, row: SendLog) -> None:
    if row.run_id == run.pk:
        run.close_attempt(TaskRun.Status.SENT)
    else:
        message = f"Key {row.key} belongs to run {row.run_id}."
        run.close_attempt(TaskRun.Status.SKIPPED, code="duplicate", message=message)


def reserve(job: Job) -> bool:
    """Mark the job's key ``sending`` and commit, right before its send."""
    row = job.ledger
    if row.pk is None:
        row.attempts = 1
        try:
            with transaction.atomic():
                row.save(force_insert=True)
        except IntegrityError:
            # Another run with the same key (a schedule moved within its day) took it.
            _finish_duplicate(job.run, SendLog.objects.get(key=row.key))
            return False
        return True
    reserved = SendLog.objects.filter(pk=row.pk, status=row.status).update(
        status=SendLog.Status.SENDING, attempts=F("attempts") + 1, updated_at=timezone.now()
    )
    # Zero only if the row changed since start(): the run waits for its lease to expire
    # and is decided again from the ledger as it then is.
    return bool(reserved)


def _resend_is_safe(row: SendLog, now: datetime) -> bool:
    try:
        sender = get_sender(row.channel)
    except RemindersError:
        return False
    window = timedelta(seconds=sender.duplicate_check_seconds)
    return sender.supports_duplicate_check and now - row.updated_at < window


def send(job: Job) -> SendError | None:
    """Call the sender for one started run and record what happened.

    Returns None when sent, else the error; a ``ThrottledSendError`` is left for the
    caller to pause the channel and defer the run: throttling is not a failed attempt.
    """
    try:
        sender: BaseSender = get_sender(job.channel)
        result = sender.send(job.message)
    except ThrottledSendError as exc:
        SendLog.objects.filter(key=job.ledger.key).update(
            status=SendLog.Status.FAILED,
            reply_code=exc.code[:64],
            error_message=exc.message,
            updated_at=timezone.now(),
        )
        return exc
    except SendError as exc:
        error = exc
    except RemindersError as exc:  # a channel that is not configured
        error = ConfigurationSendError(str(exc), code="channel")
    except Exception as exc:
        # A sender must raise SendError; anything else is a bug, counted as a failed
        # attempt that may pass so that the message is not lost.
        logger.exception("sender %r raised an unexpected error", job.channel)
        error = TransientSendError(repr(exc), code="exception")
    else:
        _record_sent(job.run, result)
        return None
    _record_failure(job.run, error)
    return error


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


def _record_sent(run: TaskRun, result: SendResult) -> None:
    now = timezone.now()
    with _recording():
        SendLog.objects.filter(key=run.ledger_key).update(
            status=SendLog.Status.SENT,
            provider_message_id=result.message_id[:128],
            reply_code=result.code[:64],
            reply_detail=result.detail,
            error_message="",
            sent_at=now,
            updated_at=now,
        )
        run.close_attempt(TaskRun.Status.SENT, now=now)
        transaction.on_commit(lambda: signals.run_sent.send(TaskRun, run=run, result=result))


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
