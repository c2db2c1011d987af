"""How a digest's items end: as their digest does (``reminders.engine.digests`` folds
them, ``TaskRun.digest`` names it).

Invariants:

* An item ends once, with its digest: ``sent`` in the very transaction that records the
  digest sent (``settle_sent``, called by ``engine.records``), so that no moment shows a
  digest sent and its items still ``folded``; any other end (failed, expired, unknown,
  by a worker, a takeover or an operator) at the scheduler's next tick
  (``settle_ended``), with the digest's code and why.
* Each item's end is told by its own signal (``run_sent`` with the digest's reply, or
  ``run_failed``, ``run_unknown``, ``run_expired``), after the commit, as any run's is.
* Only ``folded`` items change: an update checks the status, so an item settled by one
  path is never settled again by the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.db import transaction

from .. import signals
from ..exceptions import PermanentSendError
from ..messages import digests as wording
from ..models import ScheduledTask, SendLog, TaskRun
from ..senders import SendResult
from .jobs import logger


def settle_sent(done: Sequence[tuple[TaskRun, SendResult]], now: datetime) -> None:
    """The items of digests just recorded ``sent`` are sent with them, in the caller's
    transaction; ``run_sent`` tells of each, with its digest's reply."""
    replies = {run.pk: result for run, result in done if wording.is_digest(run.task)}
    if not replies:
        return
    items = list(
        TaskRun.objects.filter(
            digest_id__in=list(replies), status=TaskRun.Status.FOLDED
        ).select_related("task")
    )
    if not items:
        return
    TaskRun.objects.filter(pk__in=[item.pk for item in items], status=TaskRun.Status.FOLDED).update(
        status=TaskRun.Status.SENT, finished_at=now, error_code="", error_message=""
    )
    # Their tasks ran: the task list's "last run" says so, as a job stamps its own (and
    # those with nothing left to run are completed).
    ScheduledTask.objects.filter(pk__in={item.task_id for item in items}).ran(now)
    for item in items:
        item.status, item.finished_at = TaskRun.Status.SENT, now
        result = replies[item.digest_id] if item.digest_id is not None else SendResult()
        signals.after_commit(signals.run_sent, TaskRun, run=item, result=result)


def settle_ended(now: datetime, limit: int = 100) -> int:
    """Folded runs whose digest ended and did not settle them (every end but a record of
    ``sent``, which settles its own) end as it did, with its code and why, and each one's
    signal; returns how many. The scheduler's tick calls it, so every way a run ends
    reaches its items, the admin's and a taken-over worker's too."""
    ended = list(
        TaskRun.objects.filter(
            status__in=TaskRun.FINISHED,
            pk__in=TaskRun.objects.filter(status=TaskRun.Status.FOLDED).values("digest_id"),
        )[:limit]
    )
    settled = 0
    for digest in ended:
        items = list(
            TaskRun.objects.filter(digest=digest, status=TaskRun.Status.FOLDED).select_related(
                "task"
            )
        )
        message = (
            ""
            if digest.status == TaskRun.Status.SENT
            else (f"Its digest, run {digest.pk}, ended {digest.status}: {digest.error_message}")[
                :2000
            ]
        )
        with transaction.atomic():
            TaskRun.objects.filter(
                pk__in=[item.pk for item in items], status=TaskRun.Status.FOLDED
            ).update(
                status=digest.status,
                error_code=digest.error_code,
                error_message=message,
                finished_at=now,
            )
            for item in items:
                item.status, item.error_code, item.error_message = (
                    digest.status,
                    digest.error_code,
                    message,
                )
                _tell(item, digest)
            ScheduledTask.objects.filter(pk__in={i.task_id for i in items}).complete_ended(now)
        settled += len(items)
    if settled:
        logger.info("settled %d runs as their digests ended", settled)
    return settled


def _tell(item: TaskRun, digest: TaskRun) -> None:
    """The signal of ``item``'s end, its digest's."""
    if digest.status == TaskRun.Status.SENT:
        row = SendLog.objects.filter(run=digest, status=SendLog.Status.SENT).first()
        result = SendResult(row.provider_message_id, row.reply_code) if row else SendResult()
        signals.after_commit(signals.run_sent, TaskRun, run=item, result=result)
    elif digest.status == TaskRun.Status.FAILED:
        error = PermanentSendError(item.error_message, code=item.error_code or "digest")
        signals.after_commit(signals.run_failed, TaskRun, run=item, error=error)
    elif digest.status == TaskRun.Status.UNKNOWN:
        signals.after_commit(signals.run_unknown, TaskRun, run=item)
    elif digest.status == TaskRun.Status.EXPIRED:
        signals.after_commit(signals.run_expired, TaskRun, run=item)
