"""Database cost per sent message, phase by phase, counted deterministically.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/reminders \\
        .venv/bin/python benchmarks/statements.py [--runs 200] [--runs-per-job 20]

In one process, on a fresh database (``bench_reminders_<pid>_statements``, dropped at
the end), ``--runs`` one-shot tasks go through what the processes of ``run_reminders``
do, one step at a time and nothing else in between: the scheduler materializes and
claims them (the claim enqueues django-q2 jobs in its transaction), then a django-q2
worker's steps: the pusher's fetch (``dequeue``), the job (``deliver``), the monitor's
result and acknowledgement. The channel is the benchmark's instant sender, once as a
channel without provider de-duplication (one message per batch) and once as one with
it (a claim's messages in batches).

Counted per phase, divided by the messages sent:

* *statements*: every statement Django sends (``execute_wrapper``), savepoints and
  ``SET`` included; ``BEGIN``/``COMMIT`` are not statements Django sends and are not
  counted here, they are the transactions;
* *transactions*: PostgreSQL's own ``xact_commit + xact_rollback`` of the database
  (``pg_stat_database``), read from a connection to another database, each phase's
  statistics flushed at its end (``pg_stat_force_next_flush``; that call is the one
  transaction taken off); Django's own count of them is shown beside as a check;
* *rows written*: ``tup_inserted + tup_updated + tup_deleted`` of the database;
* *CPU*: this process's CPU time (the Python side; the server's is not in it).

Then each phase's statements by shape, with how many times each ran. Polling an empty
queue, ticks with nothing to do and heartbeats are not per message and not counted.
``pg_stat_statements`` is used for nothing: it needs ``shared_preload_libraries`` and a
server restart, which a benchmark should not ask for; the statements are counted where
they are sent instead, which is exact.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.throughput import DEFAULT_URL, Databases, log  # noqa: E402

MODES = {
    "bench": "no provider de-duplication: one message per batch",
    "bench_dedup": "provider de-duplication: a claim's messages in batches",
}
# What db-scheduler (Java) publishes for its lock-and-fetch polling on PostgreSQL: about
# one transaction per execution (its README, "Polling strategy").
DB_SCHEDULER_XACTS = 1.0
# Sent by the driver, not through Django's cursor: Django's ``CONN_HEALTH_CHECKS`` on the
# first use of a connection after ``close_old_connections`` (which django-q2 calls
# around every broker call and before every job).
HEALTH_CHECK = "SELECT 1 (CONN_HEALTH_CHECKS, sent by the driver)"


# Counting --------------------------------------------------------------------------------


@dataclass
class Phase:
    name: str
    statements: Counter[str] = field(default_factory=Counter)
    xacts: int = 0  # PostgreSQL's count
    django_xacts: int = 0  # as Django saw them: autocommit statements + outer atomic blocks
    rows: int = 0
    cpu: float = 0.0
    server_cpu: float = 0.0  # the PostgreSQL backend's, from /proc (a local server)

    @property
    def total(self) -> int:
        return sum(self.statements.values())


def shape(sql: str) -> str:
    """A statement with its parameters and repeated value lists folded."""
    text = re.sub(r"\s+", " ", sql.replace('"', "")).strip()
    text = re.sub(r"\((?:%s, )+%s\)", "(…)", text)
    text = re.sub(r"(?:\(…\), )+\(…\)", "(…), …", text)
    text = re.sub(r"'[^']*'", "'…'", text)
    text = re.sub(r"\b\d+\b", "N", text)
    return re.sub(r"\b(SAVEPOINT) s\w+", r"\1 …", text)


class Meter:
    """Counts what the default connection does inside ``phase`` blocks."""

    def __init__(self, observer: psycopg.Connection, database: str) -> None:
        from django.db import connection

        self.connection = connection
        self.observer = observer
        self.database = database
        self.phases: dict[str, Phase] = {}
        self.current: Phase | None = None

    def counters(self) -> tuple[int, int]:
        # A health check owed by the connection is left for the phase that follows.
        owed = self.connection.health_check_done
        self.connection.health_check_done = True
        with self.connection.cursor() as cursor:
            # Flush this backend's statistics when this statement's transaction ends
            # (before its reply): the phase's transactions are all in the view next.
            # A transaction that read no table leaves nothing PostgreSQL counts as
            # pending, and its count waits for the next flush: this one reads one.
            cursor.execute("SELECT pg_stat_force_next_flush() FROM pg_namespace LIMIT 1")
        self.connection.health_check_done = owed
        self.observer.execute("SELECT pg_stat_clear_snapshot()")
        row = self.observer.execute(
            "SELECT xact_commit + xact_rollback, tup_inserted + tup_updated + tup_deleted"
            " FROM pg_stat_database WHERE datname = %s",
            (self.database,),
        ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])

    def _wrapper(
        self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        phase = self.current
        if phase is not None:
            phase.statements[sql] += 1  # shaped when reported: not on the clock
            blocks = self.connection.atomic_blocks
            if not self.connection.in_atomic_block:
                phase.django_xacts += 1
            elif not getattr(blocks[0], "_metered", False):
                blocks[0]._metered = True
                phase.django_xacts += 1
        return execute(sql, params, many, context)

    def _is_usable(self) -> bool:
        if self.current is not None:
            self.current.statements[HEALTH_CHECK] += 1
            self.current.django_xacts += 1
        return bool(self._usable())

    def server_cpu(self) -> float:
        """CPU seconds the connection's PostgreSQL backend has used (``/proc``, in clock
        ticks: summed over a phase's many blocks, the rounding evens out)."""
        self.connection.ensure_connection()
        pid = self.connection.connection.info.backend_pid
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        phase = self.phases.setdefault(name, Phase(name))
        xacts, rows = self.counters()
        server = self.server_cpu()
        cpu = time.process_time()
        self.current = phase
        self._usable = self.connection.is_usable
        self.connection.is_usable = self._is_usable  # type: ignore[method-assign]
        try:
            with self.connection.execute_wrapper(self._wrapper):
                yield
        finally:
            del self.connection.is_usable
            self.current = None
            phase.cpu += time.process_time() - cpu
            phase.server_cpu += self.server_cpu() - server
            after_xacts, after_rows = self.counters()
            phase.xacts += after_xacts - xacts - 1  # the flush's own transaction
            phase.rows += after_rows - rows


# The steps -------------------------------------------------------------------------------


def run_mode(meter: Meter, channel: str, n: int) -> int:
    """Plan, claim and deliver ``n`` runs on ``channel`` as the processes do; returns
    how many were sent."""
    from django.utils import timezone
    from django.utils.module_loading import import_string
    from django_q.monitor import save_task
    from django_q.signing import SignedPackage
    from django_q.utils import close_old_django_connections

    from benchmarks.fixtures import make_tasks
    from reminders.engine import cluster, dispatch
    from reminders.models import TaskRun

    make_tasks(n, channel)
    now = timezone.now()
    planned = 0
    while planned < n:
        with meter.phase("scheduler: materialize"):
            made = dispatch.materialize(now)
        if not made:
            break
        planned += made
    claimed = 0
    while claimed < planned:
        with meter.phase("scheduler: claim + enqueue"):
            got = len(dispatch.claim("bench", n, now).run_ids)
        if not got:
            break
        claimed += got
    broker = cluster.broker(cluster.bulk_queue())
    sent = 0
    while broker.queue_size():
        with meter.phase("django-q2: fetch"):
            fetched = broker.dequeue() or []
        for ack_id, payload in fetched:
            task = SignedPackage.loads(payload)
            with meter.phase("engine: deliver"):
                close_old_django_connections()  # as django-q2's worker does before a job
                sent += import_string(task["func"])(*task["args"], **task["kwargs"])
            task.update(success=True, result=None, stopped=timezone.now())
            with meter.phase("django-q2: result + ack"):
                save_task(task, broker)
                broker.acknowledge(ack_id)
    unsent = TaskRun.objects.filter(task__channel=channel).exclude(status="sent").count()
    if sent != n or unsent:
        raise SystemExit(f"{channel}: {sent} sent of {n}, {unsent} runs not sent")
    return sent


# Report ----------------------------------------------------------------------------------


def report(results: dict[str, tuple[int, dict[str, Phase]]], runs_per_job: int) -> str:
    lines = [
        f"### Database cost per sent message ({runs_per_job} runs per django-q2 job)",
        "",
        "| channel | phase | statements / msg | transactions / msg (Django's count) "
        "| rows written / msg | CPU ms / msg (Python) | PostgreSQL CPU ms / msg |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for channel, (n, phases) in results.items():
        for phase in phases.values():
            lines.append(
                f"| {channel} | {phase.name} | {phase.total / n:.2f} "
                f"| {phase.xacts / n:.2f} ({phase.django_xacts / n:.2f}) "
                f"| {phase.rows / n:.2f} | {phase.cpu / n * 1000:.2f} "
                f"| {phase.server_cpu / n * 1000:.2f} |"
            )
        total = list(phases.values())
        lines.append(
            f"| {channel} | **all** | **{sum(p.total for p in total) / n:.2f}** "
            f"| **{sum(p.xacts for p in total) / n:.2f}** "
            f"({sum(p.django_xacts for p in total) / n:.2f}) "
            f"| **{sum(p.rows for p in total) / n:.2f}** "
            f"| **{sum(p.cpu for p in total) / n * 1000:.2f}** "
            f"| **{sum(p.server_cpu for p in total) / n * 1000:.2f}** |"
        )
    lines += [
        f"| db-scheduler, lock-and-fetch (published) | per execution | - "
        f"| ~{DB_SCHEDULER_XACTS:.0f} | - | - | - |",
        "",
        "Statements by shape (count for all messages of the mode):",
        "",
    ]
    for channel, (n, phases) in results.items():
        lines.append(f"{channel} ({MODES[channel]}), {n} messages:")
        lines.append("```")
        for phase in phases.values():
            lines.append(f"{phase.name}:")
            shapes: Counter[str] = Counter()
            for sql, count in phase.statements.items():
                shapes[sql if sql == HEALTH_CHECK else shape(sql)] += count
            for sql, count in shapes.most_common():
                lines.append(f"  {count:6d}  {sql[:150]}")
        lines.append("```")
    return "\n".join(lines)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=200, help="messages per channel mode")
    parser.add_argument(
        "--runs-per-job", type=int, default=20, help="REMINDERS_RUNS_PER_JOB of the claims"
    )
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    url = os.environ.get("DATABASE_URL", DEFAULT_URL)
    dbs = Databases(url)
    work = Path(tempfile.mkdtemp(prefix="bench-statements-"))
    try:
        name = dbs.create("statements")
        os.environ.update(
            DJANGO_SETTINGS_MODULE="benchmarks.settings",
            DATABASE_URL=dbs.url(name),
            BENCH_COUNT_FILE=str(work / "sends.txt"),
            REMINDERS_RUNS_PER_JOB=str(args.runs_per_job),
            REMINDERS_CLAIM_BATCH=str(max(args.runs, 500)),
        )
        import django
        from django.core.management import call_command
        from django.db import connection

        django.setup()
        log(f"migrating {name}")
        call_command("migrate", verbosity=0)
        from reminders.conf import settings as conf
        from reminders.engine import cluster

        # This process now runs our cluster's steps, as a host with the default workers
        # would: a fetch takes at most one job per worker.
        cluster.run_as(cluster.bulk_queue(), conf.CLUSTER["workers"])
        results: dict[str, tuple[int, dict[str, Phase]]] = {}
        with dbs.connect("postgres") as observer:
            for channel, what in MODES.items():
                log(f"{channel}: {what}")
                meter = Meter(observer, name)
                sent = run_mode(meter, channel, args.runs)
                results[channel] = (sent, meter.phases)
        connection.close()
        print(report(results, args.runs_per_job))
        return 0
    finally:
        with contextlib.suppress(Exception):
            from django.db import connections

            connections.close_all()
        dbs.drop_all()
        for path in work.glob("*"):
            path.unlink()
        work.rmdir()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
