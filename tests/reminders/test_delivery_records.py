"""What a job writes is true even when its last record fails, when its lease was taken
over, and when its message leaves late: a delivered message is recorded ``sent``, a
stale holder never touches the new holder's ledger row, and an in-doubt message is
sent again only while the provider still drops the copy."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from reminders.engine import dispatch
from reminders.engine.delivery import deliver, reserve, start
from reminders.engine.records import record_throttled
from reminders.engine.reservations import hand_back
from reminders.exceptions import InDoubtSendError, ThrottledSendError
from reminders.models import SendLog, TaskRun
from reminders.senders.base import Message, SendResult
from reminders.senders.memory import MemorySender
from tests.support.jobs import tick

pytestmark = pytest.mark.django_db


@contextmanager
def failing_once(marker: str) -> Iterator[list[str]]:
    """The first statement whose SQL contains ``marker`` fails in the database itself
    (it is swapped for a query of a table that does not exist), as a deadlock or a lost
    lock would fail it: on PostgreSQL its transaction is aborted."""
    failed: list[str] = []

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if marker in sql and not failed:
            failed.append(sql)
            return execute("SELECT * FROM reminders_no_such_table", None, False, context)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        yield failed


def after_lease(settings: Any) -> Any:
    return timezone.now() + timedelta(seconds=settings.REMINDERS_LEASE_SECONDS + 1)


# f. The job's last record ---------------------------------------------------------------


def test_a_failed_end_of_job_still_records_the_last_batch_sent(
    make_task, outbox, received, settings
):
    task = make_task(channel="memory")  # no de-duplication: a message in doubt is unknown
    stamp = f"{connection.ops.quote_name('last_run_at')} = "  # the tasks' last run time
    with failing_once(stamp) as failed:
        assert tick() == 1
    assert failed, "the end of the job never ran"
    run = task.runs.get()
    assert (run.status, run.crashes, run.lease_token) == ("sent", 0, "")
    assert SendLog.objects.get().status == "sent"
    assert received == [("run_sent", run.pk, "sent")]
    # The next claim finds nothing to decide: no crash counted, nothing unknown.
    assert tick(now=after_lease(settings)) == 0
    run.refresh_from_db()
    assert (run.status, run.crashes) == ("sent", 0)
    assert [name for name, *_ in received] == ["run_sent"]
    assert len(outbox) == 1


class Rollback(Exception):
    pass


def claim_all() -> dispatch.Claim:
    dispatch.materialize()
    return dispatch.claim("test", 100)


def test_closing_runs_keeps_their_lease_until_it_commits(make_task):
    make_task()
    claim = claim_all()
    [job] = start(claim.token, claim.run_ids)
    token = job.run.lease_token
    with pytest.raises(Rollback), transaction.atomic():
        assert TaskRun.close_attempts([job.run], TaskRun.Status.SENT, timezone.now()) == 1
        raise Rollback
    # Rolled back: the run is still ours, and closing it again still works.
    assert job.run.lease_token == token
    assert TaskRun.close_attempts([job.run], TaskRun.Status.SENT, timezone.now()) == 1
    assert TaskRun.objects.get().status == "sent"


def test_closing_one_run_keeps_its_lease_until_it_commits(make_task):
    make_task()
    claim = claim_all()
    [job] = start(claim.token, claim.run_ids)
    token = job.run.lease_token
    with pytest.raises(Rollback), transaction.atomic():
        assert job.run.close_attempt(TaskRun.Status.FAILED, code="x")
        raise Rollback
    assert job.run.lease_token == token
    assert job.run.close_attempt(TaskRun.Status.FAILED, code="x")
    assert TaskRun.objects.get().status == "failed"


# g. A stale holder and the ledger --------------------------------------------------------


def taken_over(settings: Any) -> tuple[Any, Any]:
    """A job that reserved its key and whose lease then ran out; the run's new holder
    has reserved the key again (in doubt, re-sent where the provider drops copies).
    Returns the stale job and the new one."""
    claim = claim_all()
    [stale] = start(claim.token, claim.run_ids)
    reserve([stale])
    later = after_lease(settings)
    second = dispatch.claim("other", 10, now=later)
    [current] = start(second.token, second.run_ids, now=later)
    ready, _ = reserve([current])
    assert ready == [current]
    return stale, current


def test_a_stale_holder_s_hand_back_leaves_the_new_holder_s_key_alone(make_task, settings):
    make_task(channel="memory_dedup")
    stale, current = taken_over(settings)
    deferred: list[Any] = []
    hand_back([stale], deferred, time.time())
    row = SendLog.objects.get()
    assert (row.status, row.run_id, row.attempts) == ("sending", current.run.pk, 2)


def test_a_stale_holder_s_hand_back_of_a_known_key_leaves_it_alone(make_task, settings):
    make_task(channel="memory_dedup")
    stale, _ = taken_over(settings)
    stale.fresh = False  # as a key tried before: put back to failed or unknown
    hand_back([stale], [], time.time())
    row = SendLog.objects.get()
    assert (row.status, row.attempts) == ("sending", 2)


def test_a_stale_holder_s_throttled_reply_leaves_the_new_holder_s_key_alone(make_task, settings):
    make_task(channel="memory_dedup")
    stale, _ = taken_over(settings)
    record_throttled(stale, ThrottledSendError("api freq out of limit", code="45009"))
    row = SendLog.objects.get()
    assert (row.status, row.reply_code) == ("sending", "")


def test_a_current_holder_s_hand_back_and_throttled_reply_still_change_its_rows(make_task):
    make_task(channel="memory_dedup")
    make_task(channel="memory_dedup")
    claim = claim_all()
    jobs = start(claim.token, claim.run_ids)
    ready, _ = reserve(jobs)
    record_throttled(ready[0], ThrottledSendError("api freq out of limit", code="45009"))
    hand_back(ready[1:], [], time.time())
    assert list(SendLog.objects.values_list("status", "reply_code")) == [("failed", "45009")]


# h. The re-send window, when the message leaves -----------------------------------------


class ReplyLost(MemorySender):
    """Like WeCom with its duplicate check, and the reply to the next ``lose`` sends is
    lost after the message was delivered."""

    lose = 0

    def send(self, message: Message) -> SendResult:
        result = super().send(message)
        if ReplyLost.lose:
            ReplyLost.lose -= 1
            raise InDoubtSendError("no answer (read timeout)", code="timeout")
        return result


@pytest.fixture
def lossy_channel(settings: Any) -> str:
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        "lossy": {
            "BACKEND": f"{__name__}.ReplyLost",
            "OPTIONS": {"duplicate_check": True},
        },
    }
    ReplyLost.lose = 0
    return "lossy"


def test_an_in_doubt_message_is_not_resent_once_the_window_passed_before_it_left(
    make_task, outbox, received, lossy_channel
):
    doubtful = make_task(channel=lossy_channel)
    ReplyLost.lose = 1
    assert tick() == 0
    assert len(outbox) == 1  # delivered, but the answer was lost
    assert SendLog.objects.get().status == "unknown"
    first = make_task(channel=lossy_channel)
    dispatch.materialize()
    now = timezone.now()
    TaskRun.objects.filter(task=first).update(next_attempt_at=now - timedelta(seconds=2))
    TaskRun.objects.filter(task=doubtful).update(next_attempt_at=now - timedelta(seconds=1))
    claim = dispatch.claim("test", 10, now=now)
    # One second of the provider's window is left when the job starts; the message
    # before it takes two to answer.
    window = timedelta(seconds=ReplyLost.duplicate_check_seconds)
    moved = window - timedelta(seconds=1)
    SendLog.objects.update(created_at=timezone.now() - moved)
    for key, (at, message_id) in list(MemorySender._deliveries.items()):
        MemorySender._deliveries[key] = (at - moved.total_seconds(), message_id)
    MemorySender.script[:] = [2.0]
    received.clear()
    from django.test import TestCase

    with TestCase.captureOnCommitCallbacks(execute=True):
        assert deliver(claim.token, claim.run_ids) == 1
    run = doubtful.runs.get()
    assert (run.status, run.error_code) == ("unknown", "unknown")
    assert "window" in run.error_message
    assert SendLog.objects.get(run=run).status == "unknown"
    assert ("run_unknown", run.pk, "unknown") in received
    # Never handed to the provider past its window: no second copy delivered.
    assert [m.recipient for m in outbox] == [doubtful.recipient, first.recipient]
