"""Writing what a send came to: ``sent``, a failure as ``reminders.engine.retries``
decides it, a reply that the provider throttled, and a run given up in doubt.

Invariants:

* ``sent`` and the run's completion are committed together after the send. The ledger
  says ``sent`` whatever happened to the run meanwhile: it is what happened. A job
  writes a batch's record in the transaction that reserves the next batch's keys, or
  ends the job (``write_sent``), so that a message costs one transaction; on its own
  (``record_sent``) it commits without waiting for the WAL flush (``recording``). On
  PostgreSQL, where the keys are fresh and the record plain UPDATEs (``at_once``), the
  two are one statement sent outside a transaction (``reserve_and_write_sent``): atomic
  and durable as that transaction was, in one round trip instead of five.
* A record that fails is tried again (``record_sent_surely``): a delivered message left
  ``sending`` would be taken for a crash and, where it cannot be sent again, end
  ``unknown``.
* An attempt's outcome is written to its run only while the run is still this job's
  (its lease token); a run taken over is decided by its new holder from the ledger as
  it finds it, and a closed run keeps its lease token in memory until the close
  commits. A throttled reply changes the key only while the run is held under its
  lease (``held``), and the run waits without spending its attempt.
* A final outcome tells ops: ``run_unknown``, ``run_expired`` or ``run_failed``.
* A text sent in parts that failed on a later part is recorded ``partly_sent`` with the
  parts that went (``Job.unsent_status``), whatever its run comes to; ``unknown`` if
  the part that failed may have been delivered.
* A digest recorded ``sent`` ends its folded runs ``sent`` in the same transaction
  (``reminders.engine.digest_ends``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from django.db import DatabaseError, connection, transaction
from django.db.models import Case, F, Value, When
from django.utils import timezone

from .. import signals
from ..exceptions import SendError, ThrottledSendError
from ..messages import digests as digest_wording
from ..models import ScheduledTask, SendLog, TaskRun, sql
from ..senders import SendResult
from . import digest_ends
from .jobs import Job, held, logger
from .reservations import fresh_rows, known_pks
from .retries import Outcome, failure_outcome


@contextmanager
def recording() -> Iterator[None]:
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


def record_sent(done: list[tuple[Job, SendResult]]) -> None:
    """Mark a batch's sent keys and runs, in one transaction.

    Replies that agree share one UPDATE, in which only the provider's message ids differ
    row by row (a ``bulk_update`` of every field costs more Python than the sends). The
    ledger says ``sent`` whatever happened to the runs meanwhile: it is what happened.
    """
    if not done:
        return
    with recording():
        write_sent(done)


def write_sent(done: Sequence[tuple[Job, SendResult]]) -> None:
    """``record_sent`` in the caller's transaction."""
    if not done:
        return
    now = timezone.now()
    plain, mixed = _ledger_sent(done, now)
    for update in plain:
        update.run()  # a message of its own: the usual case
    for pks, values, ids in mixed:
        values["provider_message_id"] = Case(
            *(When(pk=pk, then=Value(message_id)) for pk, message_id in ids),
            default=F("provider_message_id"),
        )
        SendLog.objects.filter(pk__in=pks).update(**values)
    runs = [job.run for job, _ in done]
    _runs_sent(done, now, TaskRun.close_attempts(runs, TaskRun.Status.SENT, now))


def reserve_and_write_sent(
    jobs: Sequence[Job],
    done: Sequence[tuple[Job, SendResult]],
    ledger: Sequence[sql.Update],
    now: datetime,
) -> None:
    """``take_keys(jobs)`` and ``write_sent(done)`` as one statement sent outside any
    transaction (``sql.together``): the message's one round trip, with ``ledger``, the
    record's UPDATEs ``at_once`` gave at ``now``. A key another run took raises
    ``IntegrityError``, and nothing is written."""
    runs = [job.run for job, _ in done]
    closing = TaskRun.closing(runs, TaskRun.Status.SENT, now)
    matched = sql.together([*ledger, *closing], fresh_rows(jobs))
    TaskRun.closed(runs, closing)
    _runs_sent(done, now, sum(matched[len(ledger) :]))


def at_once(
    jobs: Sequence[Job], done: Sequence[tuple[Job, SendResult]], now: datetime
) -> list[sql.Update] | None:
    """The ledger's UPDATEs recording ``done`` at ``now``, where reserving ``jobs``' keys
    and recording ``done`` can be one statement (``reserve_and_write_sent``): on
    PostgreSQL, outside a transaction, keys never tried (one INSERT), sends whose records
    are plain UPDATEs (no digest to settle, one message id per reply); else None."""
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        return None
    if not all(job.fresh for job in jobs):
        return None
    if any(digest_wording.is_digest(job.run.task) for job, _ in done):
        return None
    plain, mixed = _ledger_sent(done, now)
    return None if mixed else plain


def _ledger_sent(
    done: Sequence[tuple[Job, SendResult]], now: datetime
) -> tuple[list[sql.Update], list[tuple[list[int], dict[str, Any], list[tuple[int, str]]]]]:
    """The ledger's UPDATEs to ``sent``: replies that agree share one, in which only the
    provider's message ids may differ row by row (a ``bulk_update`` of every field costs
    more Python than the sends). Plain ones where the ids agree too (a message of its
    own); the others as (pks, values, (pk, message id) pairs)."""
    replies: dict[str, list[tuple[SendLog, SendResult]]] = {}
    for job, result in done:
        job.ledger.provider_message_id = result.message_id[:128]
        reply = json.dumps([result.code, result.detail], sort_keys=True)
        replies.setdefault(reply, []).append((job.ledger, result))
    known_pks([job.ledger for job, _ in done])
    plain: list[sql.Update] = []
    mixed: list[tuple[list[int], dict[str, Any], list[tuple[int, str]]]] = []
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
            plain.append(sql.Update(SendLog, pks, values))
        else:
            mixed.append((pks, values, [(row.pk, row.provider_message_id) for row, _ in group]))
    return plain, mixed


def _runs_sent(done: Sequence[tuple[Job, SendResult]], now: datetime, closed: int) -> None:
    """What follows the record of ``done``: digests' items settled, ``run_sent`` told."""
    digest_ends.settle_sent([(job.run, result) for job, result in done], now)
    if closed < len(done):
        logger.warning(
            "%d sent runs were taken over by another worker before this one recorded "
            "them; the ledger says sent, and their holder will close them",
            len(done) - closed,
        )
    for job, result in done:
        signals.after_commit(signals.run_sent, TaskRun, run=job.run, result=result)


# How often the record of messages sent is tried before they are left in doubt, and the
# pause before the first try again (doubled each time).
RECORD_TRIES = 3
RECORD_PAUSE_SECONDS = 0.5


def record_sent_surely(done: list[tuple[Job, SendResult]]) -> None:
    """``record_sent``, tried again after a database error: a lost record leaves
    delivered messages ``sending``, as if their worker had died mid-send. Raises the
    last error if every try failed."""
    pause = RECORD_PAUSE_SECONDS
    for attempt in range(1, RECORD_TRIES + 1):
        try:
            record_sent(done)
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


def record_failure(job: Job, error: SendError) -> None:
    """Record an attempt that did not end in ``sent``, as ``failure_outcome`` decides;
    a final outcome tells ops (``run_unknown``, ``run_expired`` or ``run_failed``)."""
    run = job.run
    now = timezone.now()
    outcome = failure_outcome(job, error, now)
    with recording():
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
            status=job.unsent_status(outcome.doubt),
            parts_sent=job.parts_sent,
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


def record_throttled(job: Job, error: ThrottledSendError) -> None:
    """The provider refused the message as too fast: the key may be sent again later,
    and the run waits without spending its attempt."""
    with transaction.atomic():
        if not held([job]):
            logger.warning("run %s: taken over before its throttled reply was recorded", job.run.pk)
            return
        SendLog.objects.filter(pk=job.ledger.pk, status=SendLog.Status.SENDING).update(
            status=job.unsent_status(job.in_doubt),
            parts_sent=job.parts_sent,
            reply_code=error.code[:64],
            error_message=error.message,
            updated_at=timezone.now(),
        )


def give_up_in_doubt(run: TaskRun, row: SendLog, now: datetime, code: str, message: str) -> None:
    """End the run ``unknown`` and its key with it, and tell ops; only while the run is
    still ours (call it in a transaction: both or neither)."""
    if not run.close_attempt(TaskRun.Status.UNKNOWN, code=code, message=message):
        return
    SendLog.objects.filter(pk=row.pk).exclude(status=SendLog.Status.SENT).update(
        status=SendLog.Status.UNKNOWN, run=run, updated_at=now
    )
    signals.after_commit(signals.run_unknown, TaskRun, run=run)
