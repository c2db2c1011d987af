"""A digest's items end once, whoever settles them: two schedulers settling the same
ended digest side by side (``settle_ended``), or a digest's record of ``sent`` settled
twice (``settle_sent``), end each item once and tell it once. On real transactions
(PostgreSQL and MariaDB): the items are held locked while both callers start, so that
both have read them before either writes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from reminders import signals
from reminders.engine import digest_ends, dispatch
from reminders.exceptions import PermanentSendError
from reminders.models import DIGEST_KEY, TaskRun
from reminders.senders import SendResult
from reminders.senders.memory import MemorySender
from tests.support.digests import THURSDAY, at, follow_up, release
from tests.support.jobs import run_queued
from tests.support.locks import Paused, Worker, require_row_locks, statement

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def digested(settings: Any) -> None:
    settings.REMINDERS_KINDS = {
        "follow_up": {"digest_seconds": 900, "max_lateness_seconds": 400 * 24 * 3600}
    }


@pytest.fixture
def failed_digest(digested: None, outbox: list) -> tuple[TaskRun, list[TaskRun]]:
    """A digest of three items that failed for good, its items not settled yet."""
    for minute in (0, 1, 2):
        follow_up("alice", at(THURSDAY, 9, minute), f"C{minute}")
    MemorySender.script.append(PermanentSendError("no such member", code="81013"))
    goes = release("alice", at(THURSDAY, 9, 15))
    dispatch.materialize(now=goes)
    dispatch.claim("test", 100, now=goes)
    run_queued(now=goes)
    digest = TaskRun.objects.get(task__payload__has_key=DIGEST_KEY)
    items = list(TaskRun.objects.filter(digest=digest, status=TaskRun.Status.FOLDED))
    assert digest.status == TaskRun.Status.FAILED and len(items) == 3
    return digest, items


def lock_items() -> None:
    with transaction.atomic():
        list(TaskRun.objects.filter(status=TaskRun.Status.FOLDED).select_for_update())


def side_by_side(settle: Callable[[], Any]) -> None:
    """``settle`` on two threads at once, both started while another transaction holds
    the items locked, so that both read them before either writes."""
    holder = Paused(lock_items, after=statement("SELECT", "reminders_taskrun"))
    holder.hold()
    workers = [Worker(settle), Worker(settle)]
    for worker in workers:
        worker.start()
    assert [worker.blocked_or_done() for worker in workers] == ["blocked", "blocked"]
    holder.resume()
    holder.outcome()
    for worker in workers:
        worker.outcome()


def told(received: list, name: str) -> list[int]:
    return sorted(pk for signal, pk, _status in received if signal == name)


def test_settle_ended__two_schedulers_side_by_side_tell_each_item_once(
    failed_digest: tuple[TaskRun, list[TaskRun]], received: list
) -> None:
    require_row_locks()
    digest, items = failed_digest
    now = at(THURSDAY, 9, 20)
    received.clear()
    side_by_side(lambda: digest_ends.settle_ended(now))
    assert told(received, "run_failed") == sorted(item.pk for item in items)
    statuses = TaskRun.objects.filter(digest=digest).values_list("status", flat=True)
    assert set(statuses) == {TaskRun.Status.FAILED}


def test_settle_sent__settled_twice_side_by_side_tells_each_item_once(
    failed_digest: tuple[TaskRun, list[TaskRun]], received: list
) -> None:
    require_row_locks()
    digest, items = failed_digest
    now = at(THURSDAY, 9, 20)
    received.clear()

    def settle() -> None:
        with transaction.atomic():
            digest_ends.settle_sent([(digest, SendResult("msg-1"))], now)

    side_by_side(settle)
    assert told(received, "run_sent") == sorted(item.pk for item in items)


def test_settle_ended__called_again_tells_nothing_more(
    failed_digest: tuple[TaskRun, list[TaskRun]], received: list
) -> None:
    _digest, items = failed_digest
    now = at(THURSDAY, 9, 20)
    received.clear()
    assert digest_ends.settle_ended(now) == 3
    assert digest_ends.settle_ended(now) == 0
    assert told(received, "run_failed") == sorted(item.pk for item in items)


def test_settle_sent__with_no_receiver_of_run_sent_reads_no_item_back(
    failed_digest: tuple[TaskRun, list[TaskRun]],
) -> None:
    """What no one is told needs no read: the items end in one UPDATE, on every
    database, and no SELECT (of the items with their tasks, for the signal) is made.
    Their tasks are the job's end to stamp (``jobs.tried``), not this record's."""
    assert not signals.run_sent.has_listeners(TaskRun)
    digest, items = failed_digest
    digest = TaskRun.objects.select_related("task").get(pk=digest.pk)  # as a job holds it
    now = at(THURSDAY, 9, 20)
    with CaptureQueriesContext(connection) as queries, transaction.atomic():
        digest_ends.settle_sent([(digest, SendResult("msg-1"))], now)
    ended = TaskRun.objects.filter(pk__in=[item.pk for item in items])
    assert set(ended.values_list("status", "finished_at")) == {(TaskRun.Status.SENT, now)}
    statements = [q["sql"].split()[0] for q in queries.captured_queries]
    assert statements.count("UPDATE") == 1
    assert "SELECT" not in statements
