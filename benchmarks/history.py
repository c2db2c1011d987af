"""A year of history: the claim and materialize with 10,000 and with 1,000,000 finished runs.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/reminders \\
    MARIADB_URL=mysql://root@127.0.0.1:3306/reminders \\
        .venv/bin/python benchmarks/history.py [--small 10000] [--large 1000000] [--repeat 15]
        [--backend both|postgresql|mariadb]

Only the server, user and password of each URL are used: on each server a fresh database
``bench_reminders_<pid>_history`` is created, migrated, filled by SQL and dropped at the
end, also on failure. ``--backend both`` (the default) runs each server's part in a
process of its own; a MariaDB that cannot be reached is said and skipped.

The fill, identical on both servers (``generate_series`` on PostgreSQL, the sequence
engine's ``seq_1_to_N`` on MariaDB; the draws derive from the row number, not a random
generator): 2,000 daily tasks of five kinds (``benchmarks/dashboard.py``'s), and a year
of finished runs, 93% sent, 2% failed, 1% unknown, 1% expired, 2% skipped, 1% cancelled,
due evenly over the 365 days before the last hour. Every fifth run belongs to a one-shot
task of its own, now ``completed`` (1,000,000 runs: 200,000 such tasks), the others to
the daily tasks. The ``--small`` history is every ``large/small``-th run of the large
one; the database then grows to the ``--large`` one with the rest.

The live work is the same at both sizes: 1,000 waiting runs due in the last 17 minutes
(of active tasks, all three priorities) and, while materialize is measured, 1,000 of the
daily tasks due 30 s ago. Measured at each size, after ``VACUUM ANALYZE`` (PostgreSQL) or
``ANALYZE TABLE`` (MariaDB):

* ``dispatch.claim(owner, 500)``: 500 of the 1,000 waiting runs claimed and enqueued;
  reset, untimed, between calls: the claimed runs put back to ``scheduled`` and the
  django-q2 ``OrmQ`` rows it wrote deleted;
* ``dispatch.materialize()`` (its default limit: 500 tasks a call): reset, untimed: the
  runs it made deleted and the tasks' ``next_run`` set back to 30 s ago;

the median and worst of ``--repeat`` calls after one warm-up, the queries of one call
with their times, and the plan of the claim's ``SELECT ... FOR UPDATE SKIP LOCKED`` and
of materialize's due-tasks query (``EXPLAIN (ANALYZE, BUFFERS)`` on PostgreSQL,
``ANALYZE`` on MariaDB, inside a transaction rolled back), with the rows MariaDB's
handlers read for it. ``--index`` (repeatable) adds an index by raw SQL at the large size
and measures again, then drops it: ``--index 'mariadb:CREATE INDEX ...'`` or
``'postgresql:...'``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.dashboard import TASKS_SQL, environment
from benchmarks.throughput import DEFAULT_URL, PYTHON, ROOT, Databases, code_version, log

DEFAULT_MARIADB_URL = "mysql://root@127.0.0.1:3306/reminders"
OWNER = "bench-history"
CLAIM_LIMIT = 500

# The run columns every fill writes, in this order.
RUN_COLUMNS = """(task_id, occurrence, run_date, due_at, status, priority, ledger_key, attempts,
    crashes, next_attempt_at, lease_owner, lease_token, lease_expires_at, started_at,
    finished_at, duration, error_code, error_message, is_compensation, is_manual,
    requested_by, handled_at, handled_by, deadline, stuck_reported_at, created_at)"""

# Every SQL text built here holds constants and integers only (S608 below).

# Deterministic draws from the row number i, the same on both servers: the status (per
# mille), the stagger (s), the lateness (ms) and the send's duration (ms).
DRAW = "(({i} * 7919) %% 1000)"
STAGGER = "(({i} * 104729) %% 300)"
LATE_MS = "(({i} * 15485863) %% 20000)"
TOOK_MS = "(50 + ({i} * 32452843) %% 600)"


def status_sql(i: str, recent: str) -> str:
    """The status of run ``i``. A ``failed`` or ``expired`` run of the last days
    (``recent``: within ``compensate_max_age_seconds``) is ``sent`` instead: the fill has no
    make-up runs, and such a run would be made up anew at every materialize."""
    draw = DRAW.format(i=i)
    return (
        f"CASE WHEN {draw} < 930 THEN 'sent' WHEN {draw} < 950 THEN"
        f" CASE WHEN {recent} THEN 'sent' ELSE 'failed' END"
        f" WHEN {draw} < 960 THEN 'unknown' WHEN {draw} < 970 THEN"
        f" CASE WHEN {recent} THEN 'sent' ELSE 'expired' END"
        f" WHEN {draw} < 990 THEN 'skipped' ELSE 'cancelled' END"
    )


# PostgreSQL --------------------------------------------------------------------------------

PG_SERIES = """
    SELECT i::bigint AS i, CAST(%(anchor)s AS timestamptz) - interval '365 days' - interval '1 hour'
               + interval '365 days' * i / %(large)s AS occurrence
    FROM generate_series(1, %(large)s) AS i
    WHERE {phase}
"""

PG_ONCE_TASKS = """
INSERT INTO reminders_scheduledtask
    (kind, recipient, channel, cron, run_at, timezone, payload, priority, status, next_run,
     last_run_at, retry_count, calendar, error_code, error_message, error_at, key,
     created_at, updated_at)
SELECT 'follow_up', 'user' || lpad((s.i %% 100000)::text, 6, '0'), 'wecom', '', s.occurrence,
       'Asia/Shanghai', '{{}}'::jsonb, 'normal', 'completed', NULL, s.occurrence, 0, NULL,
       '', '', NULL, 'once:' || s.i, s.occurrence - interval '1 day', s.occurrence
FROM ({series}) AS s
WHERE s.i %% 5 = 0
"""

PG_RUNS = f"""
INSERT INTO reminders_taskrun {RUN_COLUMNS}
SELECT t.id, s.occurrence, (s.occurrence AT TIME ZONE 'Asia/Shanghai')::date, s.due,
       s.status, CASE t.priority WHEN 'high' THEN 0 WHEN 'normal' THEN 1 ELSE 2 END,
       t.id || ':' || s.i, CASE WHEN s.status IN ('sent', 'failed', 'unknown') THEN 1 ELSE 0 END,
       0, NULL, '', '', NULL,
       CASE WHEN s.status IN ('sent', 'failed', 'unknown') THEN s.due + s.late - s.took END,
       s.due + s.late,
       CASE WHEN s.status IN ('sent', 'failed', 'unknown') THEN s.took END,
       CASE s.status WHEN 'failed' THEN 'code' || (s.i %% 10) WHEN 'unknown' THEN 'in_doubt'
                     WHEN 'expired' THEN 'deadline' WHEN 'skipped' THEN 'holiday' ELSE '' END,
       CASE WHEN s.status IN ('failed', 'unknown', 'expired', 'skipped')
            THEN 'error ' || (s.i %% 10) || ': what the provider said about run ' || s.i
            ELSE '' END,
       false, false, '', NULL, '', s.due + interval '2 hours', NULL,
       s.occurrence - interval '1 hour'
FROM (
    SELECT x.i, x.occurrence,
           x.occurrence + make_interval(secs => {STAGGER.format(i="x.i")}) AS due,
           {status_sql("x.i", "x.occurrence > CAST(%(anchor)s AS timestamptz) - interval '8 days'")}
               AS status,
           make_interval(secs => {LATE_MS.format(i="x.i")} / 1000.0) AS late,
           make_interval(secs => {TOOK_MS.format(i="x.i")} / 1000.0) AS took
    FROM ({{series}}) AS x
) AS s
JOIN reminders_scheduledtask AS t
  ON t.key = CASE WHEN s.i %% 5 = 0 THEN 'once:' || s.i ELSE 'bench:' || (1 + s.i %% %(tasks)s) END
"""  # noqa: S608

# The live work: waiting runs of active daily tasks, due in the last ``live`` seconds.
PG_WAITING = f"""
INSERT INTO reminders_taskrun {RUN_COLUMNS}
SELECT a.id, o.at, (o.at AT TIME ZONE 'Asia/Shanghai')::date, o.at, 'scheduled',
       CASE a.priority WHEN 'high' THEN 0 WHEN 'normal' THEN 1 ELSE 2 END,
       a.id || ':live:' || o.j, 0, 0, o.at, '', '', NULL, NULL, NULL, NULL, '', '', false,
       false, '', NULL, '', NULL, NULL, o.at
FROM (SELECT j, CAST(%(anchor)s AS timestamptz) - make_interval(secs => j) AS at
      FROM generate_series(1, %(live)s) AS j) AS o
JOIN (SELECT id, priority, row_number() OVER (ORDER BY id) AS n
      FROM reminders_scheduledtask WHERE status = 'active' AND cron <> '') AS a
  ON a.n = 1 + (o.j - 1) * 7 %% (%(tasks)s * 99 / 100)
"""  # noqa: S608


# MariaDB -----------------------------------------------------------------------------------

MARIA_SERIES = """
    SELECT CAST(seq AS SIGNED) AS i,
           CAST(%(anchor)s AS DATETIME(6)) - INTERVAL 365 DAY - INTERVAL 1 HOUR
               + INTERVAL FLOOR(365 * 86400 * 1000000 / %(large)s * seq) MICROSECOND
               AS occurrence
    FROM seq_1_to_{large}
    WHERE {phase}
"""

MARIA_TASKS = """
INSERT INTO reminders_scheduledtask
    (kind, recipient, channel, cron, run_at, timezone, payload, priority, status, next_run,
     last_run_at, retry_count, calendar, error_code, error_message, error_at, `key`,
     created_at, updated_at)
SELECT ELT(1 + seq %% 5, 'daily_report', 'weekly_report', 'follow_up', 'birthday',
           'inquiry_timeout'),
       CONCAT('user', LPAD(seq, 5, '0')),
       ELT(1 + seq %% 4, 'wecom', 'wecom', 'wecom_robot', 'console'),
       '0 9 * * *', NULL, 'Asia/Shanghai', '{{}}', ELT(1 + seq %% 3, 'high', 'normal', 'low'),
       IF(seq %% 100 = 0, 'paused', 'active'), %(anchor)s + INTERVAL 1 DAY, NULL, 0, NULL,
       '', '', NULL, CONCAT('bench:', seq), %(anchor)s, %(anchor)s
FROM seq_1_to_{tasks}
"""

MARIA_ONCE_TASKS = """
INSERT INTO reminders_scheduledtask
    (kind, recipient, channel, cron, run_at, timezone, payload, priority, status, next_run,
     last_run_at, retry_count, calendar, error_code, error_message, error_at, `key`,
     created_at, updated_at)
SELECT 'follow_up', CONCAT('user', LPAD(s.i %% 100000, 6, '0')), 'wecom', '', s.occurrence,
       'Asia/Shanghai', '{{}}', 'normal', 'completed', NULL, s.occurrence, 0, NULL, '', '',
       NULL, CONCAT('once:', s.i), s.occurrence - INTERVAL 1 DAY, s.occurrence
FROM ({series}) AS s
WHERE s.i %% 5 = 0
"""

MARIA_RUNS = f"""
INSERT INTO reminders_taskrun {RUN_COLUMNS}
SELECT t.id, s.occurrence, DATE(s.occurrence + INTERVAL 8 HOUR), s.due, s.status,
       CASE t.priority WHEN 'high' THEN 0 WHEN 'normal' THEN 1 ELSE 2 END,
       CONCAT(t.id, ':', s.i), IF(s.status IN ('sent', 'failed', 'unknown'), 1, 0), 0, NULL,
       '', '', NULL,
       IF(s.status IN ('sent', 'failed', 'unknown'),
          s.due + INTERVAL (s.late_ms - s.took_ms) * 1000 MICROSECOND, NULL),
       s.due + INTERVAL s.late_ms * 1000 MICROSECOND,
       IF(s.status IN ('sent', 'failed', 'unknown'), s.took_ms * 1000, NULL),
       CASE s.status WHEN 'failed' THEN CONCAT('code', s.i %% 10) WHEN 'unknown' THEN 'in_doubt'
                     WHEN 'expired' THEN 'deadline' WHEN 'skipped' THEN 'holiday' ELSE '' END,
       IF(s.status IN ('failed', 'unknown', 'expired', 'skipped'),
          CONCAT('error ', s.i %% 10, ': what the provider said about run ', s.i), ''),
       0, 0, '', NULL, '', s.due + INTERVAL 2 HOUR, NULL, s.occurrence - INTERVAL 1 HOUR
FROM (
    SELECT x.i, x.occurrence, x.occurrence + INTERVAL {STAGGER.format(i="x.i")} SECOND AS due,
           {status_sql("x.i", "x.occurrence > CAST(%(anchor)s AS DATETIME(6)) - INTERVAL 8 DAY")}
               AS status,
           {LATE_MS.format(i="x.i")} AS late_ms, {TOOK_MS.format(i="x.i")} AS took_ms
    FROM ({{series}}) AS x
) AS s
JOIN reminders_scheduledtask AS t
  ON t.`key` = IF(s.i %% 5 = 0, CONCAT('once:', s.i), CONCAT('bench:', 1 + s.i %% %(tasks)s))
"""  # noqa: S608

MARIA_WAITING = f"""
INSERT INTO reminders_taskrun {RUN_COLUMNS}
SELECT a.id, o.at, DATE(o.at + INTERVAL 8 HOUR), o.at, 'scheduled',
       CASE a.priority WHEN 'high' THEN 0 WHEN 'normal' THEN 1 ELSE 2 END,
       CONCAT(a.id, ':live:', o.j), 0, 0, o.at, '', '', NULL, NULL, NULL, NULL, '', '', 0, 0,
       '', NULL, '', NULL, NULL, o.at
FROM (SELECT seq AS j, CAST(%(anchor)s AS DATETIME(6)) - INTERVAL seq SECOND AS at
      FROM seq_1_to_{{live}}) AS o
JOIN (SELECT id, priority, ROW_NUMBER() OVER (ORDER BY id) AS n
      FROM reminders_scheduledtask WHERE status = 'active' AND cron <> '') AS a
  ON a.n = 1 + (o.j - 1) * 7 %% (%(tasks)s * 99 DIV 100)
"""  # noqa: S608


# Servers -------------------------------------------------------------------------------------


class MariaDatabases:
    """``Databases`` for MariaDB: creates ``bench_reminders_*`` databases; drops them."""

    def __init__(self, url: str) -> None:
        import MySQLdb

        self._parts = urlsplit(url)
        self.prefix = f"bench_reminders_{os.getpid()}{os.environ.get('BENCH_DB_SUFFIX', '')}"
        self.created: list[str] = []
        self.admin = MySQLdb.connect(
            host=self._parts.hostname or "127.0.0.1",
            port=self._parts.port or 3306,
            user=self._parts.username or "root",
            password=self._parts.password or "",
            autocommit=True,
        )

    def url(self, name: str) -> str:
        return self._parts._replace(path=f"/{name}").geturl()

    def execute(self, sql: str) -> list[tuple[Any, ...]]:
        with self.admin.cursor() as cursor:
            cursor.execute(sql)
            return list(cursor.fetchall())

    def create(self, label: str) -> str:
        name = f"{self.prefix}_{label}"
        self.execute(f"CREATE DATABASE {name} CHARACTER SET utf8mb4")
        self.created.append(name)
        return name

    def server_version(self) -> str:
        return str(self.execute("SELECT VERSION()")[0][0]).split("-")[0]

    def drop_all(self) -> None:
        for name in reversed(self.created):
            try:
                self.execute(f"DROP DATABASE IF EXISTS {name}")
            except Exception as exc:
                log(f"could not drop {name}: {exc}")
        self.created.clear()
        self.admin.close()


@dataclass
class Server:
    """What differs between the two servers: the fill's SQL and how a plan is read."""

    vendor: str

    @property
    def pg(self) -> bool:
        return self.vendor == "postgresql"

    def series(self, large: int, phase: str) -> str:
        return (PG_SERIES if self.pg else MARIA_SERIES).format(large=large, phase=phase)

    def fill_tasks(self, cursor: Any, params: dict[str, Any]) -> None:
        if self.pg:
            cursor.execute(TASKS_SQL, params)
        else:
            cursor.execute(MARIA_TASKS.format(tasks=params["tasks"]), params)

    def fill_history(self, cursor: Any, params: dict[str, Any], phase: str) -> None:
        series = self.series(params["large"], phase.replace("i", "seq" if not self.pg else "i"))
        once, runs = (PG_ONCE_TASKS, PG_RUNS) if self.pg else (MARIA_ONCE_TASKS, MARIA_RUNS)
        cursor.execute(once.format(series=series), params)
        cursor.execute(runs.replace("{series}", series), params)

    def fill_waiting(self, cursor: Any, params: dict[str, Any]) -> None:
        if self.pg:
            cursor.execute(PG_WAITING, params)
        else:
            cursor.execute(MARIA_WAITING.format(live=params["live"]), params)

    def analyze(self, cursor: Any) -> None:
        if self.pg:
            # What autovacuum does to a table that was written: statistics, and the
            # visibility map.
            cursor.execute("VACUUM ANALYZE")
        else:
            for table in ("reminders_taskrun", "reminders_scheduledtask"):
                cursor.execute(f"ANALYZE TABLE {table}")
                cursor.fetchall()

    def explain(self, cursor: Any, sql: str) -> list[str]:
        """The plan of ``sql``, run (its locks taken, then rolled back)."""
        from django.db import transaction

        lines: list[str] = []
        with contextlib.suppress(Rollback), transaction.atomic():
            if self.pg:
                cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql)
                lines = [row[0] for row in cursor.fetchall()]
            else:
                before = handler_reads(cursor)
                cursor.execute("ANALYZE " + sql)
                names = [column[0] for column in cursor.description]
                rows = cursor.fetchall()
                reads = {k: v - before.get(k, 0) for k, v in handler_reads(cursor).items()}
                lines = [" | ".join(names)]
                lines += [" | ".join("" if v is None else str(v) for v in row) for row in rows]
                lines.append(
                    "handler reads: " + ", ".join(f"{k} {v:,}" for k, v in reads.items() if v)
                )
            raise Rollback
        return lines


class Rollback(Exception):
    pass


def handler_reads(cursor: Any) -> dict[str, int]:
    cursor.execute("SHOW SESSION STATUS LIKE 'Handler_read%'")
    return {name: int(value) for name, value in cursor.fetchall()}


# Measuring -------------------------------------------------------------------------------------


@dataclass
class Measured:
    label: str
    runs: int = 0  # finished runs in the table
    tasks: int = 0
    table: str = ""  # size of the runs table, if known
    claim: list[float] = field(default_factory=list)  # ms
    materialize: list[float] = field(default_factory=list)
    claim_cpu: list[float] = field(default_factory=list)  # ms of this process's CPU
    materialize_cpu: list[float] = field(default_factory=list)
    made: set[int] = field(default_factory=set)  # runs one materialize call made
    claim_queries: list[tuple[float, str]] = field(default_factory=list)
    materialize_queries: list[tuple[float, str]] = field(default_factory=list)
    claim_plan: list[str] = field(default_factory=list)
    materialize_plan: list[str] = field(default_factory=list)
    history_plan: list[str] = field(default_factory=list)


def captured(fn: Callable[[], object]) -> list[tuple[float, str]]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as ctx:
        fn()
    return [(float(q["time"]) * 1000, q["sql"]) for q in ctx.captured_queries]


def one_statement(queries: list[tuple[float, str]], *needles: str) -> str:
    for _ms, sql in queries:
        if all(needle in sql for needle in needles):
            return sql
    raise LookupError(f"no query with {needles}")


def timed(fn: Callable[[], object], cpu: list[float]) -> float:
    """Milliseconds ``fn()`` took; the CPU time this process spent on it is appended to
    ``cpu`` (the database server's is not in it)."""
    started, used = time.perf_counter(), time.process_time()
    fn()
    cpu.append((time.process_time() - used) * 1000)
    return (time.perf_counter() - started) * 1000


class Size:
    """One database, its connection, and the calls measured on it with their resets."""

    def __init__(self, server: Server, label: str, name: str, due: int) -> None:
        from django.db import connections

        self.server = server
        self.label = label
        self.due = due
        # A connection of its own, swapped in as ``default`` while this size is measured:
        # the engine's code runs on ``default``, and each size keeps its warm connection.
        wrapper = connections.create_connection("default")
        wrapper.settings_dict = {**wrapper.settings_dict, "NAME": name}
        self.wrapper = wrapper
        self.result = Measured(label)
        self._claimed: list[int] = []

    def use(self) -> None:
        from django.db import connections

        connections["default"] = self.wrapper

    def sql(self, *statements: str) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = []
        with self.wrapper.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)
                rows = list(cursor.fetchall()) if cursor.description else []
        return rows

    def prepare(self) -> None:
        """Count what is there; remember where materialize's runs start and which tasks
        it is given."""
        finished = "('sent', 'failed', 'unknown', 'expired', 'skipped', 'cancelled')"
        self.result.runs = self.sql(
            f"SELECT count(*) FROM reminders_taskrun WHERE status IN {finished}"  # noqa: S608
        )[0][0]
        self.result.tasks = self.sql("SELECT count(*) FROM reminders_scheduledtask")[0][0]
        if self.server.pg:
            size = "SELECT pg_size_pretty(pg_total_relation_size('reminders_taskrun'))"
        else:
            size = (
                "SELECT CONCAT(ROUND((data_length + index_length) / 1048576), ' MB')"
                " FROM information_schema.tables WHERE table_schema = DATABASE()"
                " AND table_name = 'reminders_taskrun'"
            )
        self.result.table = str(self.sql(size)[0][0])
        self.mark = self.sql("SELECT max(id) FROM reminders_taskrun")[0][0]
        ids = self.sql(
            "SELECT id FROM reminders_scheduledtask WHERE status = 'active' AND cron <> ''"  # noqa: S608
            f" ORDER BY id LIMIT {self.due}"
        )
        self.due_ids = ", ".join(str(row[0]) for row in ids)

    def _next_run(self, pg: str, maria: str) -> str:
        return (
            "UPDATE reminders_scheduledtask SET status = 'active', next_run = "  # noqa: S608
            + (pg if self.server.pg else maria)
            + f" WHERE id IN ({self.due_ids})"
        )

    def claim(self) -> None:
        from reminders.engine import dispatch

        got = dispatch.claim(OWNER, CLAIM_LIMIT)
        self._claimed = got.run_ids
        assert len(got.run_ids) == CLAIM_LIMIT, len(got.run_ids)

    def unclaim(self) -> None:
        self.sql(
            "UPDATE reminders_taskrun SET status = 'scheduled', lease_owner = '',"  # noqa: S608
            " lease_token = '', lease_expires_at = NULL WHERE id IN ("
            + ", ".join(map(str, self._claimed))
            + ")",
            "DELETE FROM django_q_ormq",
        )

    def set_due(self) -> None:
        """The materialized tasks due 30 s ago: on time for every kind's missed rule."""
        self.sql(
            self._next_run("now() - interval '30 seconds'", "UTC_TIMESTAMP(6) - INTERVAL 30 SECOND")
        )

    def materialize(self) -> None:
        from reminders.engine import dispatch

        self.result.made.add(dispatch.materialize())

    def unmaterialize(self) -> None:
        self.sql(f"DELETE FROM reminders_taskrun WHERE id > {self.mark}")  # noqa: S608
        self.set_due()

    def not_due(self) -> None:
        """Back to tomorrow, as the other daily tasks."""
        self.sql(self._next_run("now() + interval '1 day'", "UTC_TIMESTAMP(6) + INTERVAL 1 DAY"))

    def round(self) -> None:
        """One timed claim and one timed materialize, each reset after."""
        self.use()
        self.result.claim.append(timed(self.claim, self.result.claim_cpu))
        self.unclaim()
        self.set_due()
        self.result.materialize.append(timed(self.materialize, self.result.materialize_cpu))
        self.unmaterialize()
        self.not_due()

    def explain(self) -> None:
        """The queries of one claim and one materialize, and the plans of their SELECTs."""
        self.use()
        r = self.result
        r.claim_queries = captured(self.claim)
        self.unclaim()
        select = one_statement(r.claim_queries, "SKIP LOCKED", "reminders_taskrun")
        with self.wrapper.cursor() as cursor:
            r.claim_plan = self.server.explain(cursor, select)
        self.set_due()
        r.materialize_queries = captured(self.materialize)
        self.unmaterialize()
        select = one_statement(r.materialize_queries, "SKIP LOCKED", "reminders_scheduledtask")
        # ``lost_occurrences``: what a ``compensate`` kind reads of its task's history.
        lost = one_statement(r.materialize_queries, "is_compensation", "occurrence")
        with self.wrapper.cursor() as cursor:
            r.materialize_plan = self.server.explain(cursor, select)
            r.history_plan = self.server.explain(cursor, lost)
        self.not_due()


def measure(sizes: list[Size], repeat: int) -> None:
    """The queries and plans first, as the fill left the tables (each round's reset leaves
    dead index entries behind, as claims do, until autovacuum comes); then one warm-up
    round and ``repeat`` timed ones, the sizes interleaved (each sees the same weather on
    a shared machine)."""
    for size in sizes:
        size.prepare()
        size.explain()
        size.round()
        for times in (size.result.claim, size.result.materialize, size.result.made):
            times.clear()
        size.result.claim_cpu.clear()
        size.result.materialize_cpu.clear()
    for n in range(repeat):
        for size in sizes:
            size.round()
        if n % 5 == 4:
            log(f"round {n + 1} of {repeat}")
    for size in sizes:
        r = size.result
        log(
            f"{r.label}: claim {statistics.median(r.claim):.1f} ms median,"
            f" materialize {statistics.median(r.materialize):.1f} ms median ({r.made} runs)"
        )


# One server -------------------------------------------------------------------------------------


def run_server(args: argparse.Namespace) -> int:
    vendor = args.backend
    server = Server(vendor)
    url = os.environ.get("DATABASE_URL", DEFAULT_URL)
    dbs: Databases | MariaDatabases = Databases(url) if server.pg else MariaDatabases(url)
    sizes: list[Size] = []
    try:
        env_rows = environment(dbs)  # type: ignore[arg-type]
        if not server.pg:
            env_rows = [
                ("MariaDB", value) if key == "PostgreSQL" else (key, value)
                for key, value in env_rows
                if key != "psycopg"
            ]
            env_rows.insert(-2, ("mysqlclient", version("mysqlclient")))
        names = [dbs.create("history_small"), dbs.create("history_large")]
        os.environ["DATABASE_URL"] = dbs.url(names[0])
        os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
        import django

        django.setup()
        import logging

        from django.core.management import call_command

        logging.getLogger("django-q").setLevel(logging.WARNING)  # one line per enqueue
        anchor = datetime.now(UTC)
        if not server.pg:
            anchor = anchor.replace(tzinfo=None)  # MariaDB: UTC, naive, as Django stores it
        step = args.large // args.small
        params = {"tasks": args.tasks, "large": args.large, "live": args.live, "anchor": anchor}
        fills: list[float] = []
        phases = [[f"i %% {step} = 0"], [f"i %% {step} = 0", f"i %% {step} <> 0"]]
        for name, label, phase in zip(
            names, (f"{args.small:,}", f"{args.large:,}"), phases, strict=True
        ):
            size = Size(server, label, name, args.due)
            sizes.append(size)
            size.use()
            log(f"migrating {name}")
            call_command("migrate", verbosity=0)
            log(f"filling {name} with {label} finished runs")
            started = time.perf_counter()
            with size.wrapper.cursor() as cursor:
                server.fill_tasks(cursor, params)
                for part in phase:
                    server.fill_history(cursor, params, part)
                server.fill_waiting(cursor, params)
                server.analyze(cursor)
            fills.append(time.perf_counter() - started)
            log(f"filled in {fills[-1]:.0f} s")
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        log(f"measuring, {args.repeat} rounds (load average {load})")
        measure(sizes, args.repeat)
        results = [size.result for size in sizes]
        small, large = sizes
        for spec in args.index:
            target, _, create = spec.partition(":")
            if target != vendor:
                continue
            large.use()
            with large.wrapper.cursor() as cursor:
                cursor.execute(create)
                server.analyze(cursor)
            log(f"with {create}")
            small.result = Measured(small.label)
            large.result = Measured(f"{large.label} + `{create}`")
            measure(sizes, args.repeat)
            results += [small.result, large.result]
            words = create.split()
            if words[1].upper() == "INDEX":
                drop = f"DROP INDEX {words[2]}" + ("" if server.pg else " ON reminders_taskrun")
                large.sql(drop)
        load_end = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        print(report(vendor, results, env_rows, fills, args, load, load_end))
        return 0
    except KeyboardInterrupt:
        log("interrupted; dropping the databases")
        return 130
    finally:
        for size in sizes:
            with contextlib.suppress(Exception):
                size.wrapper.close()
        with contextlib.suppress(Exception):
            from django.db import connections

            connections.close_all()
        dbs.drop_all()


# Report ----------------------------------------------------------------------------------------


def report(
    vendor: str,
    results: list[Measured],
    env_rows: list[tuple[str, str]],
    fills: list[float],
    args: argparse.Namespace,
    load: str,
    load_end: str,
) -> str:
    name = "PostgreSQL" if vendor == "postgresql" else "MariaDB"
    lines = [
        f"### History on {name}: claim and materialize, {results[0].runs:,} and "
        f"{results[1].runs:,} finished runs",
        "",
        f"Median and worst of {args.repeat} calls after a warm-up, in ms, the two sizes "
        "measured in turn; *its CPU here*: the median CPU time of this process in the call "
        "(the database server's not counted); the ratio is the median's to the smaller "
        "history's of the same "
        f"rounds. Filled by SQL in {' and '.join(f'{s:.0f}' for s in fills)} s. Load average "
        f"(1/5/15 min) {load} at the start of the rounds, {load_end} at the end.",
        "",
        "| finished runs | tasks | runs table | `claim(owner, 500)` median / worst "
        "| ratio | its CPU here | `materialize()` median / worst | ratio | its CPU here "
        "| runs made per call |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, r in enumerate(results):
        base = results[n - n % 2]
        claim, mat = statistics.median(r.claim), statistics.median(r.materialize)
        lines.append(
            f"| {r.label} | {r.tasks:,} | {r.table} "
            f"| {claim:.1f} / {max(r.claim):.1f} "
            f"| {claim / statistics.median(base.claim):.2f} "
            f"| {statistics.median(r.claim_cpu):.0f} "
            f"| {mat:.1f} / {max(r.materialize):.1f} "
            f"| {mat / statistics.median(base.materialize):.2f} "
            f"| {statistics.median(r.materialize_cpu):.0f} "
            f"| {', '.join(map(str, sorted(r.made)))} |"
        )
    for r in results:
        lines += ["", f"Queries of one claim, {r.label} (grouped):", ""]
        lines += grouped(r.claim_queries)
        lines += ["", f"Queries of one materialize, {r.label} (grouped):", ""]
        lines += grouped(r.materialize_queries)
    for r in results:
        lines += ["", f"The claim's SELECT, {r.label}:", "", "```"]
        lines += r.claim_plan
        lines += ["```", "", f"Materialize's due tasks, {r.label}:", "", "```"]
        lines += r.materialize_plan
        lines += ["```", "", f"One task's history (`lost_occurrences`), {r.label}:", "", "```"]
        lines += r.history_plan
        lines += ["```"]
    select = one_statement(results[0].claim_queries, "SKIP LOCKED", "reminders_taskrun")
    lines += ["", "The claim's SELECT:", "", "```", " ".join(select.split()), "```"]
    lines += ["", "| environment | |", "|---|---|"]
    lines += [f"| {key} | {value} |" for key, value in env_rows]
    return "\n".join(lines)


def grouped(queries: list[tuple[float, str]]) -> list[str]:
    """Queries by their first 90 characters: how many, and their total time."""
    groups: dict[str, list[float]] = {}
    for ms, sql in queries:
        groups.setdefault(" ".join(sql.split())[:90], []).append(ms)
    return [f"    {len(t):4d} x {sum(t):8.2f} ms  {shape}" for shape, t in groups.items()]


# Main -------------------------------------------------------------------------------------------


def reachable(url: str) -> bool:
    out = subprocess.run(
        [PYTHON, "bin/db-reachable", url], cwd=ROOT, capture_output=True, check=False
    )
    return out.returncode == 0


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=["both", "postgresql", "mariadb"], default="both")
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--large", type=int, default=1_000_000)
    parser.add_argument("--tasks", type=int, default=2000, help="daily tasks")
    parser.add_argument("--live", type=int, default=1000, help="waiting runs due")
    parser.add_argument("--due", type=int, default=1000, help="daily tasks due")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument(
        "--index",
        action="append",
        default=[],
        help="'postgresql:CREATE INDEX name ...' or 'mariadb:...': measured at the large "
        "size, then dropped",
    )
    args = parser.parse_args(argv)
    if args.large % args.small:
        parser.error("--large must be a multiple of --small")
    return args


def interrupted(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str]) -> int:
    args = parse(argv)
    signal.signal(signal.SIGTERM, interrupted)
    if args.backend != "both":
        return run_server(args)
    pg_url = os.environ.get("DATABASE_URL", DEFAULT_URL)
    maria_url = os.environ.get("MARIADB_URL", DEFAULT_MARIADB_URL)
    command = " ".join(
        [
            f"DATABASE_URL={shlex.quote(pg_url)}",
            f"MARIADB_URL={shlex.quote(maria_url)}",
            ".venv/bin/python",
            "benchmarks/history.py",
        ]
        + [shlex.quote(a) for a in argv]
    )
    status = 0
    outputs = []
    for vendor, url in (("postgresql", pg_url), ("mariadb", maria_url)):
        if vendor == "mariadb" and not reachable(url):
            log(f"MariaDB at {url} is unreachable: its part did NOT run")
            continue
        child = subprocess.Popen(
            [PYTHON, __file__, "--backend", vendor, *argv],
            cwd=ROOT,
            env={**os.environ, "DATABASE_URL": url},
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            stdout, _ = child.communicate()
        except KeyboardInterrupt:
            log("interrupted; stopping the server's part (it drops its databases)")
            child.send_signal(signal.SIGTERM)
            child.wait(60)
            return 130
        status = status or child.returncode
        outputs.append(stdout)
    print("\n\n".join(outputs))
    print(f"\n```sh\n{command}\n```\nCode {code_version()}.")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
