"""Memory: a real ``run_reminders`` while 100,000 one-shot tasks fall due at once.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/reminders \\
        .venv/bin/python benchmarks/memory.py [--tasks 100000] [--no-cluster-only]

Only the server, user and password of ``DATABASE_URL`` are used: each scenario gets a
fresh database ``bench_reminders_<pid>_<scenario>`` cloned from one migrated template,
dropped when it ends; every process started is stopped by pid (``throughput.Processes``).

Each scenario: ``--tasks`` one-shot ``follow_up`` tasks inserted by SQL, due tomorrow;
one ``manage.py run_reminders`` started (``benchmarks.settings``: the instant counting
sender), with ``--no-cluster`` and then (unless ``--no-cluster-only``) with its django-q2
clusters; once it has ticked and idled for 3 s, every task is made due now in one
``UPDATE`` (and the schedulers woken with ``NOTIFY``, as ``api.schedule`` would). The
resident set size (RSS) of the process and of each of its descendants is read every
50 ms (psutil) until all the runs exist; the runs are counted every 0.5 s. Reported: the
RSS idle (before the tasks fell due), its peak, and its value when a quarter, half,
three quarters and all of the runs existed; the cluster's processes' peaks (their sum
counts the pages they share with each other once per process); the time from the
tasks falling due to the first run, and to the last (both by the runs' ``created_at``).
Then, beside them, ``dispatch.materialize()`` called back to back in one process on the
same due tasks: the planning alone, without the loop's sleeps between ticks.
``--no-cluster-only`` runs the first scenario alone.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.dashboard import environment
from benchmarks.throughput import (
    DEFAULT_URL,
    PYTHON,
    ROOT,
    SETTINGS,
    Databases,
    Failed,
    Processes,
    compile_sources,
    log,
    show_log_tails,
)

MB = 2**20

TASKS_SQL = """
INSERT INTO reminders_scheduledtask
    (kind, recipient, channel, cron, run_at, timezone, payload, priority, status, next_run,
     last_run_at, retry_count, calendar, error_code, error_message, error_at, key,
     created_at, updated_at)
SELECT 'follow_up', 'user' || lpad(i::text, 6, '0'), 'bench', '', now() + interval '1 day',
       'Asia/Shanghai', '{"content": "You have a customer follow-up due now."}'::jsonb,
       'normal', 'active', now() + interval '1 day', NULL, 0, NULL, '', '', NULL,
       'memory:' || i, now(), now()
FROM generate_series(1, %s) AS i
"""


@dataclass
class Sample:
    at: float  # seconds since the tasks fell due
    main: int  # RSS of the run_reminders process, bytes
    children: dict[int, int]  # pid -> RSS


@dataclass
class Result:
    label: str
    n: int
    idle: int = 0  # the main process's RSS before the tasks fell due
    idle_children: int = 0
    samples: list[Sample] = field(default_factory=list)
    counts: list[tuple[float, int]] = field(default_factory=list)  # (at, runs)
    first_run: float = 0.0  # seconds from due to the first run's created_at
    last_run: float = 0.0
    sent: int = 0  # lines the counting sender wrote (the cluster scenario)
    pss: int = 0  # proportional set size at the end: the main process, its descendants
    pss_children: int = 0
    load: str = ""

    @property
    def peak(self) -> int:
        return max(s.main for s in self.samples)

    @property
    def children_peak_sum(self) -> int:
        return max((sum(s.children.values()) for s in self.samples), default=0)

    @property
    def children_peak_one(self) -> int:
        return max((max(s.children.values(), default=0) for s in self.samples), default=0)

    @property
    def child_count(self) -> int:
        return max((len(s.children) for s in self.samples), default=0)

    def rss_at(self, share: float) -> int:
        """The main process's RSS at the first sample after ``share`` of the runs existed."""
        when = next((at for at, runs in self.counts if runs >= share * self.n), None)
        if when is None:
            return 0
        return next((s.main for s in self.samples if s.at >= when), self.samples[-1].main)


def rss(proc: psutil.Process) -> int:
    try:
        return int(proc.memory_info().rss)
    except psutil.Error:
        return 0


def pss(main: psutil.Process) -> tuple[int, int]:
    """PSS of ``main`` and the sum of its descendants': shared pages split between the
    processes that share them, so that the sum counts each once."""

    def one(proc: psutil.Process) -> int:
        try:
            return int(proc.memory_full_info().pss)
        except psutil.Error:
            return 0

    with contextlib.suppress(psutil.Error):
        return one(main), sum(one(child) for child in main.children(recursive=True))
    return 0, 0


def sample(main: psutil.Process, since: float) -> Sample:
    children = {}
    with contextlib.suppress(psutil.Error):
        for child in main.children(recursive=True):
            children[child.pid] = rss(child)
    return Sample(time.time() - since, rss(main), children)


def scenario(
    dbs: Databases, template: str, work: Path, cluster: bool, args: argparse.Namespace
) -> Result:
    label = f"with its cluster ({args.workers} workers)" if cluster else "`--no-cluster`"
    slug = "cluster" if cluster else "no_cluster"
    log(label)
    db = dbs.create(slug, template=template)
    logs = work / slug
    logs.mkdir()
    procs = Processes(logs)
    result = Result(label, args.tasks)
    try:
        with dbs.connect(db) as conn:
            started = time.perf_counter()
            conn.execute(TASKS_SQL, [args.tasks])
            conn.execute("VACUUM ANALYZE reminders_scheduledtask")
            log(f"{args.tasks:,} tasks inserted in {time.perf_counter() - started:.1f} s")
            env = {
                **os.environ,
                "DJANGO_SETTINGS_MODULE": SETTINGS,
                "DATABASE_URL": dbs.url(db),
                "BENCH_COUNT_FILE": str(logs / "sends.txt"),
                "Q_WORKERS": str(args.workers),
                "LOG_LEVEL": "WARNING",
                "PYTHONDONTWRITEBYTECODE": "1",
            }
            command = ["run_reminders"] if cluster else ["run_reminders", "--no-cluster"]
            procs.start("run_reminders", command, env)
            main = psutil.Process(procs.started[0].pid)
            # Idle: it has ticked (its heartbeat is there) and slept a few ticks since.
            deadline = time.monotonic() + 60
            while not conn.execute("SELECT 1 FROM reminders_schedulerheartbeat").fetchone():
                if procs.crashed() or time.monotonic() > deadline:
                    raise Failed(f"{label}: run_reminders did not start")
                time.sleep(0.2)
            time.sleep(3)
            procs.watch()
            idle = sample(main, time.time())
            result.idle, result.idle_children = idle.main, sum(idle.children.values())
            result.load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
            log(f"idle: {result.idle / MB:.1f} MB (load average {result.load})")
            due = time.time()
            conn.execute("UPDATE reminders_scheduledtask SET run_at = now(), next_run = now()")
            conn.execute("SELECT pg_notify('reminders_due', '')")
            counted = 0.0
            runs = 0
            deadline = time.monotonic() + args.timeout
            while runs < args.tasks:
                result.samples.append(sample(main, due))
                if time.time() - counted >= 0.5:
                    counted = time.time()
                    row = conn.execute("SELECT count(*) FROM reminders_taskrun").fetchone()
                    runs = int(row[0]) if row else 0
                    result.counts.append((counted - due, runs))
                    if len(result.counts) % 40 == 0:
                        log(f"{runs:,} runs, RSS {result.samples[-1].main / MB:.1f} MB")
                if procs.crashed():
                    raise Failed(f"{label}: run_reminders exited early")
                if time.monotonic() > deadline:
                    raise Failed(f"{label}: {runs:,} runs after {args.timeout:.0f} s")
                time.sleep(0.05)
            result.pss, result.pss_children = pss(main)
            procs.watch()
            row = conn.execute(
                "SELECT extract(epoch FROM min(created_at)), extract(epoch FROM max(created_at))"
                " FROM reminders_taskrun"
            ).fetchone()
            assert row is not None
            result.first_run, result.last_run = float(row[0]) - due, float(row[1]) - due
        procs.stop()
        sends = logs / "sends.txt"
        result.sent = sends.read_bytes().count(b"\n") if sends.exists() else 0
        log(
            f"{label}: peak {result.peak / MB:.1f} MB, all runs {result.last_run:.1f} s"
            f" after falling due"
        )
        return result
    except BaseException:
        show_log_tails(logs)
        raise
    finally:
        procs.stop()
        dbs.drop(db)


# ``dispatch.materialize()`` called back to back until it plans nothing: the same work as
# the ticks' without the loop's sleeps. Prints seconds, calls and peak RSS (KiB).
LOOP = """
import resource, sys, time
import django
django.setup()
from reminders import dispatch
started, calls = time.perf_counter(), 0
while dispatch.materialize():
    calls += 1
print(time.perf_counter() - started, calls, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def back_to_back(dbs: Databases, template: str, args: argparse.Namespace) -> tuple[float, int, int]:
    """Seconds, calls and peak RSS (bytes) of ``materialize()`` called in a loop."""
    log("materialize() back to back")
    db = dbs.create("loop", template=template)
    try:
        with dbs.connect(db) as conn:
            conn.execute(TASKS_SQL, [args.tasks])
            conn.execute("UPDATE reminders_scheduledtask SET run_at = now(), next_run = now()")
            conn.execute("VACUUM ANALYZE reminders_scheduledtask")
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": SETTINGS, "DATABASE_URL": dbs.url(db)}
        out = subprocess.run(
            [PYTHON, "-c", LOOP], cwd=ROOT, env=env, capture_output=True, text=True, check=False
        )
        if out.returncode:
            raise Failed(f"materialize loop failed:\n{out.stderr[-2000:]}")
        seconds, calls, maxrss = out.stdout.split()[-3:]
        log(f"{float(seconds):.1f} s, {calls} calls")
        return float(seconds), int(calls), int(maxrss) * 1024
    finally:
        dbs.drop(db)


def report(
    results: list[Result],
    env_rows: list[tuple[str, str]],
    command: str,
    loop: tuple[float, int, int] | None,
) -> str:
    lines = [
        f"### Memory: {results[0].n:,} one-shot tasks due at once, one `run_reminders`",
        "",
        "RSS of the `run_reminders` process (the scheduler) in MB, read every 50 ms; times "
        "in seconds from the moment the tasks fell due (one `UPDATE`, then `NOTIFY`).",
        "",
        "| scenario | load average at the start | RSS idle | peak | at 25% / 50% / 75% / "
        "100% of the runs | first run | all runs | runs/s, first to last |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        at = " / ".join(f"{r.rss_at(share) / MB:.1f}" for share in (0.25, 0.5, 0.75, 1.0))
        rate = (r.n - 1) / (r.last_run - r.first_run) if r.last_run > r.first_run else 0
        lines.append(
            f"| {r.label} | {r.load} | {r.idle / MB:.1f} | **{r.peak / MB:.1f}** | {at} "
            f"| {r.first_run:.1f} | {r.last_run:.1f} | {rate:,.0f} |"
        )
    clustered = [r for r in results if r.child_count]
    if clustered:
        lines += [
            "",
            "| scenario | cluster processes | their RSS idle (sum) | peak of the sum "
            "| peak of the largest | PSS at the end: scheduler, cluster's sum "
            "| messages sent meanwhile |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for r in clustered:
            lines.append(
                f"| {r.label} | {r.child_count} | {r.idle_children / MB:.1f} "
                f"| {r.children_peak_sum / MB:.1f} | {r.children_peak_one / MB:.1f} "
                f"| {r.pss / MB:.1f}, {r.pss_children / MB:.1f} | {r.sent:,} |"
            )
    if loop:
        seconds, calls, maxrss = loop
        lines += [
            "",
            f"`dispatch.materialize()` called back to back in one process (no loop, no "
            f"sleeps) on the same {results[0].n:,} due tasks: {seconds:.1f} s, {calls} calls, "
            f"{results[0].n / seconds:,.0f} runs/s, peak RSS {maxrss / MB:.1f} MB.",
        ]
    for r in results:
        growth = [
            f"{at:.0f} s: {runs:,} runs"
            for at, runs in r.counts[:: max(1, len(r.counts) // 8)]
            if runs
        ]
        gaps = [b.at - a.at for a, b in zip(r.samples, r.samples[1:], strict=False)]
        lines += [
            "",
            f"{r.label}: {', '.join(growth)}; RSS read {len(r.samples):,} times, "
            f"median interval {statistics.median(gaps) * 1000:.0f} ms.",
        ]
    lines += ["", "| environment | |", "|---|---|"]
    lines += [f"| {key} | {value} |" for key, value in env_rows]
    lines += ["", "```sh", command, "```"]
    return "\n".join(lines)


def interrupted(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, interrupted)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=2, help="django-q2 workers (Q_WORKERS)")
    parser.add_argument("--timeout", type=float, default=900.0, help="per scenario, seconds")
    parser.add_argument(
        "--no-cluster-only", action="store_true", help="skip the scenario with the cluster"
    )
    args = parser.parse_args(argv)
    url = os.environ.get("DATABASE_URL", DEFAULT_URL)
    compile_sources()
    command = " ".join(
        [f"DATABASE_URL={shlex.quote(url)}", ".venv/bin/python", "benchmarks/memory.py"]
        + [shlex.quote(a) for a in argv]
    )
    work = Path(tempfile.mkdtemp(prefix="bench-reminders-memory-"))
    dbs = Databases(url)
    keep = False
    try:
        env_rows = environment(dbs)
        template = dbs.migrated()
        modes = [False] if args.no_cluster_only else [False, True]
        results = [scenario(dbs, template, work, cluster, args) for cluster in modes]
        loop = None if args.no_cluster_only else back_to_back(dbs, template, args)
        print(report(results, env_rows, command, loop))
        return 0
    except KeyboardInterrupt:
        log("interrupted; stopping what was started and dropping the databases")
        return 130
    except Failed as exc:
        keep = True
        log(f"FAILED: {exc} (logs in {work})")
        return 1
    finally:
        dbs.drop_all()
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
