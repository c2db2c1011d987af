"""The engine installed into a CRM project of its own, from a built package.

``tests/crm_project`` is a throwaway CRM: a custom user model, an app with a model, and
(``settings_own_queue``) django-q2 for its own jobs on Redis under a queue name of its
own; ``settings`` is the same CRM with the engine's apps added and nothing else. It is
copied into a temporary directory and run in a virtualenv where the wheel ``make dist``
built (``dist/django_wecom_reminders-<version>-*.whl``, the release a CRM pins) is
``pip install``-ed with its extras, as a CRM installs it, on a fresh database on the
server under test, never on this repository's code. Run alone, with no such wheel (or
one older than the checkout), the test builds one itself with ``python -m build --wheel``.

What must hold: the CRM's own commands (``makemigrations``) run whatever its
``Q_CLUSTER``; ``check --deploy`` passes; a reminder scheduled through the API is sent
by ``run_reminders`` while the CRM's ``qcluster`` runs the CRM's jobs, and neither
cluster runs the other's: a job the CRM queues from inside the engine's worker (a
``run_sent`` handler) still goes to the CRM's cluster.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import tomllib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from django.db import connection

from tests.support.crm_venv import IN_ONE_RUN, run
from tests.support.processes import (
    KNOBS,
    REPO,
    ReminderProcess,
    alive,
    database_url,
    kill_tree,
    spawn,
    wait_exit,
    wait_until,
)

pytestmark = [
    pytest.mark.processes,
    IN_ONE_RUN,  # one run is enough: tests.support.crm_venv
]

TEMPLATE = Path(__file__).resolve().parents[1] / "crm_project"
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
# Whether django-q2's admin is registered, and the cluster django-q2 would run.
DJANGO_Q_STATE = (
    "from django.contrib import admin; from django_q.conf import Conf; "
    "from django_q.models import Schedule; "
    "print(admin.site.is_registered(Schedule), Conf.CLUSTER_NAME)"
)


@pytest.fixture(scope="module")
def crm_database(tmp_path_factory: pytest.TempPathFactory, django_db_blocker: Any) -> Iterator[str]:
    """A ``DATABASE_URL`` for a database of the CRM's own on the server under test,
    created empty and dropped afterwards."""
    settings = dict(connection.settings_dict)
    if connection.vendor == "sqlite":
        settings["NAME"] = str(tmp_path_factory.mktemp("crm-db") / "crm.sqlite3")
        yield database_url(settings)
        return
    name = settings["NAME"] = f"crm_project{os.environ.get('TEST_DB_SUFFIX', '')}"
    with server_cursor(django_db_blocker) as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {name}")
        cursor.execute(f"CREATE DATABASE {name}")
    try:
        yield database_url(settings)
    finally:
        with server_cursor(django_db_blocker) as cursor:
            force = " WITH (FORCE)" if connection.vendor == "postgresql" else ""
            cursor.execute(f"DROP DATABASE IF EXISTS {name}{force}")


@contextlib.contextmanager
def server_cursor(django_db_blocker: Any) -> Iterator[Any]:
    """A cursor on the test database's server outside any database of the suite, in
    autocommit (CREATE and DROP DATABASE)."""
    with django_db_blocker.unblock(), connection._nodb_cursor() as cursor:
        yield cursor


@dataclass
class Crm:
    """The CRM project's copy, and how to run its ``manage.py``."""

    python: Path
    directory: Path
    records: Path
    env: dict[str, str]

    def manage(self, *args: str, settings: str = "own_queue") -> str:
        """Run a command to its end (a failure shows its output); its standard output."""
        done = run(
            [self.python, "manage.py", *args], cwd=self.directory, env=self.env_for(settings)
        )
        return str(done.stdout)

    def start(self, name: str, *args: str, settings: str = "own_queue") -> ReminderProcess:
        """A long-running ``manage.py`` command in a session of its own."""
        argv = [str(self.python), "manage.py", *args]
        env = self.env_for(settings)
        return spawn(name, argv, cwd=self.directory, env=env, workdir=self.directory)

    def env_for(self, settings: str) -> dict[str, str]:
        module = "crmsite.settings" if settings == "apps_only" else f"crmsite.settings_{settings}"
        return {**self.env, "DJANGO_SETTINGS_MODULE": module}

    def read(self, name: str) -> list[dict[str, Any]]:
        path = self.records / f"{name}.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line]


@pytest.fixture(scope="module")
def crm(
    crm_python: Path, crm_database: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Crm]:
    """The CRM project copied, its migrations made and everything migrated, as its
    developers would: with its own django-q2 on Redis configured."""
    directory = tmp_path_factory.mktemp("crm-project")
    shutil.copytree(TEMPLATE, directory, dirs_exist_ok=True, ignore=ignore_caches)
    records = directory / "records"
    records.mkdir()
    queue = f"crm-{uuid.uuid4().hex[:8]}"  # its Redis keys are this test's alone
    env = {k: v for k, v in os.environ.items() if k not in KNOBS and k != "PYTHONPATH"}
    env.update(
        PYTHONUNBUFFERED="1",
        DATABASE_URL=crm_database,
        CRM_RECORD_DIR=str(records),
        CRM_QUEUE=queue,
        CRM_REDIS_URL=REDIS_URL,
    )
    project = Crm(crm_python, directory, records, env)
    # The CRM's own command, with reminders installed and a django-q2 not on the ORM.
    made = project.manage("makemigrations", "crm")
    assert "Create model User" in made, made
    project.manage("migrate", "--no-input")
    try:
        yield project
    finally:
        client = redis.from_url(REDIS_URL)
        for key in client.scan_iter(f"django_q:{queue}:*"):
            client.delete(key)


def ignore_caches(directory: str, names: list[str]) -> set[str]:
    return {name for name in names if name == "__pycache__"}


def stop(process: ReminderProcess) -> int:
    os.kill(process.pid, signal.SIGTERM)
    return wait_exit(process, timeout=60)


def pids(*processes: ReminderProcess) -> set[int]:
    """Every process seen in these trees (workers included)."""
    return {pid for process in processes for pid in process.seen}


def test_the_package_installs_with_its_migrations_and_only_its_apps(crm_python):
    site, version = subprocess.run(
        [
            str(crm_python),
            "-c",
            "import reminders; print(reminders.__file__, reminders.__version__)",
        ],
        cwd=crm_python.parent,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    package = Path(site).parent
    assert package.parent.name == "site-packages", package
    with (REPO / "pyproject.toml").open("rb") as f:
        assert version == tomllib.load(f)["project"]["version"]
    assert {p.name for p in (package / "migrations").glob("0*.py")} >= {"0001_initial.py"}
    assert (package / "py.typed").exists()
    assert (package / "templates" / "reminders" / "calendar_banner.html").exists()
    # A CRM's own settings package is often called ``config``: ours must not shadow it.
    installed = {p.name for p in package.parent.iterdir()}
    assert {"reminders", "ops"} <= installed
    assert "config" not in installed
    # The demo data (a superuser, messages to made-up members) is the standalone
    # project's: a CRM that installs the apps has no such command.
    assert not list(package.parent.glob("*/management/commands/reminders_demo.py"))
    # The WeCom sandbox is a development tool, an app of its own the wheel does not hold.
    assert "wecom_sandbox" not in installed
    assert not list(package.parent.glob("*/management/commands/wecom_sandbox.py"))
    assert not list(package.parent.glob("*/sandbox"))


def test_beside_the_crm_s_own_django_q2__each_cluster_runs_its_own_jobs(crm):
    # Django's own deployment warnings are on stderr, and are the CRM's business.
    checked = crm.manage("check", "--deploy")
    assert "reminders." not in checked, checked
    commands = crm.manage("help", "--commands")
    assert "reminders_demo" not in commands
    assert "wecom_sandbox" not in commands
    # The CRM's own django-q2 keeps its admin, and its settings.
    state = crm.manage("shell", "-c", DJANGO_Q_STATE).split()[-2:]
    assert state == ["True", crm.env["CRM_QUEUE"]], state
    assert "no issues" in crm.manage("check", "--deploy", "--tag", "reminders_worker")

    qcluster = crm.start("qcluster", "qcluster")
    engine = crm.start("run_reminders", "run_reminders")
    watched = [qcluster, engine]
    try:
        started = time.monotonic()
        crm.manage("crm_follow_up", "zhangsan")
        wait_until(
            lambda: crm.read("messages") and len(crm.read("crm_jobs")) >= 2,
            timeout=60,
            what="the reminder and the CRM's two jobs",
            processes=watched,
            explain=lambda: f"messages {crm.read('messages')}, jobs {crm.read('crm_jobs')}",
        )
        took = time.monotonic() - started
        for process in watched:
            process.tree()
        [message] = crm.read("messages")
        assert message["to"] == "zhangsan"
        assert "Call ACME" in message["body"]
        jobs = {job["event"]: job for job in crm.read("crm_jobs")}
        assert set(jobs) == {"customer_added", "run_sent"}
        # The engine's worker sent it; the CRM's cluster never ran an engine job.
        assert message["pid"] in pids(engine) - {engine.pid}
        assert message["pid"] not in pids(qcluster)
        # The CRM's jobs, the one queued from inside the engine's worker too, ran on
        # the CRM's cluster and nowhere else.
        for job in jobs.values():
            assert job["pid"] in pids(qcluster) - {qcluster.pid}, jobs
            assert job["pid"] not in pids(engine), jobs
        assert stop(engine) == 0, engine.describe()
        assert stop(qcluster) == 0, qcluster.describe()
        print(f"sent and followed up {took:.1f}s after scheduling")
    finally:
        for process in watched:
            if process.popen.poll() is None or alive(process.descendants_seen()):
                kill_tree(process)


def test_a_crm_that_adds_the_apps_and_nothing_else_runs_on_the_defaults(crm):
    """No ``Q_CLUSTER``, no ``REMINDERS_*``: the engine's own cluster and the console
    channel, as they come."""
    checked = crm.manage("check", "--deploy", "--tag", "reminders_worker", settings="apps_only")
    assert "no issues" in checked, checked
    # django-q2 is the engine's alone: its settings are the engine's cluster, so it warns
    # about nothing, and its admin (where a schedule would never run) is hidden.
    done = run(
        [crm.python, "manage.py", "shell", "-c", DJANGO_Q_STATE],
        cwd=crm.directory,
        env=crm.env_for("apps_only"),
    )
    assert "Retry and timeout" not in done.stderr, done.stderr
    assert done.stdout.split()[-2:] == ["False", "reminders"], done.stdout
    engine = crm.start("run_reminders_defaults", "run_reminders", settings="apps_only")
    try:
        crm.manage("crm_follow_up", "lisi", "--no-job", settings="apps_only")
        statuses = (
            "from reminders.models import TaskRun; "
            "print(sorted(TaskRun.objects.filter(task__recipient='lisi')"
            ".values_list('status', flat=True)))"
        )
        wait_until(
            lambda: "['sent']" in crm.manage("shell", "-c", statuses, settings="apps_only"),
            timeout=60,
            what="lisi's reminder to be sent",
            processes=[engine],
            interval=0.5,
        )
        assert stop(engine) == 0, engine.describe()
    finally:
        if engine.popen.poll() is None or alive(engine.descendants_seen()):
            kill_tree(engine)
