"""What one ``/metrics`` scrape costs: queries and time, on a database of N runs.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/reminders \\
        .venv/bin/python benchmarks/metrics_scrape.py --runs 100000 --days 1

Creates a throw-away database (the test database's name with ``_metricsbench``), fills
it with ``--runs`` runs of 1,000 tasks finished over the last ``--days`` days (9 in 10
sent, the rest failed, expired or unknown), 2% of them waiting and due, one ledger row
per run, then scrapes ``--scrapes`` times and prints the query count and the median
and worst time, with each query's share of the median scrape. It drops the database
when it is done.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

import django

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
os.environ["TEST_DB_SUFFIX"] = "_metricsbench"


def fill(runs: int, days: float) -> None:
    from django.utils import timezone

    from reminders.models import ScheduledTask, SendLog, TaskRun

    rng = random.Random(7)
    now = timezone.now()
    tasks = []
    for i in range(1000):
        task = ScheduledTask(
            kind=("follow_up", "daily_report", "birthday")[i % 3],
            recipient=f"user{i:05d}",
            channel=("memory", "memory_dedup")[i % 2],
            run_at=now,
            timezone="Asia/Shanghai",
            priority="normal",
        )
        tasks.append(task)
    ScheduledTask.objects.bulk_create(tasks)
    tasks = list(ScheduledTask.objects.all())
    batch: list[TaskRun] = []
    logs: list[SendLog] = []
    for n in range(runs):
        task = tasks[n % len(tasks)]
        due = now - timedelta(seconds=rng.uniform(0, days * 86400))
        run = TaskRun(
            task=task,
            occurrence=due - timedelta(microseconds=n),
            run_date=due.date(),
            due_at=due,
            priority=1,
            ledger_key=f"{task.pk}:{n}",
        )
        draw = rng.random()
        if draw < 0.02:
            run.status, run.next_attempt_at = "scheduled", min(due, now)
        else:
            run.status = "sent" if draw < 0.9 else rng.choice(["failed", "expired", "unknown"])
            run.finished_at = due + timedelta(seconds=rng.expovariate(1 / 5))
            run.duration = timedelta(seconds=rng.expovariate(1 / 0.3))
            logs.append(
                SendLog(key=run.ledger_key, status="sent", channel=task.channel, recipient="u")
            )
        batch.append(run)
        if len(batch) == 5000:
            TaskRun.objects.bulk_create(batch)
            SendLog.objects.bulk_create(logs)
            batch, logs = [], []
    TaskRun.objects.bulk_create(batch)
    SendLog.objects.bulk_create(logs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--days", type=float, default=1.0)
    parser.add_argument("--scrapes", type=int, default=7)
    args = parser.parse_args()
    django.setup()
    from django.conf import settings
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from ops import metrics

    settings.DATABASES["default"]["TEST"]["MIGRATE"] = False
    original = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    try:
        started = time.perf_counter()
        fill(args.runs, args.days)
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE")
        took = time.perf_counter() - started
        print(f"filled {args.runs} runs over {args.days:g} days in {took:.1f} s")
        metrics.render()  # warm
        times = []
        captured = CaptureQueriesContext(connection)
        for _ in range(args.scrapes):
            with captured:
                began = time.perf_counter()
                metrics.render()
                times.append(time.perf_counter() - began)
        print(
            f"{connection.vendor}: {len(captured)} queries per scrape, "
            f"median {statistics.median(times) * 1000:.1f} ms, worst {max(times) * 1000:.1f} ms"
        )
        for query in captured.captured_queries:
            print(f"  {float(query['time']) * 1000:7.1f} ms  {query['sql'][:110]}")
    finally:
        connection.creation.destroy_test_db(original, verbosity=0, keepdb=False)


if __name__ == "__main__":
    main()
