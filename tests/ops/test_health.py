"""/healthz: 200 when the database answers, a scheduler ticks and queued jobs are taken;
503 naming the check that fails otherwise."""

from __future__ import annotations

import signal
from datetime import timedelta

import pytest
from django.core.cache import caches
from django.db import connection
from django.utils import timezone
from django_q.models import OrmQ
from django_q.status import Stat

from reminders.engine import dispatch
from reminders.models import SchedulerHeartbeat
from tests.support.processes import (
    alive,
    database_url,
    kill_tree,
    start_reminders,
    wait_exit,
    wait_until,
)

pytestmark = pytest.mark.django_db


def beat(seconds_ago: float) -> None:
    at = timezone.now() - timedelta(seconds=seconds_ago)
    SchedulerHeartbeat.objects.beat("host:1", host="host", pid=1, started_at=at, now=at)


def healthz(client) -> tuple[int, dict]:  # type: ignore[no-untyped-def]
    response = client.get("/healthz")
    assert response["Content-Type"] == "application/json"
    assert "no-cache" in response["Cache-Control"]
    return response.status_code, response.json()


def statuses(body: dict) -> dict[str, str]:
    return {name: check["status"] for name, check in body["checks"].items()}


def test_healthy(client):
    beat(3)
    status, body = healthz(client)
    assert status == 200
    assert body == {
        "status": "ok",
        "checks": {
            "database": {"status": "ok", "reason": "reachable"},
            "scheduler": {"status": "ok", "reason": "last tick 3 s ago"},
            "cluster": {"status": "ok", "reason": "queued jobs are being taken"},
        },
    }


def test_no_heartbeat(client):
    status, body = healthz(client)
    assert status == 503
    assert body["status"] == "failing"
    assert body["checks"]["scheduler"] == {
        "status": "failing",
        "reason": "no scheduler heartbeat recorded",
    }
    assert statuses(body) == {"database": "ok", "scheduler": "failing", "cluster": "ok"}


def test_stale_heartbeat(client, settings):
    settings.OPS_HEARTBEAT_MAX_AGE_SECONDS = 60
    beat(61)
    status, body = healthz(client)
    assert status == 503
    assert body["checks"]["scheduler"] == {
        "status": "failing",
        "reason": "no scheduler has ticked for 61 s",
    }


def test_a_job_no_worker_takes(client, settings, make_task):
    settings.OPS_HEALTH_QUEUE_WAIT_SECONDS = 120
    beat(1)
    make_task()
    dispatch.materialize()
    dispatch.claim("test", 10)  # queued for django-q2, and no cluster runs here
    assert healthz(client)[0] == 200  # just queued
    OrmQ.objects.update(lock=timezone.now() - timedelta(seconds=130))
    status, body = healthz(client)
    assert status == 503
    assert body["checks"]["cluster"]["status"] == "failing"
    assert body["checks"]["cluster"]["reason"].startswith("a queued job has waited 13")
    # Taken by a worker (the ORM broker pushes its lock into the future): fine again.
    OrmQ.objects.update(lock=timezone.now() + timedelta(seconds=60))
    assert healthz(client)[0] == 200


@pytest.mark.django_db(transaction=True)
def test_database_unreachable(client):
    saved = dict(connection.settings_dict)
    connection.close()
    if connection.vendor == "sqlite":
        connection.settings_dict["NAME"] = "/nonexistent/ops-health/db.sqlite3"
    else:
        connection.settings_dict.update(HOST="127.0.0.1", PORT="1")
    try:
        status, body = healthz(client)
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)
    assert status == 503
    skipped = {"status": "failing", "reason": "not checked: the database is unreachable"}
    assert body == {
        "status": "failing",
        "checks": {
            "database": {"status": "failing", "reason": "unreachable"},
            "scheduler": skipped,
            "cluster": skipped,
        },
    }
    assert "nonexistent" not in str(body) and "5432" not in str(body)


REDIS = "redis://127.0.0.1:6379/11"


@pytest.fixture
def shared_cache(settings):  # type: ignore[no-untyped-def]
    """django-q2's cache (``default``) in Redis, shared by every process; empty."""
    settings.CACHES = {
        **settings.CACHES,
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS},
    }
    caches["default"].clear()
    yield REDIS
    caches["default"].clear()


def test_with_a_shared_cache_a_cluster_must_report(client, shared_cache):
    beat(1)
    status, body = healthz(client)
    assert status == 503
    assert body["checks"]["cluster"] == {
        "status": "failing",
        "reason": "no django-q2 cluster reports its status",
    }


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_healthz_follows_a_real_run_reminders(client, settings, tmp_path):
    """django-q2's cluster stats reach another process only through a shared cache:
    with local memory (the default) this process sees none while a cluster runs."""
    env = {
        "DATABASE_URL": database_url(connection.settings_dict),
        "REMINDERS_TICK_SECONDS": "0.2",
        "Q_WORKERS": "1",
        "REMINDERS_HIGH_WORKERS": "0",
    }
    started = []

    def run(name: str, **extra: str):  # type: ignore[no-untyped-def]
        process = start_reminders(name, workdir=tmp_path, env={**env, **extra})
        started.append(process)
        return process

    def check(name: str) -> str:
        return healthz(client)[1]["checks"][name]["status"]

    try:
        local = run("local-memory")
        wait_until(lambda: healthz(client)[0] == 200, timeout=60, what="healthy", processes=[local])
        wait_until(lambda: len(local.tree()) >= 3, timeout=30, what="cluster", processes=[local])
        assert Stat.get_all() == []  # the cluster's stats stay in its own memory
        local.popen.send_signal(signal.SIGTERM)
        wait_exit(local, timeout=60)
        assert healthz(client)[1]["checks"]["scheduler"]["reason"] == (
            "no scheduler heartbeat recorded"
        )

        settings.CACHES = {
            **settings.CACHES,
            "default": {
                "BACKEND": "django.core.cache.backends.redis.RedisCache",
                "LOCATION": REDIS,
            },
        }
        caches["default"].clear()
        shared = run("shared-cache", CACHE_URL=REDIS)
        wait_until(
            lambda: healthz(client)[0] == 200, timeout=60, what="healthy", processes=[shared]
        )
        # Reported by the cluster's sentinel once its workers are up (``Starting`` before).
        wait_until(
            lambda: [stat.status for stat in Stat.get_all()] in (["Idle"], ["Working"]),
            timeout=30,
            what="the cluster's stats in the shared cache",
            processes=[shared],
        )
        shared.popen.send_signal(signal.SIGTERM)
        wait_exit(shared, timeout=60)
        # The stats expire 3 s after the cluster's last report.
        wait_until(lambda: check("cluster") == "failing", timeout=15, what="cluster gone")
        assert healthz(client)[1]["checks"]["cluster"]["reason"] == (
            "no django-q2 cluster reports its status"
        )
    finally:
        for process in started:
            if process.popen.poll() is None or alive(process.descendants_seen()):
                kill_tree(process)
        caches["default"].clear()
