"""The scheduler and the pusher of our cluster when the database goes away and comes
back: the scheduler hands back what it claimed and no worker started at its first good
tick, the pusher polls again within a fraction of a second instead of dying for 10."""

from __future__ import annotations

import time

import pytest
from django_q.conf import Conf

from reminders.engine import cluster, outage
from reminders.engine.worker import ReminderWorker
from reminders.models import TaskRun
from tests.support.away import database_away
from tests.support.jobs import queued, run_queued


@pytest.fixture(autouse=True)
def quick_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outage, "AWAY_POLL_SECONDS", 0.01)


@pytest.mark.django_db(transaction=True)
def test_the_first_good_tick_after_the_database_failed_one_hands_back_unstarted_claims(
    make_task, outbox
):
    make_task()
    worker = ReminderWorker(with_cluster=False)
    worker.tick()
    before = TaskRun.objects.get()
    assert before.status == "queued"
    with database_away() as away:
        assert worker._tick_safely() is False  # logged, and tried again next tick
    assert away.refused
    worker._tick_safely()
    # Its job may have failed while the database was away: the run is claimed again at
    # once, not after its lease, and the stale job finds nothing to start.
    after = TaskRun.objects.get()
    assert after.status == "queued"
    assert after.lease_token != before.lease_token
    assert len(queued()) == 2
    assert run_queued() == 1
    assert len(outbox) == 1


@pytest.mark.django_db(transaction=True)
def test_a_failed_read_of_when_work_is_due_also_hands_back_at_the_next_good_tick(make_task):
    make_task()
    worker = ReminderWorker(tick=30, with_cluster=False)
    worker.tick()
    token = TaskRun.objects.get().lease_token
    with database_away():
        assert worker._sleep_seconds() == 30  # a tick's sleep, and tried again
    worker._tick_safely()
    assert TaskRun.objects.get().lease_token not in ("", token)


@pytest.mark.django_db(transaction=True)
def test_a_good_tick_hands_nothing_back(make_task):
    make_task()
    worker = ReminderWorker(with_cluster=False)
    worker.tick()
    token = TaskRun.objects.get().lease_token
    worker._tick_safely()
    assert TaskRun.objects.get().lease_token == token


@pytest.mark.django_db(transaction=True)
def test_dequeue__a_database_away_is_polled_again_shortly_not_raised(monkeypatch):
    monkeypatch.setattr(Conf, "POLL", 0)
    broker = cluster.broker("reminders-away-test")
    broker.enqueue("job-0")
    began = time.monotonic()
    with database_away() as away:
        # django-q2's pusher sleeps 10 s on an error, and exits for another to start.
        assert broker.dequeue() is None
    assert away.refused
    assert time.monotonic() - began < 1
    assert broker.away
    assert [payload for _, payload in broker.dequeue()] == ["job-0"]
    assert not broker.away


@pytest.mark.django_db
def test_answers__only_when_the_database_does():
    with database_away(probes=1):
        assert not outage.answers()
        assert outage.answers()


@pytest.mark.django_db
def test_wait_until_answers__gives_up_at_its_deadline():
    began = time.monotonic()
    with database_away(probes=-1):
        assert not outage.wait_until_answers(began + 0.1)
    assert time.monotonic() - began < 0.5
