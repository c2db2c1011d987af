"""End-to-end throughput: the reminders engine against bare django-q2, on this machine.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/reminders \\
        .venv/bin/python benchmarks/throughput.py [--tasks 3000] [--sweep 1,50] [--async-commit]
    DATABASE_URL=mysql://root@127.0.0.1:3306/reminders \\
        .venv/bin/python benchmarks/throughput.py [--tasks 3000] [--sweep 1,50]

Only the server, user and password of ``DATABASE_URL`` are used: every scenario gets a
fresh database ``bench_reminders_<pid>_<n>_<scenario>``, cloned from one migrated
template (PostgreSQL: ``CREATE DATABASE ... TEMPLATE``; MariaDB: ``mariadb-dump`` of the
template piped into ``mariadb``, or ``mysqldump | mysql``, about a second); each is
dropped when its scenario ends, the template at the end, also on failure or
interruption. Every process started is stopped by pid (SIGTERM, then SIGKILL), also on
failure or interruption.

What the database server spent is read differently on each:

* PostgreSQL: the CPU of the backends serving the scenario's database, its transactions
  and rows written from ``pg_stat_database``: the scenario's alone.
* MariaDB: one ``mariadbd`` process serves every database, and its status counters are
  the server's. The CPU is that process's (by ``@@pid_file``, else by name) over the
  scenario; ``Handler_commit`` (with ``Com_commit + Com_rollback`` beside it) and
  ``Handler_write + Handler_update + Handler_delete`` are ``SHOW GLOBAL STATUS`` deltas
  over it. All three are the whole server's: nothing else should use the server during
  the run. The server's other clients are looked for every 2 s and named in the report.
  ``--async-commit`` is PostgreSQL's only.

* engine: N one-shot tasks due now, on a channel without provider de-duplication (each
  message a batch of its own) and, as a second scenario, with it (a claim's messages in
  batches); ``--processes`` real ``manage.py run_reminders``
  (scheduler loop + django-q2 cluster each). Timed from the first process start to the
  last run's ``finished_at``; lateness is ``finished_at - due_at`` of every run.
* bare django-q2: N ``async_task`` calls of the same instant send, enqueued before the
  clock starts; then ``--processes`` ``manage.py qcluster`` with the same ``Q_CLUSTER``.
  Timed from the first process start to the last send.

The send only appends a line to a file (``benchmarks/senders.py``), so both sides are
counted the same way from outside, and a duplicate would show; the engine is also
counted in its ``SendLog`` (all ``sent``), bare django-q2 by its ORM queue being empty
(``save_limit=-1`` keeps no ``Success`` rows). The interleaved pair runs ``--repeat``
times and the best run of each is shown: on a shared machine the best is the least
disturbed. ``REMINDERS_CLAIM_BATCH`` and ``REMINDERS_MAX_IN_FLIGHT`` in the environment
reach the engine processes (``benchmarks/settings.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC
from functools import partial
from importlib.metadata import version
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import unquote, urlsplit

import psutil
import psycopg

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
SETTINGS = "benchmarks.settings"
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/reminders"
# The scenarios compared with bare django-q2, in the same rounds. A channel without
# provider de-duplication sends each message as a batch of its own; one with it sends a
# claim's messages in batches.
ENGINE = "engine, 20 runs/job (default)"
ENGINE_DEDUP = "engine, de-duplicating channel, 20 runs/job"
BARE = "bare django-q2"
COMPARED = (ENGINE, ENGINE_DEDUP)


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# Databases -------------------------------------------------------------------------------


MIGRATE_TIMEOUT = 300.0  # seconds
COPY_TIMEOUT = 120.0  # seconds, mysqldump | mysql of the migrated template


def databases(url: str) -> Server:
    """The server of ``DATABASE_URL``: PostgreSQL or MariaDB (``mysql://``)."""
    scheme = urlsplit(url).scheme
    if scheme in {"postgres", "postgresql", "pgsql"}:
        return Databases(url)
    if scheme in {"mysql", "mysql2", "mariadb"}:
        return MariaDatabases(url)
    sys.exit(f"benchmarks need a PostgreSQL or MariaDB (mysql://) DATABASE_URL, got {scheme!r}")


class Server:
    """Creates ``bench_reminders_*`` databases on the server of ``DATABASE_URL``; drops them.

    What differs between the servers (cloning, statistics, the server's CPU, the SQL of
    the measurements, the report's wording) is in the subclasses.
    """

    name = ""  # the server, as the report names it
    driver = ""  # the Python package that talks to it
    cpu_head = ""  # the report's column of the server's CPU per message
    xacts_head = ""  # and of its transactions per message
    cpu_note = ""
    xacts_note = ""
    server_wide = False  # the server's CPU and counts are the whole server's, not the run's

    def __init__(self, url: str) -> None:
        self._parts = urlsplit(url)
        # BENCH_DB_SUFFIX keeps the databases of benchmarks run side by side apart.
        self.prefix = f"bench_reminders_{os.getpid()}{os.environ.get('BENCH_DB_SUFFIX', '')}"
        self.created: list[str] = []

    def url(self, name: str) -> str:
        return self._parts._replace(path=f"/{name}").geturl()

    def create(self, label: str, template: str | None = None) -> str:
        name = f"{self.prefix}_{label}"
        self.created.append(name)  # dropped at the end even if the copy fails half-way
        self._create(name, template)
        return name

    def migrated(self, label: str = "template", settings: str = SETTINGS) -> str:
        """A new database with the project's migrations applied by ``manage.py migrate``
        (killed after ``MIGRATE_TIMEOUT`` seconds): the template scenarios clone."""
        name = self.create(label)
        log(f"migrating {name}")
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": settings, "DATABASE_URL": self.url(name)}
        command = [PYTHON, "manage.py", "migrate", "--noinput", "-v0"]
        try:
            done = subprocess.run(command, cwd=ROOT, env=env, check=False, timeout=MIGRATE_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise Failed(f"migrate: still running after {MIGRATE_TIMEOUT:.0f}s") from None
        if done.returncode:
            raise Failed("migrate failed")
        return name

    def drop(self, name: str) -> None:
        try:
            self._drop(name)
            self.created.remove(name)
        except Exception as exc:  # said; the others are still dropped
            log(f"could not drop {name}: {exc}")

    def drop_all(self) -> None:
        for name in reversed(self.created):
            self.drop(name)
        self.admin.close()

    def env_rows(self) -> list[tuple[str, str]]:
        """The report's environment rows about the server, after its version."""
        return []

    # What each server does its own way.

    admin: Any

    def _create(self, name: str, template: str | None) -> None:
        raise NotImplementedError

    def _drop(self, name: str) -> None:
        raise NotImplementedError

    def connect(self, name: str) -> Any:
        """An autocommit connection to the database ``name``: ``.execute(sql)`` returns a
        cursor, and it closes as a context manager."""
        raise NotImplementedError

    def server_version(self) -> str:
        raise NotImplementedError

    def async_commit(self, name: str) -> None:
        raise NotImplementedError

    def stats(self, conn: Any) -> tuple[int, int, int]:
        """Transactions, rows written and a third count (see ``xacts_note``), so far."""
        raise NotImplementedError

    def cpu_mark(self, conn: Any) -> float:
        """Before a scenario: what ``server_cpu`` is then counted from."""
        raise NotImplementedError

    def server_cpu(self, conn: Any, mark: float) -> float:
        """CPU seconds the server spent on the scenario since ``mark`` (read, not touched)."""
        raise NotImplementedError

    def others(self, conn: Any) -> set[str]:
        """Other clients of the server now, when what is measured is the whole server's."""
        return set()

    def due_now(self, conn: Any) -> None:
        """Every task of the scenario due from this moment."""
        raise NotImplementedError

    def finished(self, conn: Any) -> tuple[float, float, float, float, int]:
        """The last run's ``finished_at`` (epoch seconds); p50, p95 and max of
        ``finished_at - due_at``; the ledger's ``sent`` rows."""
        raise NotImplementedError


class Databases(Server):
    """PostgreSQL (the name the other benchmarks import): clones with ``CREATE DATABASE
    ... TEMPLATE``; counts in ``pg_stat_database`` and the CPU of the backends serving the
    scenario's database."""

    name = "PostgreSQL"
    driver = "psycopg"
    cpu_head = "CPU ms / msg: ours + PG"
    xacts_head = "PG xacts / msg"
    cpu_note = (
        "- *CPU*: user+system time of the benchmark's processes, and of the PostgreSQL "
        "backends serving the scenario's database. *our share*: that CPU over wall time x "
        "cores; *CPUs busy*: all use during the scenario, anyone's. When the CPUs are busy "
        "and our share is well under 100%, other work on the machine slowed the run."
    )
    xacts_note = (
        "- *PG xacts / msg*: transactions in the scenario's database per message (in "
        "autocommit every statement, reads included, is one), everything counted: "
        "polling, ticks, heartbeats; db-scheduler publishes about 1 per execution in its "
        "lock-and-fetch mode. `benchmarks/statements.py` gives the engine's per phase. "
        "*rows written*: inserted, updated or deleted rows per message."
    )

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.admin = psycopg.connect(self.url("postgres"), autocommit=True)

    def _create(self, name: str, template: str | None) -> None:
        clause = f" TEMPLATE {template}" if template else ""
        self.admin.execute(f"CREATE DATABASE {name}{clause}")

    def _drop(self, name: str) -> None:
        self.admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def connect(self, name: str) -> psycopg.Connection:
        return psycopg.connect(self.url(name), autocommit=True)

    def server_version(self) -> str:
        row = self.admin.execute("SHOW server_version").fetchone()
        return str(row[0]).split()[0] if row else "?"

    def async_commit(self, name: str) -> None:
        self.admin.execute(f"ALTER DATABASE {name} SET synchronous_commit = off")

    def stats(self, conn: psycopg.Connection) -> tuple[int, int, int]:
        """Transactions (autocommit reads count too) and rows written, in this database."""
        with contextlib.suppress(psycopg.errors.UndefinedFunction):  # before PostgreSQL 15
            conn.execute("SELECT pg_stat_force_next_flush()")  # our own statements so far count
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT xact_commit + xact_rollback, tup_inserted + tup_updated + tup_deleted"
            " FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
        return (int(row[0]), int(row[1]), 0) if row else (0, 0, 0)

    def cpu_mark(self, conn: psycopg.Connection) -> float:
        return 0.0  # the backends serving the scenario start with it

    def server_cpu(self, conn: psycopg.Connection, mark: float) -> float:
        """CPU seconds of the server processes connected to this database."""
        return backend_cpu(conn) - mark

    def due_now(self, conn: psycopg.Connection) -> None:
        conn.execute("UPDATE reminders_scheduledtask SET run_at = now(), next_run = now()")

    def finished(self, conn: psycopg.Connection) -> tuple[float, float, float, float, int]:
        row = conn.execute(
            "SELECT extract(epoch FROM max(finished_at)),"
            " percentile_cont(0.5) WITHIN GROUP (ORDER BY"
            "   extract(epoch FROM finished_at - due_at)),"
            " percentile_cont(0.95) WITHIN GROUP (ORDER BY"
            "   extract(epoch FROM finished_at - due_at)),"
            " extract(epoch FROM max(finished_at - due_at)),"
            " (SELECT count(*) FROM reminders_sendlog WHERE status = 'sent')"
            " FROM reminders_taskrun"
        ).fetchone()
        assert row is not None
        last_finished, p50, p95, worst, ledger_sent = row
        return float(last_finished), float(p50), float(p95), float(worst), int(ledger_sent)


class MariaConnection:
    """A MySQLdb connection in autocommit that reads like a psycopg one: ``execute``
    returns the (buffered) cursor."""

    def __init__(self, **params: Any) -> None:
        import MySQLdb

        self.raw = MySQLdb.connect(autocommit=True, **params)

    def execute(self, sql: str, params: Any = None) -> Any:
        cursor = self.raw.cursor()
        cursor.execute(sql, params)
        return cursor

    def close(self) -> None:
        self.raw.close()

    def __enter__(self) -> MariaConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


MARIA_STATUS = (
    "Handler_commit",
    "Com_commit",
    "Com_rollback",
    # Rows written: MariaDB (10.11 here) has no Innodb_rows_* counters; a handler's write,
    # update and delete requests are per row, temporary tables apart (Handler_tmp_*).
    "Handler_write",
    "Handler_update",
    "Handler_delete",
)


class MariaDatabases(Server):
    """Clones the template with ``mysqldump | mysql``; counts in ``SHOW GLOBAL STATUS`` and
    the CPU of the one ``mariadbd`` process: both the whole server's."""

    name = "MariaDB"
    driver = "mysqlclient"
    server_wide = True
    cpu_head = "CPU ms / msg: ours + MariaDB server"
    xacts_head = "MariaDB Handler_commit (COMMITs) / msg"
    cpu_note = (
        "- *CPU*: user+system time of the benchmark's processes, and of the whole MariaDB "
        "server (its one `mariadbd` process serves every database: nothing else should use "
        "the server during the run; the environment says whether another client was seen). "
        "*our share*: that CPU over wall time x cores; *CPUs busy*: all use during the "
        "scenario, anyone's. When the CPUs are busy and our share is well under 100%, "
        "other work on the machine slowed the run."
    )
    xacts_note = (
        "- *Handler_commit / msg*: the server's storage-engine commits per message, "
        "whole server, from `SHOW GLOBAL STATUS`: one per statement (reads included, "
        "everything counted: polling, ticks, heartbeats) and one more per transaction "
        "that ends in a commit; an autocommit write counts 2. In brackets, "
        "`Com_commit + Com_rollback`: the explicit transactions (COMMIT or ROLLBACK "
        "statements) per message; autocommit statements are not among them. Neither is "
        "PostgreSQL's transaction count. *rows written*: `Handler_write + "
        "Handler_update + Handler_delete` (rows inserted, updated, deleted; temporary "
        "tables apart) per message, whole server."
    )

    def __init__(self, url: str) -> None:
        super().__init__(url)
        parts = self._parts
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 3306
        self.user = unquote(parts.username or "root")
        self.password = unquote(parts.password or "")
        self.admin = self.connect(None)
        self._pid: int | None = None

    def connect(self, name: str | None) -> MariaConnection:
        params: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password,
            "charset": "utf8mb4",
        }
        if name:
            params["database"] = name
        conn = MariaConnection(**params)
        conn.execute("SET time_zone = '+00:00'")  # Django keeps UTC in DATETIME columns
        return conn

    def _client(self, tool: str, *args: str) -> list[str]:
        return [tool, f"--host={self.host}", f"--port={self.port}", f"--user={self.user}", *args]

    def _create(self, name: str, template: str | None) -> None:
        self.admin.execute(f"CREATE DATABASE {name} CHARACTER SET utf8mb4")
        if template:
            self._copy(template, name)

    def _copy(self, template: str, name: str) -> None:
        """The template's tables, rows and keys into ``name``: ``mysqldump | mysql``."""
        env = {**os.environ, "MYSQL_PWD": self.password}
        dump = self._client(
            _tool("mariadb-dump", "mysqldump"), "--no-tablespaces", "--skip-comments", template
        )
        load = self._client(_tool("mariadb", "mysql"), name)
        with subprocess.Popen(dump, stdout=subprocess.PIPE, env=env) as dumping:
            try:
                loaded = subprocess.run(
                    load, stdin=dumping.stdout, env=env, check=False, timeout=COPY_TIMEOUT
                )
                dumped = dumping.wait(COPY_TIMEOUT)
            except subprocess.TimeoutExpired:
                dumping.kill()
                raise Failed(f"copying {template}: not done after {COPY_TIMEOUT:.0f}s") from None
        if dumped or loaded.returncode:
            raise Failed(f"copying {template} into {name} failed ({dumped}, {loaded.returncode})")

    def _drop(self, name: str) -> None:
        # Every process the scenario started is stopped by now: nothing holds the database.
        self.admin.execute(f"DROP DATABASE IF EXISTS {name}")

    def server_version(self) -> str:
        row = self.admin.execute("SELECT VERSION()").fetchone()
        return str(row[0]).split("-")[0] if row else "?"

    def env_rows(self) -> list[tuple[str, str]]:
        row = self.admin.execute(
            "SELECT @@innodb_flush_log_at_trx_commit, @@tx_isolation, @@innodb_buffer_pool_size"
        ).fetchone()
        flush, isolation, pool = row if row else ("?", "?", 0)
        return [
            (
                "MariaDB settings",
                f"innodb_flush_log_at_trx_commit={flush}, {isolation}, "
                f"buffer pool {int(pool) / 2**20:.0f} MiB",
            )
        ]

    def async_commit(self, name: str) -> None:
        raise Failed("--async-commit is PostgreSQL's synchronous_commit, per database")

    def stats(self, conn: MariaConnection) -> tuple[int, int, int]:
        """Handler_commit, rows written and COMMIT/ROLLBACK statements: the whole
        server's (MariaDB keeps no such counts per database without plugins)."""
        names = ", ".join(f"'{name}'" for name in MARIA_STATUS)
        rows = conn.execute(f"SHOW GLOBAL STATUS WHERE Variable_name IN ({names})").fetchall()
        status = {str(name): int(value) for name, value in rows}
        written = sum(status[f"Handler_{what}"] for what in ("write", "update", "delete"))
        return status["Handler_commit"], written, status["Com_commit"] + status["Com_rollback"]

    def server_process(self, conn: MariaConnection) -> psutil.Process | None:
        """The server's one process: by ``@@pid_file``, else by name."""
        if self._pid is None:
            row = conn.execute("SELECT @@pid_file").fetchone()
            with contextlib.suppress(OSError, ValueError, TypeError):
                self._pid = int(Path(str(row[0])).read_text().strip())
            if self._pid is None:
                names = {"mariadbd", "mysqld"}
                found = [p.pid for p in psutil.process_iter(["name"]) if p.info["name"] in names]
                self._pid = found[0] if len(found) == 1 else 0
            if not self._pid:
                log("the MariaDB server's process was not found: its CPU is not counted")
        try:
            return psutil.Process(self._pid) if self._pid else None
        except psutil.Error:
            return None

    def _cpu(self, conn: MariaConnection) -> float:
        proc = self.server_process(conn)
        if proc is None:
            return float("nan")
        try:
            times = proc.cpu_times()
        except psutil.Error:
            return float("nan")
        return times.user + times.system

    def cpu_mark(self, conn: MariaConnection) -> float:
        return self._cpu(conn)

    def server_cpu(self, conn: MariaConnection, mark: float) -> float:
        """CPU seconds of the whole server since ``mark``."""
        return self._cpu(conn) - mark

    def others(self, conn: MariaConnection) -> set[str]:
        """The databases (or 'no database') of the server's other clients now, but for
        this benchmark's: what is counted server-wide counts their work too."""
        rows = conn.execute(
            "SELECT DB, COMMAND FROM information_schema.PROCESSLIST"
            " WHERE ID <> CONNECTION_ID() AND USER <> 'system user'"
            " AND COMMAND NOT IN ('Daemon', 'Binlog Dump')"
        ).fetchall()
        seen = set()
        for db, command in rows:
            if db and str(db).startswith(self.prefix):
                continue  # this benchmark's
            if not db and command == "Sleep":
                continue  # connected to no database, idle
            seen.add(str(db) if db else "(no database)")
        return seen

    def due_now(self, conn: MariaConnection) -> None:
        conn.execute(
            "UPDATE reminders_scheduledtask"
            " SET run_at = UTC_TIMESTAMP(6), next_run = UTC_TIMESTAMP(6)"
        )

    def finished(self, conn: MariaConnection) -> tuple[float, float, float, float, int]:
        rows = conn.execute(
            "SELECT finished_at, TIMESTAMPDIFF(MICROSECOND, due_at, finished_at) / 1e6"
            " FROM reminders_taskrun"
        ).fetchall()
        last = max(finished for finished, _late in rows).replace(tzinfo=UTC)
        late = sorted(float(x) for _finished, x in rows)
        row = conn.execute(
            "SELECT count(*) FROM reminders_sendlog WHERE status = 'sent'"
        ).fetchone()
        sent = int(row[0]) if row else 0
        return last.timestamp(), _percentile(late, 0.5), _percentile(late, 0.95), late[-1], sent


def _percentile(ordered: list[float], q: float) -> float:
    """PostgreSQL's ``percentile_cont``: interpolated between the two nearest values."""
    at = q * (len(ordered) - 1)
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def _tool(*names: str) -> str:
    """The first of these client programs on the PATH."""
    for name in names:
        if found := shutil.which(name):
            return found
    raise Failed(f"none of {', '.join(names)} on the PATH")


# Processes -------------------------------------------------------------------------------


class Processes:
    """The processes one scenario starts; stopped by pid, with their descendants."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.started: list[subprocess.Popen[bytes]] = []
        self.known: dict[int, psutil.Process] = {}

    def start(self, label: str, args: list[str], env: dict[str, str]) -> None:
        out = (self.logs / f"{label}.log").open("wb")
        proc = subprocess.Popen(
            [PYTHON, "manage.py", *args],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C reaches only us; we stop them in order
        )
        out.close()
        self.started.append(proc)
        self.watch()

    def watch(self) -> None:
        """Remember every descendant seen, so that none outlives the benchmark."""
        for proc in self.started:
            try:
                parent = psutil.Process(proc.pid)
                self.known.setdefault(proc.pid, parent)
                for child in parent.children(recursive=True):
                    self.known.setdefault(child.pid, child)
            except psutil.NoSuchProcess:
                continue

    def cpu_seconds(self) -> float:
        total = 0.0
        for proc in self.known.values():
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                times = proc.cpu_times()
                total += times.user + times.system
        return total

    def crashed(self) -> list[int]:
        return [proc.pid for proc in self.started if proc.poll() not in (None, 0)]

    def stop(self, grace: float = 20.0) -> None:
        self.watch()
        for proc in self.started:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in self.started:
            try:
                proc.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                log(f"pid {proc.pid} ignored SIGTERM for {grace}s; killing it")
                proc.kill()
                proc.wait(5)
        leftovers = [p for p in self.known.values() if _alive(p)]
        for proc in leftovers:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.terminate()
        _, still = psutil.wait_procs(leftovers, timeout=5)
        for proc in still:
            log(f"pid {proc.pid} outlived its parent; killing it")
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        self.started.clear()
        self.known.clear()


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# Counting --------------------------------------------------------------------------------


@dataclass
class Sends:
    """What the counting sender wrote: one line per message."""

    times: list[float] = field(default_factory=list)
    keys: set[str] = field(default_factory=set)
    duplicates: int = 0

    @classmethod
    def read(cls, path: Path) -> Sends:
        sends = cls()
        if not path.exists():
            return sends
        for line in path.read_text().splitlines():
            stamp, key, _pid = line.split()
            sends.times.append(float(stamp))
            if key in sends.keys:
                sends.duplicates += 1
            sends.keys.add(key)
        return sends


@dataclass
class Result:
    label: str
    n: int
    elapsed: float  # first process start to the last send
    first_send: float  # first process start to the first send
    last_send: float
    cpu: float  # user+system seconds of our processes
    db_cpu: float  # of the PostgreSQL backends serving the scenario's database, or of
    # the whole MariaDB server
    busy: float  # share of all cores busy (anyone's) while the scenario ran
    xacts: int  # PostgreSQL transactions in the scenario's database; MariaDB Handler_commit
    rows: int  # rows inserted, updated or deleted there (MariaDB: in the whole server)
    setup: float  # seconds spent filling the database before the clock started
    lateness: tuple[float, float, float] | None = None  # p50, p95, max
    jobs: int | None = None
    commits: int = 0  # MariaDB: COMMIT and ROLLBACK statements
    others: list[str] = field(default_factory=list)  # MariaDB: other clients seen

    @property
    def rate(self) -> float:
        return self.n / self.elapsed

    @property
    def steady_rate(self) -> float:
        span = self.last_send - self.first_send
        return (self.n - 1) / span if span > 0 else float("nan")


class Failed(Exception):
    pass


def backend_cpu(conn: psycopg.Connection) -> float:
    """CPU seconds of the PostgreSQL processes connected to this database (read, not
    touched); the other benchmarks measure the server with it too."""
    rows = conn.execute(
        "SELECT pid FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
    ).fetchall()
    total = 0.0
    for (pid,) in rows:
        with contextlib.suppress(psutil.Error):
            times = psutil.Process(pid).cpu_times()
            total += times.user + times.system
    return total


def busy_share(before: Any, after: Any) -> float:
    idle = (after.idle + getattr(after, "iowait", 0)) - (before.idle + getattr(before, "iowait", 0))
    total = sum(after) - sum(before)
    return 1 - idle / total if total > 0 else float("nan")


class Run:
    """One timed scenario: processes started, waited for, measured, stopped."""

    def __init__(self, dbs: Server, conn: Any, procs: Processes) -> None:
        self.dbs = dbs
        self.conn = conn
        self.procs = procs
        self.stats = dbs.stats(conn)
        self.cpu_before = psutil.cpu_times()
        self.server_mark = dbs.cpu_mark(conn)
        self.others = dbs.others(conn)
        self.started = time.time()

    def wait(
        self,
        sends: Path,
        n: int,
        settled: Callable[[], bool],
        timeout: float,
        what: str,
        check: Callable[[], None] = lambda: None,
    ) -> None:
        """Until ``n`` sends are counted and ``settled()``; ``check()`` every 2 s.

        Progress is read from the count file, not the database, so that watching adds
        next to nothing to the database work being measured.
        """
        deadline = time.monotonic() + timeout
        checked = looked = time.monotonic()
        while _lines(sends) < n or not settled():
            self.procs.watch()
            if crashed := self.procs.crashed():
                raise Failed(f"{what}: process(es) {crashed} exited early")
            if time.monotonic() > deadline:
                raise Failed(f"{what}: not done after {timeout:.0f}s")
            if time.monotonic() - checked > 2:
                check()
                checked = time.monotonic()
            while _lines(sends) < n and time.monotonic() < deadline:
                time.sleep(0.05)
                if self.procs.crashed():
                    break
                if time.monotonic() - looked > 2:  # a server-wide count: who else is there
                    self.others |= self.dbs.others(self.conn)
                    looked = time.monotonic()
        self.busy = busy_share(self.cpu_before, psutil.cpu_times())
        self.procs.watch()
        self.cpu = self.procs.cpu_seconds()
        self.db_cpu = self.dbs.server_cpu(self.conn, self.server_mark)
        self.others |= self.dbs.others(self.conn)
        self.procs.stop()
        # Backends flush their statistics when they exit.
        time.sleep(0.5)
        after = self.dbs.stats(self.conn)
        self.xacts, self.rows, self.commits = (
            a - b for a, b in zip(after, self.stats, strict=True)
        )
        if self.others:
            log(
                "other clients of the server during the scenario: " + ", ".join(sorted(self.others))
            )

    def result(self, label: str, n: int, sends: Sends, end: float, **extra: Any) -> Result:
        return Result(
            label=label,
            n=n,
            elapsed=end - self.started,
            first_send=min(sends.times) - self.started,
            last_send=max(sends.times) - self.started,
            cpu=self.cpu,
            db_cpu=self.db_cpu,
            busy=self.busy,
            xacts=self.xacts,
            rows=self.rows,
            commits=self.commits,
            others=sorted(self.others),
            **extra,
        )


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


# Scenarios -------------------------------------------------------------------------------


def show_log_tails(logs: Path, lines: int = 15) -> None:
    """Print the end of each process log of a scenario that failed."""
    for path in sorted(logs.glob("*.log")):
        tail = path.read_text(errors="replace").splitlines()[-lines:]
        log(f"--- last lines of {path.name} ---\n" + "\n".join(tail))


@dataclass
class Bench:
    dbs: Server
    template: str
    work: Path
    n: int
    processes: int
    workers: int
    timeout: float
    profile: int
    profiles: list[str] = field(default_factory=list)
    spies: list[subprocess.Popen[bytes]] = field(default_factory=list)
    count: int = 0

    def env(self, db: str, count_file: Path, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            DJANGO_SETTINGS_MODULE=SETTINGS,
            DATABASE_URL=self.dbs.url(db),
            BENCH_COUNT_FILE=str(count_file),
            Q_WORKERS=str(self.workers),
            LOG_LEVEL="WARNING",
            PYTHONDONTWRITEBYTECODE="1",
        )
        env.update(extra)
        return env

    def fixture(self, env: dict[str, str], what: str, *extra: str) -> float:
        out = subprocess.run(
            [PYTHON, "-m", "benchmarks.fixtures", what, str(self.n), *extra],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode:
            raise Failed(f"fixtures {what} failed:\n{out.stdout}{out.stderr}")
        return float(out.stdout.split()[-1])

    @contextlib.contextmanager
    def scenario(
        self, label: str, async_commit: bool = False
    ) -> Iterator[tuple[str, Path, Processes]]:
        log(label)
        self.count += 1
        # PostgreSQL cuts names at 63 characters: the prefix takes up to about 30.
        slug = f"{self.count:02d}_{_slug(label)}"[:30]
        db = self.dbs.create(slug, template=self.template)
        if async_commit:
            self.dbs.async_commit(db)
        logs = self.work / slug
        logs.mkdir()
        procs = Processes(logs)
        try:
            yield db, logs / "sends.txt", procs
        except BaseException:
            show_log_tails(logs)
            raise
        finally:
            procs.stop()
            self.dbs.drop(db)

    def maybe_profile(self, procs: Processes, label: str) -> None:
        """Sample the first process and its descendants with py-spy, if asked."""
        if not self.profile:
            return
        spy = shutil.which("py-spy") or str(Path(PYTHON).with_name("py-spy"))
        if not Path(spy).exists():
            log("profile: py-spy is not installed (pip install py-spy into the venv)")
            return
        time.sleep(1.0)  # py-spy needs the interpreter up in the process it attaches to
        out = self.work / f"{self.count:02d}_{_slug(label)}.collapsed.txt"
        cmd = [spy, "record", "--pid", str(procs.started[0].pid), "--subprocesses"]
        cmd += ["--duration", str(self.profile), "--rate", "50", "--nonblocking"]
        cmd += ["--format", "raw", "--output", str(out)]
        with out.with_suffix(".log").open("wb") as spy_log:
            self.spies.append(subprocess.Popen(cmd, stdout=spy_log, stderr=subprocess.STDOUT))
        self.profiles.append(str(out))

    def stop_spies(self) -> None:
        for spy in self.spies:
            try:
                spy.wait(10)
            except subprocess.TimeoutExpired:
                spy.kill()
                spy.wait(5)
        self.spies.clear()

    def engine(
        self, label: str, async_commit: bool = False, channel: str = "bench", **knobs: str
    ) -> Result:
        with self.scenario(label, async_commit) as (db, count_file, procs):
            env = self.env(db, count_file, **knobs)
            seed = self.fixture(env, "tasks", channel)
            with self.dbs.connect(db) as conn:
                # Due from this moment: lateness counts startup, as a deploy would see it.
                self.dbs.due_now(conn)
                run = Run(self.dbs, conn, procs)
                for i in range(self.processes):
                    procs.start(f"run_reminders-{i}", ["run_reminders"], env)
                self.maybe_profile(procs, label)

                def settled() -> bool:
                    row = conn.execute(
                        "SELECT count(*) FROM reminders_taskrun WHERE status = 'sent'"
                    ).fetchone()
                    return row is not None and row[0] == self.n

                def check() -> None:
                    row = conn.execute(
                        "SELECT count(*) FROM reminders_taskrun"
                        " WHERE status IN ('failed', 'skipped', 'unknown')"
                    ).fetchone()
                    if row and row[0]:
                        raise Failed(f"{label}: {row[0]} runs ended other than sent")

                run.wait(count_file, self.n, settled, self.timeout, label, check)
                last_finished, p50, p95, worst, ledger_sent = self.dbs.finished(conn)
                if ledger_sent != self.n:
                    raise Failed(f"{label}: SendLog has {ledger_sent} sent, expected {self.n}")
            sends = Sends.read(count_file)
            self.check(label, sends)
            return run.result(
                label,
                self.n,
                sends,
                last_finished,
                setup=seed,
                lateness=(p50, p95, worst),
                jobs=-(-self.n // int(knobs.get("REMINDERS_RUNS_PER_JOB", "20"))),
            )

    def bare(self, label: str, async_commit: bool = False) -> Result:
        with self.scenario(label, async_commit) as (db, count_file, procs):
            env = self.env(db, count_file)
            enqueue = self.fixture(env, "jobs")
            with self.dbs.connect(db) as conn:
                run = Run(self.dbs, conn, procs)
                for i in range(self.processes):
                    procs.start(f"qcluster-{i}", ["qcluster"], env)
                self.maybe_profile(procs, label)

                def settled() -> bool:
                    # The monitor deletes a job's OrmQ row after its worker returned.
                    row = conn.execute("SELECT count(*) FROM django_q_ormq").fetchone()
                    return row is not None and row[0] == 0

                run.wait(count_file, self.n, settled, self.timeout, label)
            sends = Sends.read(count_file)
            self.check(label, sends)
            return run.result(
                label,
                self.n,
                sends,
                max(sends.times),
                jobs=self.n,
                setup=enqueue,
            )

    def check(self, label: str, sends: Sends) -> None:
        if len(sends.times) != self.n or sends.duplicates:
            raise Failed(
                f"{label}: {len(sends.times)} sends, {len(sends.keys)} distinct, "
                f"expected {self.n} once each"
            )


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


# Report ----------------------------------------------------------------------------------


def environment(dbs: Server, workers: int, processes: int) -> list[tuple[str, str]]:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return [
        ("CPU cores (logical/physical)", f"{os.cpu_count()}/{psutil.cpu_count(logical=False)}"),
        ("Memory", f"{psutil.virtual_memory().total / 2**30:.1f} GiB"),
        ("OS", f"{platform.system()} {platform.release()}"),
        ("Python", platform.python_version()),
        ("Django", version("django")),
        ("django-q2", version("django-q2")),
        (dbs.driver, version(dbs.driver)),
        (dbs.name, dbs.server_version()),
        *dbs.env_rows(),
        ("Processes x django-q2 workers", f"{processes} x {workers}"),
        ("Code", code_version()),
        (
            "Engine knobs from the environment",
            ", ".join(
                f"{name}={os.environ[name]}"
                for name in ("REMINDERS_CLAIM_BATCH", "REMINDERS_MAX_IN_FLIGHT")
                if name in os.environ
            )
            or "none (CLAIM_BATCH 500, MAX_IN_FLIGHT 1000, TICK_SECONDS 1)",
        ),
        ("Load average at start (1/5/15 min)", load),
    ]


def code_version() -> str:
    def git(*args: str) -> str:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return out.stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "?"
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "reminders", "config")
    return commit + (" + uncommitted engine changes" if dirty else "")


def fmt_lateness(result: Result) -> str:
    if result.lateness is None:
        return "-"
    p50, p95, worst = result.lateness
    return f"{p50:.2f} / {p95:.2f} / {worst:.2f}"


def report(
    runs: dict[str, list[Result]],
    env: list[tuple[str, str]],
    command: str,
    n: int,
    dbs: Server,
) -> str:
    cores = os.cpu_count() or 1
    rounds = max(len(results) for results in runs.values())
    best = {label: max(results, key=lambda r: r.rate) for label, results in runs.items()}
    lines = [
        f"### Throughput: {n} messages, instant sender, same machine, same run",
        "",
        "| scenario | django-q2 jobs | total s | msgs/s | steady msgs/s | first send s "
        f"| lateness p50 / p95 / max s | {dbs.cpu_head} | our share of the CPUs "
        f"| CPUs busy (anyone) | {dbs.xacts_head} | rows written / msg |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, r in best.items():
        rate = f"{r.rate:.0f}"
        if len(runs[label]) > 1:
            rate += " (" + ", ".join(f"{x.rate:.0f}" for x in runs[label]) + ")"
        share = (r.cpu + r.db_cpu) / (r.elapsed * cores)
        lines.append(
            f"| {label} | {r.jobs} | {r.elapsed:.2f} | {rate} | {r.steady_rate:.0f} "
            f"| {r.first_send:.2f} | {fmt_lateness(r)} "
            f"| {r.cpu / r.n * 1000:.1f} + {r.db_cpu / r.n * 1000:.1f} | {share:.0%} "
            f"| {r.busy:.0%} | {_xacts(r, dbs)} | {r.rows / r.n:.1f} |"
        )
    lines.append("")
    bare = best.get(BARE)
    for label in [label for label in best if label in COMPARED] if bare else []:
        engine = best[label]
        cpu_ratio = (engine.cpu + engine.db_cpu) / (bare.cpu + bare.db_cpu)
        lines.append(
            f"**{label} vs bare django-q2 (best of {len(runs[label])} interleaved "
            f"runs each): {_versus(engine.rate / bare.rate)} end to end, "
            f"{_versus(engine.steady_rate / bare.steady_rate)} between first and last "
            f"message, {cpu_ratio:.2f}x the CPU per message.**"
        )
        if len(runs[label]) > 1 and len(runs[BARE]) == len(runs[label]):
            # Round by round: each engine run against the bare run interleaved with it.
            pairs = list(zip(runs[label], runs[BARE], strict=True))
            lines.append(
                "Round by round: "
                + ", ".join(f"{e.rate / b.rate:.2f}x" for e, b in pairs)
                + " the throughput; "
                + ", ".join(f"{(e.cpu + e.db_cpu) / (b.cpu + b.db_cpu):.2f}x" for e, b in pairs)
                + " the CPU per message."
            )
        lines.append("")
    lines += [
        "- Each row is the scenario's best run"
        + (
            f"; *msgs/s* lists every run in brackets ({rounds} rounds, interleaved)."
            if rounds > 1
            else "."
        ),
        "- *total*: first process start to the last message; *msgs/s* = messages / total.",
        "- *steady*: first to last message, i.e. without process start-up.",
        "- *lateness*: `finished_at - due_at` of each run; the tasks fall due at the "
        "moment the processes are started, so start-up counts.",
        dbs.cpu_note,
        dbs.xacts_note,
        *_others(runs, dbs),
        "- Not timed: inserting the engine's tasks "
        f"({_spread(runs, 'engine')}) and enqueueing the bare jobs ({_spread(runs, 'bare')}),"
        " both before the processes start. The engine's claiming and enqueueing is timed.",
    ]
    lines += ["", "| environment | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in env]
    lines += ["", "Reproduce:", "", "```", command, "```"]
    return "\n".join(lines)


def _xacts(result: Result, dbs: Server) -> str:
    per_message = f"{result.xacts / result.n:.2f}"
    if dbs.server_wide:
        per_message += f" ({result.commits / result.n:.2f})"
    return per_message


def _others(runs: dict[str, list[Result]], dbs: Server) -> list[str]:
    """Where the server's counts are the whole server's: whether another client was seen."""
    if not dbs.server_wide:
        return []
    seen = [
        f"{label}, round {i}: {', '.join(r.others)}"
        for label, results in runs.items()
        for i, r in enumerate(results, 1)
        if r.others
    ]
    return [
        "- Other clients of the server seen during the scenarios (looked every 2 s): "
        + (
            "; ".join(seen) + ". Their work is in the server's CPU, commits and rows."
            if seen
            else "none."
        )
    ]


def _spread(runs: dict[str, list[Result]], prefix: str) -> str:
    setups = [r.setup for label, rs in runs.items() if label.startswith(prefix) for r in rs]
    if not setups:
        return "-"
    low, high = f"{min(setups):.1f}", f"{max(setups):.1f}"
    return f"{low}s" if low == high else f"{low}-{high}s"


def _versus(ratio: float) -> str:
    if ratio >= 1:
        return f"{ratio:.2f}x the throughput ({(ratio - 1) * 100:.0f}% faster)"
    return f"{ratio:.2f}x the throughput ({(1 - ratio) * 100:.0f}% slower)"


def compile_sources() -> None:
    """Byte-compile the project's packages once, as a deployed service has them: the
    processes run with ``PYTHONDONTWRITEBYTECODE`` (none of them writes a cache beside
    another), so a module without a fresh cache would be compiled again at each start,
    on the clock, and the more modules a side imports the more it would pay."""
    names = ("config", "reminders", "ops", "wecom_sandbox", "benchmarks")
    subprocess.run([PYTHON, "-m", "compileall", "-q", *(str(ROOT / n) for n in names)], check=True)


def print_profiles(paths: list[Path]) -> None:
    sys.path.insert(0, str(ROOT))
    from benchmarks.profile_summary import summarize

    print("\n### py-spy, first process tree of each scenario\n\n```")
    for path in paths:
        print(summarize(path, top=20) if path.exists() else f"{path}: py-spy wrote nothing")
    print("```")
    log("collapsed stacks kept in " + str(paths[0].parent))


# Main ------------------------------------------------------------------------------------


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=3000, help="messages per scenario")
    parser.add_argument(
        "--processes", type=int, default=2, help="run_reminders / qcluster processes"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=int(os.environ.get("Q_WORKERS", "2")),
        help="django-q2 workers per process (Q_WORKERS)",
    )
    parser.add_argument(
        "--sweep",
        default="50",
        help="extra engine runs, once each, at these REMINDERS_RUNS_PER_JOB values, comma "
        "separated ('' for none; 1 takes about as long as the rest together)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=2,
        help="rounds of the engine / bare django-q2 pair, interleaved; the best is shown",
    )
    parser.add_argument("--timeout", type=float, default=120.0, help="per scenario, seconds")
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        help="sample the first process tree of each scenario with py-spy for this many seconds",
    )
    parser.add_argument(
        "--async-commit",
        action="store_true",
        help="also run both with synchronous_commit=off: how much of the time is WAL flushes",
    )
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    url = os.environ.get("DATABASE_URL", DEFAULT_URL)
    command = " ".join(
        [f"DATABASE_URL={shlex.quote(url)}", ".venv/bin/python", "benchmarks/throughput.py"]
        + [shlex.quote(a) for a in argv]
    )
    if not argv:
        command = f"make bench   # runs: {command}"

    def interrupted(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    work = Path(tempfile.mkdtemp(prefix="bench-reminders-"))
    dbs = databases(url)
    if args.async_commit and dbs.server_wide:
        dbs.admin.close()
        sys.exit("--async-commit is PostgreSQL's (synchronous_commit off per database)")
    bench: Bench | None = None
    runs: dict[str, list[Result]] = {}
    env_rows: list[tuple[str, str]] = []
    keep_work = False
    try:
        env_rows = environment(dbs, args.workers, args.processes)
        compile_sources()
        template = dbs.migrated()
        bench = Bench(
            dbs,
            template,
            work,
            args.tasks,
            args.processes,
            args.workers,
            args.timeout,
            args.profile,
        )
        # The pair that is compared runs interleaved, so that both see the same weather
        # on a shared machine; the sweep runs once.
        repeated: list[tuple[str, Callable[[str], Result]]] = [
            (ENGINE, partial(bench.engine, REMINDERS_RUNS_PER_JOB="20")),
            (BARE, bench.bare),
            (
                ENGINE_DEDUP,
                partial(bench.engine, channel="bench_dedup", REMINDERS_RUNS_PER_JOB="20"),
            ),
        ]
        if args.async_commit:
            repeated += [
                (
                    "engine, synchronous_commit=off",
                    partial(bench.engine, async_commit=True, REMINDERS_RUNS_PER_JOB="20"),
                ),
                ("bare django-q2, synchronous_commit=off", partial(bench.bare, async_commit=True)),
            ]
        once = [
            (f"engine, {value} runs/job", partial(bench.engine, REMINDERS_RUNS_PER_JOB=value))
            for value in (v.strip() for v in args.sweep.split(","))
            if value
        ]
        plan = [item for _ in range(args.repeat) for item in repeated] + once
        for label, scenario in plan:
            result = scenario(label)
            runs.setdefault(label, []).append(result)
        print(report(runs, env_rows, command, args.tasks, dbs))
        if bench.profiles:
            keep_work = True
            bench.stop_spies()  # each writes its file when its sampling ends
            print_profiles([Path(p) for p in bench.profiles])
        return 0
    except KeyboardInterrupt:
        log("interrupted; stopping what was started and dropping the databases")
        return 130
    except Failed as exc:
        keep_work = True
        log(f"FAILED: {exc} (logs in {work})")
        if runs:
            print(report(runs, env_rows, command, args.tasks, dbs))
        return 1
    finally:
        if bench is not None:
            bench.stop_spies()
        dbs.drop_all()
        if not keep_work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
