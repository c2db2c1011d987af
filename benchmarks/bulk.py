"""Bulk scheduling: ``api.schedule_many`` of 10,000 birthdays in one call, on PostgreSQL.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/reminders \\
        .venv/bin/python benchmarks/bulk.py [--tasks 10000] [--repeat 3]

Only the server, user and password of ``DATABASE_URL`` are used: the benchmark makes a
template database ``bench_reminders_<pid>_template``, migrates it, and runs each round
in a fresh database cloned from it (dropped when the round ends, the template at the
end), as ``benchmarks/throughput.py`` does.

Each round, in this process, times three calls of ``schedule_many`` with the same keys:

* insert: ``--tasks`` yearly birthday greetings (``api.birthday_item``: random
  birthdays, 29 February among them, in three zones), none of whose keys exist yet;
* upsert, same schedules: the same keys with a new payload (each task is updated, none
  re-planned);
* upsert, schedules moved: the same keys at 08:30 instead of 09:00 (each task updated and
  re-planned, its pending runs cancelled).

Each call is checked (every task saved, or updated) and timed from the call to its
return, commit included; also shown are this process's CPU time and that of the
PostgreSQL backend serving it. The caches of cron expressions and occurrences are
emptied before each round, so every round pays for them as a fresh process would.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shlex
import sys
import time
from dataclasses import dataclass
from datetime import date
from datetime import time as clock
from importlib.metadata import version
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.throughput import (  # noqa: E402
    DEFAULT_URL,
    Databases,
    Failed,
    backend_cpu,
    code_version,
    log,
)

SETTINGS = "benchmarks.settings"
ZONES = ("Asia/Shanghai", "Asia/Singapore", "Europe/Berlin")


@dataclass
class Timing:
    label: str
    seconds: float
    cpu: float  # this process, user + system
    pg_cpu: float  # the PostgreSQL backend serving it

    def row(self, n: int) -> str:
        return (
            f"| {self.label} | {self.seconds:.2f} | {n / self.seconds:,.0f} "
            f"| {self.cpu:.2f} | {self.pg_cpu:.2f} |"
        )


def birthdays(n: int, seed: int = 42) -> list[date]:
    rng = random.Random(seed)
    days = [date(1960, 1, 1).toordinal() + rng.randrange(46 * 365) for _ in range(n)]
    born = [date.fromordinal(day) for day in days]
    born[::97] = [date(1992, 2, 29)] * len(born[::97])  # some leap-day birthdays
    return born


def items(born: list[date], *, at: clock, payload: dict[str, Any]) -> list[dict[str, Any]]:
    from reminders import api

    return [
        api.birthday_item(
            f"member{i:06d}",
            day,
            at=at,
            tz=ZONES[i % len(ZONES)],
            key=f"birthday:member{i:06d}",
            payload=payload,
        )
        for i, day in enumerate(born)
    ]


def timed(label: str, work: Any, pg: Any) -> tuple[Timing, Any]:
    me = psutil.Process()
    cpu_before = sum(me.cpu_times()[:2])
    pg_before = backend_cpu(pg)
    started = time.perf_counter()
    result = work()
    seconds = time.perf_counter() - started
    cpu = sum(me.cpu_times()[:2]) - cpu_before
    return Timing(label, seconds, cpu, backend_cpu(pg) - pg_before), result


def one_round(dbs: Databases, template: str, n: int, number: int) -> list[Timing]:
    from django.db import connections

    from reminders import api
    from reminders.models import ScheduledTask
    from reminders.schedule import timing

    name = dbs.create(f"round{number}", template=template)
    try:
        connections["default"].close()
        connections["default"].settings_dict["NAME"] = name
        timing._check_cron.cache_clear()
        timing.next_occurrence.cache_clear()
        pg = dbs.connect(name)
        ScheduledTask.objects.exists()  # connect before the clock starts
        born = birthdays(n)
        results = []
        batch = items(born, at=clock(9, 0), payload={})
        result, tasks = timed("insert", lambda: api.schedule_many(batch), pg)
        if ScheduledTask.objects.count() != n or len(tasks) != n:
            raise Failed(f"insert: {ScheduledTask.objects.count()} tasks saved, expected {n}")
        results.append(result)

        batch = items(born, at=clock(9, 0), payload={"content": "Happy birthday!"})
        result, _ = timed("upsert, same schedules", lambda: api.schedule_many(batch), pg)
        updated = ScheduledTask.objects.filter(payload__content="Happy birthday!").count()
        if updated != n or ScheduledTask.objects.count() != n:
            raise Failed(f"upsert: {updated} tasks updated, expected {n}")
        results.append(result)

        batch = items(born, at=clock(8, 30), payload={"content": "Happy birthday!"})
        result, _ = timed("upsert, schedules moved", lambda: api.schedule_many(batch), pg)
        moved = ScheduledTask.objects.filter(cron__startswith="30 8 ").count()
        if moved != n:
            raise Failed(f"upsert: {moved} tasks moved, expected {n}")
        results.append(result)
        pg.close()
        return results
    finally:
        connections["default"].close()
        dbs.drop(name)


def environment(dbs: Databases) -> list[tuple[str, str]]:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return [
        ("CPU cores (logical/physical)", f"{os.cpu_count()}/{psutil.cpu_count(logical=False)}"),
        ("Memory", f"{psutil.virtual_memory().total / 2**30:.1f} GiB"),
        ("OS", f"{platform.system()} {platform.release()}"),
        ("Python", platform.python_version()),
        ("Django", version("django")),
        ("croniter", version("croniter")),
        ("psycopg", version("psycopg")),
        ("PostgreSQL", dbs.server_version()),
        ("Code", code_version()),
        ("Load average at start (1/5/15 min)", load),
    ]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3, help="rounds; all are shown")
    args = parser.parse_args(argv)
    url = os.environ.get("DATABASE_URL", DEFAULT_URL)
    command = " ".join(
        [f"DATABASE_URL={shlex.quote(url)}", ".venv/bin/python", "benchmarks/bulk.py"]
        + [shlex.quote(a) for a in argv]
    )
    dbs = Databases(url)
    try:
        env_rows = environment(dbs)
        template = dbs.migrated("template", SETTINGS)
        os.environ.update(DJANGO_SETTINGS_MODULE=SETTINGS, DATABASE_URL=dbs.url(template))
        import django

        django.setup()
        rounds = []
        for number in range(1, args.repeat + 1):
            log(f"round {number}")
            rounds.append(one_round(dbs, template, args.tasks, number))
        print(report(rounds, env_rows, command, args.tasks))
        return 0
    except Failed as exc:
        log(f"FAILED: {exc}")
        return 1
    except KeyboardInterrupt:
        log("interrupted; dropping the databases")
        return 130
    finally:
        dbs.drop_all()


def report(rounds: list[list[Timing]], env: list[tuple[str, str]], command: str, n: int) -> str:
    lines = [
        f"### schedule_many: {n:,} birthday tasks in one call",
        "",
        "| call | seconds | tasks/s | CPU s, this process | CPU s, PostgreSQL |",
        "|---|---:|---:|---:|---:|",
    ]
    for index in range(len(rounds[0])):
        best = min((timings[index] for timings in rounds), key=lambda t: t.seconds)
        lines.append(best.row(n))
    lines += ["", "Every round (seconds):", ""]
    for number, timings in enumerate(rounds, start=1):
        lines.append(
            f"- round {number}: " + ", ".join(f"{t.label} {t.seconds:.2f}" for t in timings)
        )
    lines += ["", f"Best of {len(rounds)} rounds, each in a fresh database. `{command}`", ""]
    lines += [f"- {name}: {value}" for name, value in env]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
