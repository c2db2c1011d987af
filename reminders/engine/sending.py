"""Sending a job's messages: which go together in one batch (``next_batch``), the
rate-limit buckets each must fit (``limits``), and the sends of a reserved batch at
their slots, each answer handed to its record (``send_reserved``).

Invariants:

* A batch is several messages only where the provider drops an identical body sent
  again; elsewhere it is one message, so that a crash leaves at most the message in
  hand in doubt.
* A message in doubt is sent again only if the provider's window is still open when
  it leaves, after its rate-limit wait, not only when its job started.
* A request leaves at its slot: a batch whose sends fall behind their slots hands the
  rest back rather than send late (``STALE_SLOT_SECONDS``), and a reply that says too
  fast pauses the channel and hands the rest back, the run's attempt not spent.
* A bulk run (priority ``normal`` or ``low``) never books the share of a paced
  channel kept for ``high`` runs (``REMINDERS_HIGH_RATE_SHARE``) further ahead than
  ``REMINDERS_RATE_BORROW_SECONDS``, nor a high run bulk's: each class's sends fit its
  share, or the other's idle slots just ahead (``reminders.ratelimit``).
* Error texts reach rows and logs only after the sender's secrets are masked here,
  where every send error passes (``_call``).
"""

from __future__ import annotations

import math
import time
import traceback
from collections.abc import Sequence

from django.utils import timezone

from .. import ratelimit
from ..exceptions import (
    ConfigurationSendError,
    InDoubtSendError,
    RemindersError,
    SendError,
    ThrottledSendError,
)
from ..senders import BaseSender, SendResult, get_sender
from ..senders.base import UNLIMITED, Limit
from .jobs import Job, logger
from .records import give_up_in_doubt, record_failure, record_throttled, recording
from .reservations import hand_back
from .retries import resend_is_safe

# A batch on a paced channel whose sends fall this far behind its slots gives the rest
# back: slots are meant to be used when they fall, not late and together with other
# workers' on-time ones.
STALE_SLOT_SECONDS = 1.0


def next_batch(pending: list[Job]) -> tuple[list[Job], list[Job]]:
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


def limits(job: Job) -> list[Limit]:
    """The buckets the job's send must fit: its sender's, by the run's priority (bulk
    runs leave the channel's high share alone)."""
    if job.sender is None:
        # Still read the channel's pause: nothing goes to a channel told to hold off.
        return [Limit(f"{job.channel}:channel", UNLIMITED)]
    return job.sender.limits(job.message, job.priority)


def send_reserved(
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
            hand_back(jobs[index:], deferred, now)
            break
        # The ledger rows first, the wait last: the request then leaves at its slot, not
        # a database round trip after it (late sends bunch up at the provider).
        if slots[job.run.pk] > now:
            time.sleep(slots[job.run.pk] - now)
        if job.in_doubt and not resend_is_safe(job.ledger, timezone.now()):
            _window_passed(job)
            continue
        outcome = job.outcome = _call(job)
        if isinstance(outcome, SendResult):
            done.append((job, outcome))
            logger.info(
                "run %s (%s to %s) sent on %s",
                job.run.pk,
                job.run.task.kind,
                job.run.task.recipient,
                job.channel,
            )
        elif isinstance(outcome, ThrottledSendError):
            record_throttled(job, outcome)
            until = ratelimit.pause(f"{job.scope}:channel", outcome.pause_seconds, outcome.message)
            deferred.append((job, until.timestamp()))
            hand_back(jobs[index + 1 :], deferred, until.timestamp())
            break
        else:
            record_failure(job, outcome)
    return done


def _window_passed(job: Job) -> None:
    """A message in doubt whose provider's window closed while it waited for its slot:
    the copy would no longer be dropped, so it is not sent; the run is ``unknown``."""
    sender = job.sender
    seconds = sender.duplicate_check_seconds if sender is not None else 0
    with recording():
        give_up_in_doubt(
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
        for limit in limits(job)
        if limit.rate.per_second < math.inf
    ]
    if not intervals:
        return math.inf
    return max(STALE_SLOT_SECONDS, 0.9 * min(intervals))


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
