"""The engine's django-q2 cluster beside a host's own django-q2 on Redis, in one process.

The host's django-q2 settings are django-q2's ``Conf``, fixed when it was imported; the
fixture sets it as a CRM on Redis would have it and puts it back afterwards.
"""

import os
import uuid
from collections.abc import Iterator

import pytest
import redis
from django_q.brokers import get_broker
from django_q.brokers.redis_broker import Redis
from django_q.conf import Conf
from django_q.models import OrmQ
from django_q.tasks import async_task

from reminders.conf import settings as conf
from reminders.engine import cluster, dispatch
from tests.support.jobs import run_queued
from tests.support.transactions import transactions

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


@pytest.fixture
def host_on_redis() -> Iterator[str]:
    """This process's django-q2 as a CRM's own on Redis, under a queue name of this
    test's own; yields that name."""
    saved = {name: value for name, value in vars(Conf).items() if name.isupper()}
    name = f"crm-{uuid.uuid4().hex[:8]}"
    Conf.ORM = None
    Conf.REDIS = REDIS_URL
    Conf.CLUSTER_NAME = name
    Conf.WORKERS = Conf.QUEUE_LIMIT = 8
    Conf.TIMEOUT, Conf.RETRY = 60, 120
    Conf.SCHEDULER = True
    try:
        yield name
    finally:
        for attribute, value in saved.items():
            setattr(Conf, attribute, value)
        redis.from_url(REDIS_URL).delete(redis_list(name))


def redis_list(queue: str) -> str:
    """Where django-q2's Redis broker keeps a queue's jobs."""
    return f"django_q:{queue}:q"


def test_async_task_s_cluster_names_only_a_queue_on_the_host_s_broker(host_on_redis):
    """Why the engine hands async_task a broker of its own: ``cluster=`` (and
    ``get_broker``) keep the broker the host's settings pick."""
    broker = get_broker(cluster.bulk_queue())
    assert isinstance(broker, Redis)
    assert broker.list_key == redis_list("reminders")


def test_claims_go_to_the_engine_s_queue_while_the_host_s_jobs_go_to_redis(
    host_on_redis, make_task, outbox
):
    make_task()
    dispatch.materialize()
    claimed = dispatch.claim("test", 10)
    async_task("math.floor", 1.5)  # the CRM's own job, from the same process
    assert set(OrmQ.objects.values_list("key", flat=True)) == {"reminders"}
    assert redis.from_url(REDIS_URL).llen(redis_list(host_on_redis)) == 1
    assert len(claimed.run_ids) == 1
    assert run_queued() == 1
    assert len(outbox) == 1


def test_run_as__sets_what_drives_a_cluster_and_leaves_where_jobs_go(host_on_redis, settings, db):
    settings.REMINDERS_CLUSTER = {"timeout": 100, "retry": 200, "bulk": 3}
    prefix = Conf.PREFIX
    broker = cluster.run_as(cluster.high_queue(), 4)
    assert isinstance(broker, cluster.EngineBroker)
    assert (broker.list_key, broker.info()) == ("reminders-high", "ORM default")
    driven = (Conf.WORKERS, Conf.QUEUE_LIMIT, Conf.TIMEOUT, Conf.RETRY, Conf.BULK)
    # The queue in hand holds one job per worker (django-q2's default is their square):
    # a host takes no more than it can start soon, and leaves the rest to other hosts.
    assert driven == (4, 4, 100, 200, 3)
    assert (Conf.MAX_ATTEMPTS, Conf.SAVE_LIMIT, Conf.SCHEDULER) == (1, -1, False)
    # Where an async_task of CRM code running in our workers goes: still the CRM's.
    assert Conf.ORM is None
    assert (host_on_redis, prefix) == (Conf.CLUSTER_NAME, Conf.PREFIX)
    assert isinstance(get_broker(), Redis)


def test_cluster__defaults_without_any_setting(settings):
    del settings.REMINDERS_CLUSTER
    settings.REMINDERS_LEASE_SECONDS = 100
    assert conf.CLUSTER == {
        "name": "reminders",
        "orm": "default",
        "workers": 2,
        "timeout": 80,
        "retry": 160,
        "max_attempts": 1,
        "save_limit": -1,
        "poll": 0.1,
        "bulk": 10,
        "recycle": 500,
        "max_rss": None,
        "guard_cycle": 0.5,
        "cpu_affinity": 0,
        "daemonize_workers": True,
    }
    assert conf.JOB_TIMEOUT == 80


@pytest.mark.django_db(transaction=True)
def test_dequeue__takes_jobs_oldest_first_in_one_transaction_and_locks_them(monkeypatch):
    monkeypatch.setattr(Conf, "BULK", 10)
    monkeypatch.setattr(Conf, "WORKERS", 10)
    monkeypatch.setattr(Conf, "POLL", 0)
    broker = cluster.broker("reminders-dequeue-test")
    for n in range(3):
        broker.enqueue(f"job-{n}")
    OrmQ.objects.filter(payload="job-0").update(lock=OrmQ.objects.get(payload="job-2").lock)
    with transactions() as counted:
        taken = broker.dequeue()
    assert [payload for _, payload in taken] == ["job-0", "job-1", "job-2"]
    assert counted.count == 1, str(counted)
    # Locked until they are retried: another pusher finds nothing, and nor does this one.
    assert cluster.broker("reminders-dequeue-test").dequeue() is None
    assert OrmQ.objects.filter(key="reminders-dequeue-test").count() == 3


@pytest.mark.django_db(transaction=True)
def test_dequeue__takes_no_more_jobs_than_the_cluster_has_workers(monkeypatch):
    """One host's pusher taking ``bulk`` jobs at once left another host's workers idle
    while its own worked through them (seen with two hosts sharing a burst)."""
    monkeypatch.setattr(Conf, "BULK", 10)
    monkeypatch.setattr(Conf, "WORKERS", 3)
    monkeypatch.setattr(Conf, "POLL", 0)
    broker = cluster.broker("reminders-dequeue-test")
    for n in range(5):
        broker.enqueue(f"job-{n}")
    assert [payload for _, payload in broker.dequeue()] == ["job-0", "job-1", "job-2"]
    other_host = cluster.broker("reminders-dequeue-test")
    assert [payload for _, payload in other_host.dequeue()] == ["job-3", "job-4"]


@pytest.mark.django_db(transaction=True)
def test_dequeue__takes_at_most_bulk_jobs_and_none_of_another_queue(monkeypatch):
    monkeypatch.setattr(Conf, "BULK", 2)
    monkeypatch.setattr(Conf, "WORKERS", 10)
    monkeypatch.setattr(Conf, "POLL", 0)
    broker = cluster.broker("reminders-dequeue-test")
    cluster.broker("reminders-dequeue-other").enqueue("other")
    for n in range(3):
        broker.enqueue(f"job-{n}")
    assert [payload for _, payload in broker.dequeue()] == ["job-0", "job-1"]
    assert [payload for _, payload in broker.dequeue()] == ["job-2"]
    assert broker.dequeue() is None
