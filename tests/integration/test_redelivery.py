"""At-least-once delivery from django-q2 and duplicate scheduler ticks send nothing twice.

In-process, but on committed data (``transaction=True``) and with real concurrency
where it matters: two threads, two connections, one database.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone
from django_q.brokers import get_broker
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from reminders.engine import dispatch
from reminders.engine.delivery import deliver
from reminders.models import ScheduledTask, SendLog, TaskRun
from tests.support.jobs import queued, run_queued

pytestmark = pytest.mark.django_db(transaction=True)


def make_due(make_task: Callable[..., ScheduledTask], count: int) -> list[ScheduledTask]:
    at = timezone.now()
    return [make_task(at=at) for _ in range(count)]


def assert_each_sent_once(tasks: list[ScheduledTask], outbox: list) -> None:
    keys = {task.runs.get().ledger_key for task in tasks}
    sent = Counter(message.idempotency_key for message in outbox)
    assert set(sent) == keys
    assert max(sent.values()) == 1, sent.most_common(3)
    assert set(TaskRun.objects.values_list("status", "attempts")) == {("sent", 1)}
    assert set(SendLog.objects.values_list("status", "attempts")) == {("sent", 1)}


def concurrently(*calls: Callable[[], Any]) -> list[Any]:
    """Run the calls in threads released together; each thread has its own connection."""
    barrier = threading.Barrier(len(calls), timeout=30)

    def run(call: Callable[[], Any]) -> Any:
        try:
            barrier.wait()
            return call()
        finally:
            connection.close()

    with ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(run, call) for call in calls]
        return [future.result(timeout=60) for future in futures]


def test_redelivered_job__the_same_payload_twice_sends_each_message_once(make_task, outbox):
    tasks = make_due(make_task, 25)  # two jobs: RUNS_PER_JOB is 20
    dispatch.materialize()
    assert len(dispatch.claim("scheduler", 100).run_ids) == 25
    assert len(queued()) == 2
    assert run_queued(keep=True) == 25
    assert run_queued() == 0  # the broker hands the same payloads out again
    assert not OrmQ.objects.exists()
    assert_each_sent_once(tasks, outbox)


def test_redelivered_job__the_broker_hands_out_a_row_again_once_its_lock_expires(make_task, outbox):
    tasks = make_due(make_task, 25)
    dispatch.materialize()
    dispatch.claim("scheduler", 100)
    broker = get_broker()
    first = broker.dequeue()
    # The worker that took them died without acknowledging; the retry window passes.
    OrmQ.objects.update(lock=timezone.now() - timedelta(seconds=1))
    second = broker.dequeue()
    assert [row_id for row_id, _ in first] == [row_id for row_id, _ in second]
    sent = 0
    for _, payload in [*first, *second]:
        job = SignedPackage.loads(payload)
        sent += deliver(*job["args"], **job["kwargs"])
    assert sent == 25
    assert_each_sent_once(tasks, outbox)


def test_redelivered_job__two_workers_executing_it_at_once_send_each_message_once(
    make_task, outbox
):
    tasks = make_due(make_task, 20)
    dispatch.materialize()
    claim = dispatch.claim("scheduler", 100)
    assert len(queued()) == 1
    results = concurrently(
        lambda: deliver(claim.token, claim.run_ids),
        lambda: deliver(claim.token, claim.run_ids),
    )
    assert sorted(results) == [0, 20]
    assert_each_sent_once(tasks, outbox)


def test_duplicate_tick__materializing_twice_creates_one_run_and_one_send(make_task, outbox):
    tasks = make_due(make_task, 5)
    now = timezone.now()
    dispatch.materialize(now)
    dispatch.materialize(now)
    assert TaskRun.objects.count() == 5
    # A second scheduler that read the tasks before the first advanced them.
    for task in tasks:
        ScheduledTask.objects.filter(pk=task.pk).update(
            next_run=task.next_run, status=ScheduledTask.Status.ACTIVE
        )
    dispatch.materialize(now)
    assert TaskRun.objects.count() == 5
    dispatch.claim("scheduler", 100)
    dispatch.claim("scheduler", 100)
    assert run_queued() == 5
    assert_each_sent_once(tasks, outbox)


def test_duplicate_tick__two_schedulers_at_once_make_one_run_and_one_lease_each(make_task, outbox):
    tasks = make_due(make_task, 60)
    concurrently(dispatch.materialize, dispatch.materialize)
    assert TaskRun.objects.count() == 60
    first, second = (
        claim.run_ids
        for claim in concurrently(
            lambda: dispatch.claim("a", 100), lambda: dispatch.claim("b", 100)
        )
    )
    assert not set(first) & set(second)
    assert sorted(first + second) == sorted(TaskRun.objects.values_list("pk", flat=True))
    owners = Counter(TaskRun.objects.values_list("lease_owner", flat=True))
    assert owners == {owner: len(ids) for owner, ids in (("a", first), ("b", second)) if ids}
    assert run_queued() == 60
    assert_each_sent_once(tasks, outbox)
