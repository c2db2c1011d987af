from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from reminders.models import Priority, ScheduledTask
from tests.support.crm_venv import crm_venv
from tests.support.pgcluster import Cluster, binaries, throwaway_cluster
from tests.support.processes import (
    ReminderProcess,
    alive,
    database_url,
    kill_tree,
    start_reminders,
)


@pytest.fixture
def on_postgres() -> bool:
    return connection.vendor == "postgresql"


@pytest.fixture(scope="module")
def own_postgres() -> Iterator[Cluster]:
    """A PostgreSQL server of the test module's own, which its tests may stop and start
    (the suite's shared server must never be)."""
    if binaries() is None and os.environ.get("CI") != "true":
        pytest.skip("PostgreSQL's server binaries are not installed")
    with throwaway_cluster() as cluster:
        yield cluster


@pytest.fixture(scope="session")
def crm_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv with the wheel ``make dist`` built ``pip install``-ed with the extras
    the server under test needs, as a CRM installs the release it pins; its Python.
    Without that wheel (the test run alone) or with one older than the checkout, a wheel
    built now (``tests.support.crm_venv.built_wheel``)."""
    return crm_venv(tmp_path_factory.mktemp("crm-venv"), connection.vendor)


@pytest.fixture
def record_file(tmp_path: Path) -> Path:
    return tmp_path / "records.jsonl"


@pytest.fixture
def spawn(
    transactional_db: None, tmp_path: Path, record_file: Path
) -> Iterator[Callable[..., ReminderProcess]]:
    """Factory: a ``run_reminders`` process on the test database; ``KNOB="value"`` sets
    its environment. Whatever a test leaves running is killed, tree and all, before the
    database is flushed."""
    started: list[ReminderProcess] = []
    base = {
        "DATABASE_URL": database_url(connection.settings_dict),
        "RECORD_FILE": str(record_file),
        "REMINDERS_TICK_SECONDS": "0.2",
        "Q_WORKERS": "2",
    }

    def spawn(name: str, **env: str) -> ReminderProcess:
        process = start_reminders(name, workdir=tmp_path, env={**base, **env})
        started.append(process)
        return process

    yield spawn
    for process in started:
        if process.popen.poll() is None or alive(process.descendants_seen()):
            kill_tree(process)


@pytest.fixture
def due_tasks(transactional_db: None) -> Callable[[int, str], list[ScheduledTask]]:
    """Factory: ``count`` one-shot tasks due now on ``channel``, created in one burst."""

    def make(count: int, channel: str) -> list[ScheduledTask]:
        now = timezone.now()
        tasks = []
        for number in range(count):
            task = ScheduledTask(
                kind="follow_up",
                recipient=f"user{number}",
                run_at=now,
                timezone=settings.TIME_ZONE,
                channel=channel,
                priority=Priority.NORMAL,
            )
            task.plan_first_run(now)
            tasks.append(task)
        return ScheduledTask.objects.bulk_create(tasks, batch_size=500)

    return make
