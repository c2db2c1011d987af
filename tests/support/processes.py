"""Start real ``run_reminders`` processes against the test database, watch and stop them.

Every wait here is bounded; a timeout fails the test with the tail of each process's
stderr, because a hung multi-process test that says nothing is worse than none.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, TypeVar
from urllib.parse import quote

import psutil
import pytest

from reminders.models import SendLog, TaskRun

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[2]

# Knobs the parent's environment must not leak into a child unless a test sets them.
KNOBS = (
    "DATABASE_URL",
    "DJANGO_SETTINGS_MODULE",
    "Q_WORKERS",
    "RECORD_DELAY",
    "RECORD_FAIL_FIRST",
    "RECORD_FILE",
    "REMINDERS_CLAIM_BATCH",
    "REMINDERS_HIGH_RATE_SHARE",
    "REMINDERS_HIGH_WORKERS",
    "REMINDERS_LEASE_SECONDS",
    "REMINDERS_MAX_IN_FLIGHT",
    "REMINDERS_RUNS_PER_JOB",
    "REMINDERS_SHUTDOWN_GRACE",
    "REMINDERS_TICK_SECONDS",
    "REMINDERS_WORKER_ID",
)


def manage(
    *args: str,
    env: Mapping[str, str] | None = None,
    drop: Iterable[str] = (),
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """``manage.py ARGS`` in a process of its own, from the repository, with ``env`` over
    this process's environment and the variables named in ``drop`` left out; its output
    captured, its exit code for the test to check."""
    dropped = set(drop)
    base = {name: value for name, value in os.environ.items() if name not in dropped}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def database_url(settings_dict: Mapping[str, Any]) -> str:
    """A ``DATABASE_URL`` for the database Django is connected to (the test database)."""
    engine = settings_dict["ENGINE"]
    name = str(settings_dict["NAME"])
    if engine == "django.db.backends.sqlite3":
        if name == ":memory:" or name.startswith("file:"):
            raise RuntimeError("processes cannot share an in-memory SQLite database")
        return f"sqlite:///{Path(name).resolve()}"
    scheme = {"django.db.backends.postgresql": "postgres", "django.db.backends.mysql": "mysql"}
    user = quote(settings_dict.get("USER") or "", safe="")
    password = settings_dict.get("PASSWORD") or ""
    auth = f"{user}:{quote(password, safe='')}@" if password else (f"{user}@" if user else "")
    host = settings_dict.get("HOST") or "localhost"
    port = f":{settings_dict['PORT']}" if settings_dict.get("PORT") else ""
    return f"{scheme[engine]}://{auth}{host}{port}/{quote(name, safe='')}"


def alive(processes: Iterable[psutil.Process]) -> list[psutil.Process]:
    """The ones still running; a zombie has finished, whoever is to reap it."""
    running = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                running.append(process)
        except psutil.NoSuchProcess:
            pass
    return running


@dataclass
class ReminderProcess:
    """One ``manage.py run_reminders`` and the files its output goes to."""

    name: str
    popen: subprocess.Popen[bytes]
    stderr_path: Path
    env: dict[str, str]
    seen: dict[int, psutil.Process] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def stderr(self, tail: int = 4000) -> str:
        try:
            text = self.stderr_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return text[-tail:]

    def tree(self) -> list[psutil.Process]:
        """This process and its descendants still alive, including those orphaned by a
        dead parent; each is remembered in ``seen``."""
        found: dict[int, psutil.Process] = {}
        for root in alive(self.seen.values()):
            try:
                for process in [root, *root.children(recursive=True)]:
                    found.setdefault(process.pid, process)
            except psutil.NoSuchProcess:
                continue
        for pid, process in found.items():
            self.seen.setdefault(pid, process)
        return alive(found.values())

    def descendants_seen(self) -> list[psutil.Process]:
        return [p for pid, p in self.seen.items() if pid != self.pid]

    def describe(self) -> str:
        state = "running" if self.popen.poll() is None else f"exited {self.popen.returncode}"
        return f"--- {self.name} (pid {self.pid}, {state}) stderr tail:\n{self.stderr()}"


def spawn(
    name: str, argv: list[str], *, cwd: Path, env: Mapping[str, str], workdir: Path
) -> ReminderProcess:
    """``argv`` in a session of its own, so that signals meant for pytest's process group
    never reach it and a test can signal its group alone; its output in
    ``workdir/<name>.stdout`` and ``.stderr``."""
    stderr_path = workdir / f"{name}.stderr"
    with (workdir / f"{name}.stdout").open("wb") as out, stderr_path.open("wb") as err:
        popen = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
    process = ReminderProcess(name, popen, stderr_path, dict(env))
    # Taken now, while the pid is surely ours: psutil then refuses to signal a reused pid.
    process.seen[popen.pid] = psutil.Process(popen.pid)
    return process


def start_reminders(
    name: str,
    *,
    workdir: Path,
    env: Mapping[str, str],
    args: Iterable[str] = (),
) -> ReminderProcess:
    """``manage.py run_reminders`` of this repository on the test settings (``spawn``)."""
    child_env = {k: v for k, v in os.environ.items() if k not in KNOBS}
    child_env.update({"PYTHONUNBUFFERED": "1", "DJANGO_SETTINGS_MODULE": "tests.settings"})
    child_env.update(env)
    argv = [sys.executable, "manage.py", "run_reminders", *args]
    return spawn(name, argv, cwd=REPO, env=child_env, workdir=workdir)


def wait_until(
    predicate: Callable[[], T],
    *,
    timeout: float,
    what: str,
    processes: Iterable[ReminderProcess] = (),
    must_stay_up: bool = True,
    explain: Callable[[], str] | None = None,
    interval: float = 0.2,
) -> T:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` s.

    With ``must_stay_up`` a watched process that exits meanwhile fails at once;
    ``explain`` adds the state that matters (run statuses, say) to the failure.
    """
    watched = list(processes)
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        for process in watched:
            process.tree()  # remember workers, to map deliveries and to clean up
        if must_stay_up:
            gone = [p for p in watched if p.popen.poll() is not None]
            if gone:
                fail(f"a process exited while waiting for {what}", watched, explain)
        if time.monotonic() > deadline:
            fail(f"timed out after {timeout:.0f}s waiting for {what}", watched, explain)
        time.sleep(interval)


def fail(
    message: str,
    processes: Iterable[ReminderProcess],
    explain: Callable[[], str] | None = None,
) -> NoReturn:
    parts = [message]
    if explain is not None:
        parts.append(explain())
    parts.extend(p.describe() for p in processes)
    pytest.fail("\n".join(parts), pytrace=False)


def freeze(process: ReminderProcess) -> list[psutil.Process]:
    """SIGSTOP the whole tree, parents first, until no new process appears; returns it.

    A frozen tree can neither make progress nor respawn a killed child, so what the
    test reads from the database afterwards is exactly the state at the kill.
    """
    stopped: dict[int, psutil.Process] = {}
    for _ in range(20):
        fresh = [p for p in process.tree() if p.pid not in stopped]
        if not fresh:
            return list(stopped.values())
        for p in fresh:
            try:
                p.send_signal(signal.SIGSTOP)
                stopped[p.pid] = p
            except psutil.NoSuchProcess:
                pass
    raise AssertionError(f"{process.name}: its process tree kept growing while being frozen")


def thaw(tree: Iterable[psutil.Process]) -> None:
    """SIGCONT what ``freeze`` stopped; signals sent meanwhile are delivered now."""
    for process in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(signal.SIGCONT)


def kill_tree(process: ReminderProcess, *, timeout: float = 30) -> None:
    """SIGKILL the process and every descendant at once, as a machine crash would."""
    tree = freeze(process)
    for p in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.send_signal(signal.SIGKILL)
    wait_exit(process, timeout=timeout)
    wait_until(
        lambda: not alive(tree),
        timeout=timeout,
        what=f"the killed tree of {process.name} to disappear",
        must_stay_up=False,
    )


def wait_exit(process: ReminderProcess, *, timeout: float) -> int:
    try:
        return process.popen.wait(timeout)
    except subprocess.TimeoutExpired:
        fail(f"{process.name} did not exit within {timeout:.0f}s", [process])


def records(path: Path) -> list[dict[str, Any]]:
    """The deliveries ``RecordingSender`` appended to ``path``, in order."""
    if not path.exists():
        return []
    # A line still being appended has no newline yet: it is not a record until it has.
    *complete, _partial = path.read_text().split("\n")
    return [json.loads(line) for line in complete if line]


def run_statuses() -> Counter[str]:
    return Counter(TaskRun.objects.values_list("status", flat=True))


def ledger_statuses() -> Counter[str]:
    return Counter(SendLog.objects.values_list("status", flat=True))


def wake_listeners(application_name: str = "") -> list[int]:
    """The backend pids of the sessions listening on the test database under
    ``application_name`` (default: the schedulers', for due work; the pushers' is
    ``wake.JOBS_APPLICATION_NAME``), ``reminders.engine.wake``; PostgreSQL only."""
    from django.db import connection

    from reminders.engine import wake

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity"
            " WHERE application_name = %s AND datname = current_database()",
            [application_name or wake.APPLICATION_NAME],
        )
        return [pid for (pid,) in cursor.fetchall()]


def state(record_file: Path) -> str:
    """What a failure message needs: where the runs, the ledger and the deliveries are."""
    return (
        f"runs: {dict(run_statuses())}; ledger: {dict(ledger_statuses())}; "
        f"delivered: {len(records(record_file))}"
    )


# A run_reminders tree with Q_WORKERS=2 and REMINDERS_HIGH_WORKERS=1: the main process,
# then for each of the bulk and the high cluster its cluster process, sentinel, monitor
# and pusher, with two bulk workers and one high worker.
TREE = 1 + (4 + 2) + (4 + 1)
