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
* Only ``folded`` items change, and each is told by the one caller that changed it:
  the UPDATE checks the status row by row and marks what it changed with a token of
  its own, read back to tell (``_claim``), so an item is settled and told once, by
  one path, however many schedulers settle side by side. A digest's record of ``sent``
  reads its items back only when ``run_sent`` has receivers; with none it is one UPDATE.
* An item's task is stamped (``last_run_at``) and completed as its digest's is: by the
  job's end (``TaskQuerySet.ran``, one statement for all the job's tasks), or by the
  scheduler's sweep if the job died first; one whose digest ended otherwise is
  completed when it is settled (``settle_ended``).
* An item's own task still decides while its digest waits or retries (``unfold``). A
  digest that never reached the provider (no ledger row, or a ``failed`` one) and one of
  whose items changed since it was folded (its task paused, cancelled or re-planned, or
  its line, recipient, channel or language no longer what the digest lists) is not sent:
  it ends ``cancelled``, an item whose occurrence its task no longer has ends
  ``cancelled`` too (as a re-plan cancels its runs not yet sent), and the others wait
  again, each decided at its next claim as a run not yet sent (held, cancelled, or folded
  anew as its task says now). A digest in doubt is sent again as it was (the same
  bytes, which the provider's duplicate check recognises): it may have been delivered.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import QuerySet

from .. import signals
from ..exceptions import PermanentSendError, RemindersError
from ..messages import builders
from ..messages import digests as wording
from ..models import DIGEST_CODE, DIGEST_KEY, ScheduledTask, SendLog, TaskRun, sql
from ..senders import SendResult
from .jobs import logger


def settle_sent(done: Sequence[tuple[TaskRun, SendResult]], now: datetime) -> None:
    """The items of digests just recorded ``sent`` are sent with them, in the caller's
    transaction; ``run_sent`` tells of each this call ended, with its digest's reply
    (read back for it only when it has receivers). Their tasks are the job's to stamp
    at its end, with its own (``jobs.tried``)."""
    replies = {run.pk: result for run, result in done if wording.is_digest(run.task)}
    if not replies:
        return
    listed = TaskRun.objects.filter(digest_id__in=list(replies))
    end = {"status": TaskRun.Status.SENT, "finished_at": now, "error_code": "", "error_message": ""}
    if not signals.run_sent.has_listeners(TaskRun):
        # No one to tell, nothing to read: one UPDATE (as Django's delete fetches no
        # rows no signal needs).
        listed.filter(status=TaskRun.Status.FOLDED).update(**end)
        return
    for item in _claim(listed, **end):
        result = replies[item.digest_id] if item.digest_id is not None else SendResult()
        signals.after_commit(signals.run_sent, TaskRun, run=item, result=result)


def settle_ended(now: datetime, limit: int = 100) -> int:
    """Folded runs whose digest ended and did not settle them (every end but a record of
    ``sent``, which settles its own) end as it did, with its code and why, and each one's
    signal; returns how many this call ended. The scheduler's tick calls it, so every
    way a run ends reaches its items, the admin's and a taken-over worker's too."""
    ended = list(
        TaskRun.objects.filter(
            status__in=TaskRun.FINISHED,
            pk__in=TaskRun.objects.filter(status=TaskRun.Status.FOLDED).values("digest_id"),
        )[:limit]
    )
    settled = 0
    for digest in ended:
        message = (
            ""
            if digest.status == TaskRun.Status.SENT
            else (f"Its digest, run {digest.pk}, ended {digest.status}: {digest.error_message}")[
                :2000
            ]
        )
        with transaction.atomic():
            items = _claim(
                TaskRun.objects.filter(digest=digest),
                status=digest.status,
                error_code=digest.error_code,
                error_message=message,
                finished_at=now,
            )
            for item in items:
                _tell(item, digest)
            ScheduledTask.objects.complete_ended(now, among={i.task_id for i in items})
        settled += len(items)
    if settled:
        logger.info("settled %d runs as their digests ended", settled)
    return settled


def _claim(items: QuerySet[TaskRun], **end: Any) -> list[TaskRun]:
    """End the ``folded`` runs among ``items`` (a digest's, by its index) with the values
    of ``end``, in the caller's transaction, and return those this call ended, with
    their tasks: each is ended by one caller only, however many run side by side. The
    UPDATE checks the status row by row (after any lock it waited for) and says which
    rows it changed: on PostgreSQL it returns them (``sql.update_returning``: each row
    written once); elsewhere it marks them with a token of its own, read back and
    cleared."""
    ended = sql.update_returning(items.filter(status=TaskRun.Status.FOLDED), end)
    if ended is not None:
        if not ended:
            return []
        return list(TaskRun.objects.filter(pk__in=ended).select_related("task"))
    token = uuid.uuid4().hex
    if not items.filter(status=TaskRun.Status.FOLDED).update(lease_token=token, **end):
        return []
    ours = list(items.filter(lease_token=token).select_related("task"))
    TaskRun.objects.filter(pk__in=[item.pk for item in ours]).update(lease_token="")
    for item in ours:
        item.lease_token = ""
    return ours


def unfold(digest: TaskRun, now: datetime) -> bool:
    """True, and ``digest`` ended ``cancelled`` with its items out of it, when one of its
    items changed since it was folded (``_changed``); the caller has made sure it never
    reached the provider. In the caller's transaction, under the digest's lease."""
    listed = {item["run"]: item for item in digest.task.payload[DIGEST_KEY]["items"]}
    items = list(
        TaskRun.objects.filter(digest=digest, status=TaskRun.Status.FOLDED).select_related("task")
    )
    if not any(_changed(item, listed.get(item.pk), digest.task) for item in items):
        return False
    gone = [item.pk for item in items if not _still_planned(item)]
    message = f"Its digest, run {digest.pk}, was not sent: its runs changed since."
    TaskRun.objects.filter(pk__in=gone, status=TaskRun.Status.FOLDED).update(
        status=TaskRun.Status.CANCELLED, digest=None, error_message=message, finished_at=now
    )
    TaskRun.objects.filter(digest=digest, status=TaskRun.Status.FOLDED).update(
        status=TaskRun.Status.RETRYING,
        digest=None,
        next_attempt_at=now,
        error_code=DIGEST_CODE,
        error_message=f"{message} It goes again as its task says now.",
    )
    why = "Not sent: its runs changed since they were folded, and go again on their own."
    digest.close_attempt(TaskRun.Status.CANCELLED, code="changed", message=why, now=now)
    logger.info("digest run %s unfolded: its runs changed", digest.pk)
    return True


def _changed(item: TaskRun, listed: dict[str, Any] | None, digest: ScheduledTask) -> bool:
    """Whether ``item`` is no longer what ``digest`` lists of it: its task paused,
    cancelled or re-planned, or its line, recipient, channel or language changed."""
    task = item.task
    if task.status in (ScheduledTask.Status.PAUSED, ScheduledTask.Status.CANCELLED):
        return True
    if (task.recipient, task.kind, task.channel) != (digest.recipient, digest.kind, digest.channel):
        return True
    try:
        same = builders.language(task) == builders.language(digest)
        return not same or wording.entry(task, item) != listed or not _still_planned(item)
    except RemindersError:  # a payload its own message would refuse: it fails alone
        return True


def _still_planned(item: TaskRun) -> bool:
    """Whether ``item``'s occurrence is still one its task plans (a make-up's is one it
    missed): a re-planned task's runs not yet sent are cancelled."""
    if item.is_compensation:
        return True
    task = item.task
    return task.occurrence_after(item.occurrence - timedelta(seconds=1)) == item.occurrence


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
