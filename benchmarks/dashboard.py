"""What the ops dashboard costs on a million runs: the page, its JSON, ``reminders_stats``.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/reminders \\
        .venv/bin/python benchmarks/dashboard.py [--runs 1000000] [--days 90] [--repeat 7]

Only the server, user and password of ``DATABASE_URL`` are used: a fresh database
``bench_reminders_<pid>_dashboard`` is created, migrated, filled by SQL (``INSERT ...
SELECT generate_series``: 2,000 tasks of five kinds on three channels, ``--runs`` runs
due evenly over the last ``--days`` days and the next hour; past runs 93% sent, 2%
failed, 1% unknown, 1% expired, 2% skipped, 1% cancelled, lateness and duration drawn at
random, ten error codes; one past run in 3,000 still waiting: the backlog; the next hour
waiting), vacuumed and analysed (as autovacuum would), then measured three times: with the engine's
indexes only, with an index on ``reminders_taskrun (due_at)`` added by raw SQL, and with
``(due_at) INCLUDE (status, task_id)`` instead. Each time: the page rendered through
the test client (a signed-in superuser: session and user lookups included), the JSON
view, ``ops.stats.compute`` alone, the same with percentiles computed in Python (the
SQLite/MariaDB path), and ``reminders_stats`` and ``reminders_stats --json`` in this
process, and ``manage.py reminders_stats`` as a process of its own (start-up included);
the median and worst of ``--repeat`` (the process: half as many, at least 3) after one
warm-up, and the queries of one
page with their times. The database is dropped at the end, also on failure.
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.throughput import DEFAULT_URL, ROOT, Databases, code_version, log

# The indexes measured, each alone: none beyond the engine's, then the ones the dashboard
# would want in reminders (``Index(fields=["due_at"])``, and the same with
# ``include=["status", "task"]`` for index-only counts on PostgreSQL).
INDEXES = [
    ("engine's indexes only", None),
    ("+ `(due_at)`", "CREATE INDEX bench_due ON reminders_taskrun (due_at)"),
    (
        "+ `(due_at) INCLUDE (status, task_id)`",
        "CREATE INDEX bench_due ON reminders_taskrun (due_at) INCLUDE (status, task_id)",
    ),
]

TASKS_SQL = """
INSERT INTO reminders_scheduledtask
    (kind, recipient, channel, cron, run_at, timezone, payload, priority, status, next_run,
     last_run_at, retry_count, calendar, error_code, error_message, error_at, key,
     created_at, updated_at)
SELECT (ARRAY['daily_report','weekly_report','follow_up','birthday','inquiry_timeout'])[1 + i %% 5],
       'user' || lpad(i::text, 5, '0'),
       (ARRAY['wecom','wecom','wecom_robot','console'])[1 + i %% 4],
       '0 9 * * *', NULL, 'Asia/Shanghai', '{}'::jsonb,
       (ARRAY['high','normal','low'])[1 + i %% 3],
       CASE WHEN i %% 100 = 0 THEN 'paused' ELSE 'active' END,
       now() + interval '1 day', NULL, 0, NULL, '', '', NULL, 'bench:' || i, now(), now()
FROM generate_series(1, %(tasks)s) AS i
"""

# Runs due evenly from ``days`` ago to an hour ahead; the status is drawn per run.
RUNS_SQL = """
INSERT INTO reminders_taskrun
    (task_id, occurrence, run_date, due_at, status, priority, ledger_key, attempts, crashes,
     next_attempt_at, lease_owner, lease_token, lease_expires_at, started_at, finished_at,
     duration, error_code, error_message, is_compensation, deadline, stuck_reported_at,
     created_at, job_failures, is_manual, requested_by, handled_by, day_source, day_note)
SELECT t.id, r.occurrence, (r.occurrence AT TIME ZONE 'Asia/Shanghai')::date, r.due,
       r.status, (t.id %% 3)::smallint, t.id || ':' || r.i, 1, 0,
       CASE WHEN r.status IN ('scheduled', 'retrying') THEN r.due END,
       CASE WHEN r.status IN ('queued', 'running') THEN 'bench' ELSE '' END,
       CASE WHEN r.status IN ('queued', 'running') THEN 'token' ELSE '' END,
       CASE WHEN r.status IN ('queued', 'running') THEN now() + interval '5 minutes' END,
       CASE WHEN r.status IN ('sent', 'failed', 'unknown', 'running')
            THEN r.due + r.late - r.took END,
       CASE WHEN r.status IN ('sent', 'failed', 'unknown', 'expired', 'skipped', 'cancelled')
            THEN r.due + r.late END,
       CASE WHEN r.status IN ('sent', 'failed', 'unknown') THEN r.took END,
       CASE r.status WHEN 'failed' THEN 'code' || (r.i %% 10)
                     WHEN 'unknown' THEN 'in_doubt' WHEN 'expired' THEN 'deadline'
                     WHEN 'skipped' THEN 'holiday' ELSE '' END,
       CASE WHEN r.status IN ('failed', 'unknown', 'expired', 'skipped')
            THEN 'error ' || (r.i %% 10) || ': what the provider said about run ' || r.i
            ELSE '' END,
       false, r.due + interval '2 hours', NULL, r.occurrence - interval '1 hour',
       0, false, '', '', '', ''
FROM (
    SELECT s.i, s.occurrence, s.occurrence + s.stagger AS due,
           CASE WHEN s.occurrence + s.stagger > now() - interval '2 minutes' THEN
                    CASE WHEN s.occurrence + s.stagger > now() THEN 'scheduled'
                         WHEN s.draw < 0.8 THEN 'sent' WHEN s.draw < 0.9 THEN 'queued'
                         ELSE 'running' END
                WHEN s.i %% 3000 = 0 THEN 'scheduled'  -- the backlog: due and waiting
                WHEN s.draw < 0.93 THEN 'sent' WHEN s.draw < 0.95 THEN 'failed'
                WHEN s.draw < 0.96 THEN 'unknown' WHEN s.draw < 0.97 THEN 'expired'
                WHEN s.draw < 0.99 THEN 'skipped' ELSE 'cancelled' END AS status,
           make_interval(secs => -ln(1 - random()) * 8) AS late,
           make_interval(secs => 0.05 + random() * 0.6) AS took
    FROM (
        SELECT i,
               now() - make_interval(days => %(days)s)
                   + (make_interval(days => %(days)s) + interval '1 hour') * i / %(runs)s
                   AS occurrence,
               make_interval(secs => floor(random() * 300)) AS stagger,
               random() AS draw
        FROM generate_series(1, %(runs)s) AS i
    ) AS s
) AS r
JOIN reminders_scheduledtask AS t ON t.id = 1 + r.i %% %(tasks)s
"""


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Median and worst milliseconds of ``repeat`` calls, after one warm-up."""
    fn()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), max(times)


class Queries:
    """Every query the default connection runs inside ``with``, with its time: an
    ``execute_wrapper``, which (unlike ``connection.queries``) no request start resets."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, str]] = []

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.seen.append(((time.perf_counter() - started) * 1000, sql))

    def during(self, fn: Callable[[], object]) -> list[tuple[float, str]]:
        from django.db import connection

        self.seen = []
        with connection.execute_wrapper(self):
            fn()
        return self.seen


def measure(
    repeat: int,
) -> tuple[list[tuple[str, float, float, int | None]], list[tuple[float, str]]]:
    """Rows (what, median ms, worst ms, queries) and the queries of one page."""
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.test import Client

    from ops import stats

    client = Client(HTTP_HOST="localhost")
    client.force_login(User.objects.get(username="bench"))

    def page() -> None:
        response = client.get("/admin/ops/dashboard/")
        assert response.status_code == 200, response.status_code

    def data() -> None:
        response = client.get("/admin/ops/dashboard/data.json")
        assert response.status_code == 200, response.status_code

    def command(*args: str) -> Callable[[], None]:
        return lambda: call_command("reminders_stats", *args, stdout=io.StringIO())

    cases: list[tuple[str, Callable[[], object]]] = [
        ("page `admin/ops/dashboard/` (test client)", page),
        ("JSON `admin/ops/dashboard/data.json`", data),
        ("`ops.stats.compute()` alone", stats.compute),
        (
            "`ops.stats.compute()`, percentiles in Python (other databases' path)",
            lambda: stats.compute(sql_percentiles=False),
        ),
        ("`reminders_stats` (tables)", command()),
        ("`reminders_stats --json`", command("--json")),
    ]

    def process() -> None:
        subprocess.run(
            [sys.executable, "manage.py", "reminders_stats"],
            cwd=ROOT,
            env=os.environ,
            check=True,
            capture_output=True,
        )

    queries = Queries()
    rows = []
    for label, fn in cases:
        median, worst = timed(fn, repeat)
        count = len(queries.during(fn))
        rows.append((label, median, worst, count))
        log(f"{label}: {median:.0f} ms median, {worst:.0f} ms worst, {count} queries")
    median, worst = timed(process, max(3, repeat // 2))
    # Its queries are the command's above; a process's own are not counted here.
    rows.append(
        (
            "`manage.py reminders_stats` as a process (Python and Django start-up included)",
            median,
            worst,
            None,
        )
    )
    return rows, queries.during(page)


def environment(dbs: Databases) -> list[tuple[str, str]]:
    import psutil

    return [
        ("CPU", f"{platform.processor() or platform.machine()}, {os.cpu_count()} logical cores"),
        ("Memory", f"{psutil.virtual_memory().total / 2**30:.1f} GiB"),
        ("OS", f"{platform.system()} {platform.release()}"),
        ("Python", platform.python_version()),
        ("Django", version("django")),
        ("psycopg", version("psycopg")),
        ("PostgreSQL", dbs.server_version()),
        ("Code", code_version()),
        ("Load average at start (1/5/15 min)", ", ".join(f"{x:.2f}" for x in os.getloadavg())),
    ]


def counts() -> dict[str, int]:
    from reminders.models import TaskRun

    return {
        "runs": TaskRun.objects.count(),
        "today": _scalar(
            "SELECT count(*) FROM reminders_taskrun WHERE due_at >= %s AND due_at < %s"
        ),
        "14 days": _scalar(
            "SELECT count(*) FROM reminders_taskrun WHERE due_at >= %s AND due_at < %s", days=14
        ),
    }


def _scalar(sql: str, days: int = 1) -> int:
    from datetime import timedelta

    from django.db import connection

    from ops import stats

    start, end = stats.day_bounds(stats.today())
    with connection.cursor() as cursor:
        cursor.execute(sql, [start - timedelta(days=days - 1), end])
        return int(cursor.fetchone()[0])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--days", type=int, default=90)
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument(
        "--keep", action="store_true", help="Keep the database (to explain queries); say its name."
    )
    args = parser.parse_args(argv)
    url = os.environ.get("DATABASE_URL", DEFAULT_URL)
    command = " ".join(
        [f"DATABASE_URL={shlex.quote(url)}", ".venv/bin/python", "benchmarks/dashboard.py"]
        + [shlex.quote(a) for a in argv]
    )
    dbs = Databases(url)
    try:
        env_rows = environment(dbs)
        name = dbs.create("dashboard")
        os.environ["DATABASE_URL"] = dbs.url(name)
        os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
        import django

        django.setup()
        from django.contrib.auth.models import User
        from django.core.management import call_command
        from django.db import connection

        log(f"migrating {name}")
        call_command("migrate", verbosity=0)
        User.objects.create_superuser("bench", "bench@example.com", "bench")
        log(f"filling {args.runs:,} runs over {args.days} days")
        started = time.perf_counter()
        params = {"tasks": args.tasks, "runs": args.runs, "days": args.days}
        with connection.cursor() as cursor:
            cursor.execute("SELECT setseed(0.42)")
            cursor.execute(TASKS_SQL, params)
            cursor.execute(RUNS_SQL, params)
            # What autovacuum does to a table that was written: statistics, and the
            # visibility map that lets a scan read an index alone.
            cursor.execute("VACUUM ANALYZE")
        filled = time.perf_counter() - started
        sizes = counts()
        log(f"filled in {filled:.0f} s: {sizes}")
        results = {}
        for label, create in INDEXES:
            with connection.cursor() as cursor:
                cursor.execute("DROP INDEX IF EXISTS bench_due")
                if create:
                    cursor.execute(create)
                    cursor.execute("SELECT pg_size_pretty(pg_relation_size('bench_due'))")
                    label += f", {cursor.fetchone()[0]}"
            log(f"measuring with the {label}")
            results[label] = measure(args.repeat)
        connection.close()
        print(report(results, env_rows, command, args, sizes, filled))
        return 0
    except KeyboardInterrupt:
        log("interrupted; dropping the database")
        return 130
    finally:
        try:
            from django.db import connections

            connections.close_all()
        except Exception as exc:  # django not set up yet
            log(f"no connections to close: {exc}")
        if args.keep and dbs.created:
            log(f"kept {dbs.created[-1]}: DROP DATABASE {dbs.created[-1]} WITH (FORCE) when done")
            dbs.created.clear()
        dbs.drop_all()


def report(
    results: dict[str, tuple[list[tuple[str, float, float, int | None]], list[tuple[float, str]]]],
    env_rows: list[tuple[str, str]],
    command: str,
    args: argparse.Namespace,
    sizes: dict[str, int],
    filled: float,
) -> str:
    lines = [
        f"### Dashboard on {sizes['runs']:,} runs over {args.days} days",
        "",
        f"Runs due today: {sizes['today']:,}; in the 14 days the charts cover: "
        f"{sizes['14 days']:,}. Filled by SQL in {filled:.0f} s. Median and worst of "
        f"{args.repeat} after a warm-up.",
        "",
        "| indexes | what | median ms | worst ms | queries |",
        "|---|---|---:|---:|---:|",
    ]
    for label, (rows, _queries) in results.items():
        for what, median, worst, queries in rows:
            count = "–" if queries is None else queries  # noqa: RUF001 - an en dash
            lines.append(f"| {label} | {what} | {median:.0f} | {worst:.0f} | {count} |")
    for label, (_rows, queries) in results.items():
        lines += ["", f"Queries of one page, {label}:", ""]
        for ms, sql in queries:
            lines.append(f"    {ms:8.1f} ms  {' '.join(sql.split())[:120]}")
    lines += ["", "| environment | |", "|---|---|"]
    lines += [f"| {key} | {value} |" for key, value in env_rows]
    lines += ["", "```sh", command, "```"]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
