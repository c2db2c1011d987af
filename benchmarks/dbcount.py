"""Statements counted in every process of a benchmark's ``run_reminders``, by role.

An app (``CountingConfig``) that the settings of ``benchmarks/digest_morning.py`` add to
``INSTALLED_APPS``. With ``BENCH_STATEMENTS_DIR`` set, each database connection a process
opens gets an execute wrapper counting every statement Django sends, as
``benchmarks/statements.py`` counts them, and ``CONN_HEALTH_CHECKS``' health checks
beside them. Each connection is given a role when it opens, from the code that opened
it: ``worker`` (a django-q2 worker: the engine's jobs), ``pusher`` (fetching jobs),
``monitor`` (their results and acknowledgements), ``cluster`` (a cluster's own
processes), ``scheduler`` (``run_reminders``' loop: planning, claiming, ticks).

A thread of each process writes its counts, by role and statement shape, to
``<BENCH_STATEMENTS_DIR>/<pid>.json`` every ``FLUSH_SECONDS`` (the file replaced
whole, with the moment of the snapshot), so the orchestrator reads them while the
processes run; a process forked from another starts from zero. Beside them, by role, the
CPU time of the PostgreSQL backends that served the process's connections (the server
runs on the same machine): read at each snapshot, so a connection closed and opened again
(``CONN_MAX_AGE``) keeps its backend's CPU up to its last second.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from django.apps import AppConfig
from django.db.backends.signals import connection_created

FLUSH_SECONDS = 1.0
HEALTH_CHECK = "SELECT 1 (CONN_HEALTH_CHECKS, sent by the driver)"
# The first of these modules found on the stack names the role (the workers, pusher and
# monitor run inside the cluster's process tree, which runs inside the scheduler's code).
ROLES = (
    ("django_q.worker", "worker"),
    ("django_q.pusher", "pusher"),
    ("django_q.monitor", "monitor"),
    ("django_q.cluster", "cluster"),
)


class _Counts:
    """This process's counts; replaced in a forked child."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.pid = os.getpid()
        self.counts: Counter[tuple[str, str]] = Counter()
        self.backends: dict[int, tuple[str, psutil.Process | None, float]] = {}
        self.lock = threading.Lock()
        self.flusher: threading.Thread | None = None

    def add(self, role: str, sql: str) -> None:
        with self.lock:
            self.counts[role, sql] += 1

    def backend(self, role: str, pid: int) -> None:
        """Count the CPU of backend ``pid`` for ``role`` from now on (all of it: its
        start is the connection's cost too)."""
        try:
            process: psutil.Process | None = psutil.Process(pid)
        except psutil.Error:
            process = None
        with self.lock:
            self.backends[pid] = (role, process, 0.0)
        self._read_backends()

    def _read_backends(self) -> dict[str, float]:
        with self.lock:
            backends = dict(self.backends)
        cpu: dict[str, float] = {}
        for pid, (role, process, last) in backends.items():
            if process is not None:
                with contextlib.suppress(psutil.Error):
                    times = process.cpu_times()
                    last = times.user + times.system
                    with self.lock:
                        self.backends[pid] = (role, process, last)
            cpu[role] = cpu.get(role, 0.0) + last
        return cpu

    def start(self) -> None:
        if self.flusher is None:
            self.flusher = threading.Thread(target=self._flush_forever, daemon=True)
            self.flusher.start()

    def _flush_forever(self) -> None:
        while True:
            time.sleep(FLUSH_SECONDS)
            self.flush()

    def flush(self) -> None:
        from benchmarks.statements import shape

        with self.lock:
            snapshot = dict(self.counts)
        server = self._read_backends()
        at = time.time()
        roles: dict[str, Counter[str]] = {}
        for (role, sql), count in snapshot.items():
            text = sql if sql == HEALTH_CHECK else _shape(sql, shape)
            roles.setdefault(role, Counter())[text] += count
        path = self.directory / f"{self.pid}.json"
        temporary = path.with_suffix(".tmp")
        temporary.write_text(
            json.dumps({"pid": self.pid, "at": at, "roles": roles, "server_cpu": server})
        )
        temporary.replace(path)


_SHAPES: dict[str, str] = {}
_state: _Counts | None = None


def _shape(sql: str, shape: Callable[[str], str]) -> str:
    found = _SHAPES.get(sql)
    if found is None:
        found = _SHAPES[sql] = shape(sql)
    return found


def _counts() -> _Counts | None:
    global _state
    directory = os.environ.get("BENCH_STATEMENTS_DIR")
    if not directory:
        return None
    if _state is None or _state.pid != os.getpid():
        _state = _Counts(Path(directory))
    return _state


def _role() -> str:
    names = set()
    frame = sys._getframe()
    while frame is not None:
        names.add(frame.f_globals.get("__name__", ""))
        frame = frame.f_back  # type: ignore[assignment]
    return next((role for module, role in ROLES if module in names), "scheduler")


def _connected(sender: Any, connection: Any, **kwargs: Any) -> None:
    counts = _counts()
    if counts is None:
        return
    counts.start()
    connection.bench_role = _role()
    counts.backend(connection.bench_role, connection.connection.info.backend_pid)
    if getattr(connection, "bench_counted", False):
        return
    connection.bench_counted = True

    def wrapper(
        execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        state = _counts()
        if state is not None:
            state.add(connection.bench_role, sql)
        return execute(sql, params, many, context)

    connection.execute_wrappers.append(wrapper)
    usable = connection.is_usable

    def is_usable() -> bool:
        state = _counts()
        if state is not None:
            state.add(getattr(connection, "bench_role", "scheduler"), HEALTH_CHECK)
        return bool(usable())

    connection.is_usable = is_usable


class CountingConfig(AppConfig):
    name = "benchmarks"
    label = "bench_dbcount"
    verbose_name = "Benchmark statement counts"

    def ready(self) -> None:
        connection_created.connect(_connected, dispatch_uid="bench_dbcount")
