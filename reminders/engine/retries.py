"""What an attempt that did not end ``sent`` comes to, and when a message in doubt may
be sent again: decisions only, written by ``reminders.engine.records``.

Invariants:

* In doubt is not failed. A ``sending`` row found when a run starts (its worker died
  mid-send), or an answer that leaves delivery open (a read timeout, a 5xx, an errcode
  we do not know: ``InDoubtSendError``), may have delivered the message. The body is
  sent again, byte for byte, only where the provider drops identical bodies
  (``supports_duplicate_check``, asked message by message: ``BaseSender.deduplicates``)
  and only inside that window counted from the key's first send, or where the channel
  accepts a possible duplicate (``retry_in_doubt``); otherwise the run and the row
  become ``unknown``. A failure that only proves nothing was delivered (refused
  connection, busy, a recipient error) is ``failed``, or retried while it may pass, at
  the task's kind's delays (``REMINDERS_RETRY_DELAYS`` by default).
* A run whose next retry would come after its deadline is not retried: it ends
  ``expired``. A key in doubt is decided as above, never expired: that would say the
  message was not sent.
* A run in doubt whose task was cancelled while it was being sent is not sent again
  (its task is over) nor said unsent: it ends ``unknown`` at once, its ledger row in
  doubt with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from .. import kinds
from ..conf import settings as conf
from ..exceptions import InDoubtSendError, RemindersError, SendError, UnknownKind
from ..models import CANCELLED_MID_SEND, EXPIRED_CODE, ScheduledTask, SendLog, TaskRun
from ..senders import Message, get_sender
from .jobs import Job


@dataclass(frozen=True)
class Outcome:
    """How a failed attempt ends: the run's status, its retry time if it waits for
    one, and whether the message may have been delivered (the ledger row's truth)."""

    status: str
    doubt: bool
    code: str
    message: str
    retry_at: datetime | None = None


def failure_outcome(job: Job, error: SendError, now: datetime) -> Outcome:
    """In doubt (this answer, or an earlier attempt of the same bytes) the run retries
    only where a re-send is safe, else it is ``unknown``; certain failures retry while
    they may pass, else are ``failed``. A retry that would come after the run's
    deadline is not waited for: the run is ``expired`` (``unknown`` if in doubt)."""
    run = job.run
    delays = _retry_delays(run.task)
    doubt = isinstance(error, InDoubtSendError) or (job.in_doubt and not error.refuses_these_bytes)
    if doubt and _cancelled(run):
        message = f"{CANCELLED_MID_SEND.message} ({error.code}: {error.message})"
        return Outcome(TaskRun.Status.UNKNOWN, True, CANCELLED_MID_SEND.code, message)
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


def _cancelled(run: TaskRun) -> bool:
    """Whether the run's task is cancelled now (it may have been while the run sent)."""
    cancelled = ScheduledTask.objects.filter(pk=run.task_id, status=ScheduledTask.Status.CANCELLED)
    return cancelled.exists()


def _retry_delays(task: ScheduledTask) -> list[int]:
    """The task's kind's retry delays, or ``REMINDERS_RETRY_DELAYS``."""
    try:
        own = kinds.policy(task.kind).retry_delays
    except UnknownKind:
        own = ()
    return list(own) or conf.RETRY_DELAYS


def resend_is_safe(row: SendLog, now: datetime) -> bool:
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
