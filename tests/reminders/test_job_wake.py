"""A cluster's pusher waits for its queue's jobs instead of polling an empty queue.

On PostgreSQL the pusher (django-q2's own loop, run here in a thread on our broker)
listens for the notification a claim's enqueue sends at commit, and reads the queue
again at least every ``QUIET_POLL_SECONDS``: a job queued while it waits is taken at
once, and one whose notification was lost, or whose lock passed, within that bound.
Elsewhere it polls every ``poll`` seconds, as django-q2 does.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_q import pusher as django_q_pusher
from django_q.conf import Conf
from django_q.models import OrmQ

from reminders.engine import cluster, wake
from tests.support.processes import wait_until, wake_listeners

QUEUE = "reminders-wake-test"
# Well over a notification's latency on a local server, well under the quiet poll the
# notify tests set (so that only a notification explains a take this prompt).
PROMPTLY = 1.0


@pytest.fixture
def postgres() -> None:
    if connection.vendor != "postgresql":
        pytest.skip(f"{connection.vendor} has no LISTEN/NOTIFY: the pusher polls there")


def job_listeners() -> int:
    return len(wake_listeners(wake.JOBS_APPLICATION_NAME))


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    wait_until(predicate, timeout=timeout, what=what, interval=0.02)


@dataclass
class Pusher:
    tasks: queue.Queue
    stop: threading.Event
    thread: threading.Thread


@contextmanager
def pusher(monkeypatch: pytest.MonkeyPatch, *, listening: bool = True) -> Iterator[Pusher]:
    """django-q2's pusher on a cluster's broker for ``QUEUE`` (as ``run_as`` makes it), in
    a thread; with ``listening``, once it listens and waits. It must stop within a poll."""
    monkeypatch.setattr(django_q_pusher, "setproctitle", None)  # leave pytest's title be
    broker = cluster.broker(QUEUE)
    broker.listens = True
    running = Pusher(queue.Queue(), threading.Event(), threading.Thread(daemon=True))

    def body() -> None:
        try:
            django_q_pusher.pusher(running.tasks, running.stop, broker=broker)
        finally:
            connections.close_all()

    running.thread = threading.Thread(target=body, daemon=True)
    running.thread.start()
    try:
        if listening:
            wait_for(lambda: job_listeners() == 1, timeout=5, what="the pusher to listen")
            time.sleep(0.3)  # its first read after listening is over: it waits
        yield running
    finally:
        running.stop.set()
        running.thread.join(5)
        if broker._sleeper is not None:  # stopped out of a read, not a wait
            broker._sleeper.close()
    assert not running.thread.is_alive(), "the pusher did not stop"


def enqueue() -> float:
    """A job queued in a transaction of its own; when it committed."""
    with transaction.atomic():
        cluster.enqueue(QUEUE, "math.floor", 1.5, task_name="wake-test")
    return time.monotonic()


@pytest.mark.django_db(transaction=True)
def test_a_job_queued_while_the_pusher_waits_is_taken_at_once(postgres, monkeypatch):
    monkeypatch.setattr(cluster, "QUIET_POLL_SECONDS", 30.0)
    latencies = []
    with pusher(monkeypatch) as running:
        for _ in range(3):
            committed = enqueue()
            task = running.tasks.get(timeout=10)
            latencies.append(time.monotonic() - committed)
            assert task["name"] == "wake-test"
            time.sleep(0.3)
    assert max(latencies) < PROMPTLY, latencies
    assert OrmQ.objects.filter(key=QUEUE, lock__gt=timezone.now()).count() == 3  # taken


@pytest.mark.django_db(transaction=True)
def test_a_lost_notification_costs_at_most_the_quiet_poll(postgres, monkeypatch):
    monkeypatch.setattr(cluster, "QUIET_POLL_SECONDS", 1.0)
    monkeypatch.setattr(cluster.wake, "notify", lambda *args, **kwargs: None)  # lost
    with pusher(monkeypatch) as running:
        committed = enqueue()
        running.tasks.get(timeout=10)
        took = time.monotonic() - committed
    assert took < 1.0 + 0.5, took


@pytest.mark.django_db(transaction=True)
def test_a_job_whose_lock_passes_is_taken_again_within_the_quiet_poll(postgres, monkeypatch):
    """A job in the hand of a pusher that died: nothing notifies its lock's end."""
    monkeypatch.setattr(cluster, "QUIET_POLL_SECONDS", 1.0)
    enqueue()
    passes = timezone.now() + timedelta(seconds=1.0)
    OrmQ.objects.filter(key=QUEUE).update(lock=passes)
    with pusher(monkeypatch) as running:
        running.tasks.get(timeout=10)
        late = (timezone.now() - passes).total_seconds()
    assert 0 <= late < 1.0 + 0.5, late


@pytest.mark.django_db(transaction=True)
def test_a_broken_listening_connection_is_replaced_at_once(postgres, monkeypatch):
    """A restart or an admin ends the session: the pusher reads the queue and listens
    again at once, not a quiet poll later, and hears the next job."""
    monkeypatch.setattr(cluster, "QUIET_POLL_SECONDS", 30.0)
    with pusher(monkeypatch) as running:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = %s AND datname = current_database()",
                [wake.JOBS_APPLICATION_NAME],
            )
        wait_for(lambda: job_listeners() == 0, timeout=5, what="the session to end")
        wait_for(lambda: job_listeners() == 1, timeout=PROMPTLY * 2, what="a new listener")
        time.sleep(0.3)
        committed = enqueue()
        running.tasks.get(timeout=10)
        assert time.monotonic() - committed < PROMPTLY


@pytest.mark.django_db(transaction=True)
def test_jobs_queued_before_it_listens_are_taken_when_it_starts(postgres, monkeypatch):
    monkeypatch.setattr(cluster, "QUIET_POLL_SECONDS", 30.0)
    enqueue()
    with pusher(monkeypatch, listening=False) as running:
        assert running.tasks.get(timeout=5)["name"] == "wake-test"


@pytest.mark.django_db(transaction=True)
def test_a_waiting_pusher_stops_within_a_poll(postgres, monkeypatch):
    monkeypatch.setattr(cluster, "QUIET_POLL_SECONDS", 30.0)
    with pusher(monkeypatch) as running:
        running.stop.set()
        started = time.monotonic()
        running.thread.join(5)
        assert time.monotonic() - started < 1.0
    wait_for(lambda: job_listeners() == 0, timeout=5, what="its session to end")


@pytest.mark.django_db(transaction=True)
def test_enqueue__notifies_its_queue_once_per_transaction_at_commit():
    with CaptureQueriesContext(connection) as queries:
        with transaction.atomic():
            for n in range(3):
                cluster.enqueue(QUEUE, "math.floor", n, task_name=f"job-{n}")
            cluster.enqueue(cluster.high_queue(), "math.floor", 1, task_name="high")
            assert not [q for q in queries.captured_queries if "pg_notify" in q["sql"]]
        sent = [q["sql"] for q in queries.captured_queries if "pg_notify" in q["sql"]]
    expected = [wake.job_channel(QUEUE), wake.job_channel(cluster.high_queue())]
    if connection.vendor != "postgresql":
        assert sent == []
        return
    assert len(sent) == 2, sent
    assert all(any(channel in sql for sql in sent) for channel in expected), sent


@pytest.mark.django_db(transaction=True)
def test_elsewhere_an_empty_queue_is_polled_every_poll(monkeypatch):
    if connection.vendor == "postgresql":
        pytest.skip("PostgreSQL waits for notifications")
    monkeypatch.setattr(Conf, "POLL", 0.2)
    broker = cluster.broker(QUEUE)
    broker.listens = True
    started = time.monotonic()
    assert broker.dequeue() is None
    assert 0.2 <= time.monotonic() - started < 1.0
    assert broker._sleeper is None
