"""The engine's cost with nothing due: what idle ``run_reminders`` processes cost PostgreSQL.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/reminders \\
        .venv/bin/python benchmarks/idle.py [--processes 2] [--seconds 30] [--warm-up 10] \\
        [--sent 0] [--repeat 1] [--probes 3]

Only the server, user and password of ``DATABASE_URL`` are used: the benchmark migrates a
fresh database ``bench_reminders_<pid>_idle`` (``throughput.py``'s ``Databases``;
``BENCH_DB_SUFFIX`` goes after the pid) and drops it at the end. It starts
``--processes`` real ``manage.py run_reminders`` (scheduler loop + django-q2 clusters
each, their default workers and tick) with nothing due, waits until every tree is whole
and ``--warm-up`` seconds more, then measures over ``--seconds``. With ``--sent N`` the
idle span follows a history: N one-shots due at once, scheduled before the processes
start and all sent by them first (the tables then hold their runs, ledger rows and the
queue's dead rows, as after a morning's wave on a server without autovacuum).

* PostgreSQL's CPU: the backends serving the database (their pids from
  ``pg_stat_activity``, their CPU read with psutil, as ``throughput.py`` reads it), read
  every half second so that a backend that comes or goes is counted for the time it
  served;
* transactions (``xact_commit + xact_rollback``) and rows written (inserted, updated,
  deleted) from ``pg_stat_database``, read from another database so that the reading
  does not count (idle backends flush their counts up to 10 s late: at a steady rate the
  lag at each end of the span cancels out);
* statements: every one Django sends in every process, and the health checks
  ``CONN_HEALTH_CHECKS`` makes it send, counted by the processes themselves by role
  (``benchmarks.dbcount``); statements sent outside Django (``LISTEN``, ``pg_notify``
  on a listening connection) are not among them, but their transactions are;
* our processes' CPU (every process of each tree).

Then, unless ``--probes 0``, it schedules ``--probes`` one-shots due now, one at a time,
from a process of its own (``api.schedule``, as a CRM's web process would) and times
each from its commit to its send: work made due while everything idles must still start
at once. Prints Markdown tables; every process it started is stopped by pid.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shlex
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from types import FrameType

import psutil
import psycopg

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.ratelimit import _run, wait_for_trees  # noqa: E402
from benchmarks.throughput import (  # noqa: E402
    DEFAULT_URL,
    PYTHON,
    Databases,
    Failed,
    Processes,
    code_version,
    log,
    show_log_tails,
)

SETTINGS = "benchmarks.settings_idle"
ROLES = ("scheduler", "pusher", "worker", "monitor", "cluster")
SAMPLE_SECONDS = 0.5
PROBE_TIMEOUT = 30.0  # seconds a probe's one-shot may take to be sent


# Reading -------------------------------------------------------------------------------


class Backends:
    """CPU seconds of the PostgreSQL backends serving one database since ``start``."""

    def __init__(self, observer: psycopg.Connection, database: str) -> None:
        self.observer = observer
        self.database = database
        # pid -> (process, CPU when first seen in the span, CPU last read)
        self.seen: dict[int, tuple[psutil.Process, float, float]] = {}
        self.started = False

    def start(self) -> None:
        self.seen.clear()
        self.started = False
        self.sample()
        self.started = True

    def sample(self) -> None:
        rows = self.observer.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s", (self.database,)
        ).fetchall()
        for (pid,) in rows:
            entry = self.seen.get(pid)
            try:
                process = entry[0] if entry else psutil.Process(pid)
                times = process.cpu_times()
            except psutil.Error:
                continue
            cpu = times.user + times.system
            if entry is None:
                # There at the start: from now on; new since: all of it (its start too).
                self.seen[pid] = (process, cpu if not self.started else 0.0, cpu)
            else:
                self.seen[pid] = (process, entry[1], cpu)
        # Those that left keep what was last read of them.
        for pid, (process, first, _last) in list(self.seen.items()):
            with contextlib.suppress(psutil.Error):
                times = process.cpu_times()
                self.seen[pid] = (process, first, times.user + times.system)

    def cpu(self) -> float:
        return sum(last - first for _process, first, last in self.seen.values())

    def count(self) -> int:
        return len(self.seen)


def server_counts(observer: psycopg.Connection, database: str) -> tuple[int, int]:
    """Transactions and rows written in ``database`` so far."""
    observer.execute("SELECT pg_stat_clear_snapshot()")
    row = observer.execute(
        "SELECT xact_commit + xact_rollback, tup_inserted + tup_updated + tup_deleted"
        " FROM pg_stat_database WHERE datname = %s",
        (database,),
    ).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


Snapshot = dict[int, tuple[float, dict[str, Counter[str]]]]


def statement_counts(directory: Path) -> Snapshot:
    """Each process's statements so far by role and shape, with the moment its file was
    written (every second)."""
    found: Snapshot = {}
    for path in directory.glob("*.json"):
        with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
            data = json.loads(path.read_text())
            roles = {role: Counter(shapes) for role, shapes in data["roles"].items()}
            found[int(data["pid"])] = (float(data["at"]), roles)
    return found


def statements_between(before: Snapshot, after: Snapshot, span: float) -> dict[str, Counter[str]]:
    """Statements by role and shape over ``span`` seconds: each process's count between
    its two snapshots, scaled from the time between them to ``span``."""
    total: dict[str, Counter[str]] = {}
    for pid, (at, roles) in after.items():
        since, earlier = before.get(pid, (at - span, {}))
        scale = span / (at - since) if at > since else 1.0
        for role, shapes in roles.items():
            grown = shapes - earlier.get(role, Counter())
            scaled = Counter({shape: round(n * scale) for shape, n in grown.items()})
            total.setdefault(role, Counter()).update(scaled)
    return total


@dataclass
class Idle:
    processes: int
    span: float
    pg_cpu: float
    backends: int
    xacts: int
    rows: int
    statements: dict[str, Counter[str]]  # by role and shape, over the span
    our_cpu: float
    probes: list[float]
    sent: int

    def per_second(self, value: float) -> float:
        return value / self.span

    def statements_total(self, role: str | None = None) -> int:
        return sum(sum(c.values()) for r, c in self.statements.items() if role in (None, r))


# One measurement ------------------------------------------------------------------------


def measure(dbs: Databases, work: Path, args: argparse.Namespace) -> Idle:
    db = dbs.migrated("idle", settings=SETTINGS)
    logs = work / "logs"
    logs.mkdir()
    counts = work / "statements"
    counts.mkdir()
    sends = work / "sends.txt"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": SETTINGS,
        "DATABASE_URL": dbs.url(db),
        "BENCH_STATEMENTS_DIR": str(counts),
        "BENCH_COUNT_FILE": str(sends),
        "PYTHONUNBUFFERED": "1",
    }
    procs = Processes(logs)
    try:
        if args.sent:
            log(f"scheduling {args.sent} one-shots due now, to be sent before the idle span")
            command = [PYTHON, "-m", "benchmarks.idle", "fill", str(args.sent)]
            filled = _run(command, {**env, "BENCH_STATEMENTS_DIR": ""}, timeout=600)
            if filled.returncode:
                raise Failed("scheduling the history failed")
        with dbs.connect("postgres") as observer:
            for i in range(args.processes):
                procs.start(f"run_reminders-{i}", ["run_reminders"], env)
            wait_for_trees(procs, timeout=90)
            if args.sent:
                wait_sent(sends, args.sent, procs)
            log(f"{args.processes} processes up; warming up {args.warm_up:.0f} s")
            time.sleep(args.warm_up)
            backends = Backends(observer, db)
            procs.watch()
            began = time.monotonic()
            backends.start()
            xacts, rows = server_counts(observer, db)
            before = statement_counts(counts)
            ours = procs.cpu_seconds()
            log(f"measuring {args.seconds:.0f} s with nothing due")
            while time.monotonic() - began < args.seconds:
                time.sleep(SAMPLE_SECONDS)
                backends.sample()
                if crashed := procs.crashed():
                    raise Failed(f"process(es) {crashed} exited")
            procs.watch()
            backends.sample()
            span = time.monotonic() - began
            ours = procs.cpu_seconds() - ours
            xacts2, rows2 = server_counts(observer, db)
            statements = statements_between(before, statement_counts(counts), span)
            probes = probe(env, sends, args.probes) if args.probes else []
        return Idle(
            processes=args.processes,
            span=span,
            pg_cpu=backends.cpu(),
            backends=backends.count(),
            xacts=xacts2 - xacts,
            rows=rows2 - rows,
            statements=statements,
            our_cpu=ours,
            probes=probes,
            sent=args.sent,
        )
    except Failed:
        show_log_tails(logs)
        raise
    finally:
        procs.stop()
        dbs.drop(db)


def wait_sent(sends: Path, n: int, procs: Processes, timeout: float = 600.0) -> None:
    """Until ``n`` messages are sent (lines in ``sends``)."""
    deadline = time.monotonic() + timeout
    while (sent := len(sends.read_text().splitlines()) if sends.exists() else 0) < n:
        if crashed := procs.crashed():
            raise Failed(f"process(es) {crashed} exited")
        if time.monotonic() > deadline:
            raise Failed(f"{sent} of {n} sent after {timeout:.0f} s")
        time.sleep(0.5)
    log(f"the history's {n} messages are sent")


def fill(argv: list[str]) -> int:
    """``python -m benchmarks.idle fill N``: N one-shots due now on the counting channel."""
    import django

    django.setup()
    from django.utils import timezone

    from reminders import api

    now = timezone.now()
    items = [
        {"kind": "follow_up", "recipient": f"h{i}", "at": now, "channel": "bench"}
        for i in range(int(argv[0]))
    ]
    for start in range(0, len(items), 1000):
        api.schedule_many(items[start : start + 1000])
    return 0


def probe(env: dict[str, str], sends: Path, count: int) -> list[float]:
    """Seconds from each probe's commit to its send."""
    log(f"probing: {count} one-shots due now, one at a time")
    command = [PYTHON, "-m", "benchmarks.idle", "probe", str(sends), str(count)]
    done = _run(command, {**env, "BENCH_STATEMENTS_DIR": ""}, capture=True, timeout=120)
    if done.returncode:
        raise Failed(f"the probe failed:\n{done.stdout}{done.stderr}")
    return [float(x) for x in json.loads(done.stdout.strip().splitlines()[-1])]


def run_probes(argv: list[str]) -> int:
    """``python -m benchmarks.idle probe SENDS COUNT``, with the processes' settings: a
    one-shot due now, scheduled through the API, then wait for its line in ``SENDS``;
    ``COUNT`` times, 2 s apart (everything idle again); prints the latencies as JSON."""
    import django

    django.setup()
    from django.utils import timezone

    from reminders import api

    sends, count = Path(argv[0]), int(argv[1])

    def lines() -> int:
        return len(sends.read_text().splitlines()) if sends.exists() else 0

    latencies = []
    for number in range(count):
        time.sleep(2.0)
        seen = lines()
        api.schedule("follow_up", f"probe{number}", at=timezone.now(), channel="bench")
        committed = time.time()
        deadline = time.monotonic() + PROBE_TIMEOUT
        while lines() <= seen:
            if time.monotonic() > deadline:
                print(f"probe {number} not sent after {PROBE_TIMEOUT:.0f} s", file=sys.stderr)
                return 1
            time.sleep(0.005)
        stamp = float(sends.read_text().splitlines()[-1].split()[0])
        latencies.append(stamp - committed)
    print(json.dumps(latencies))
    return 0


# Report ---------------------------------------------------------------------------------


def report(results: list[Idle], command: str, dbs: Databases) -> str:
    first = results[0]
    lines = [
        f"Nothing due, {first.processes} `run_reminders` processes (their default workers and"
        f" tick)"
        + (f", after {first.sent:,} one-shots were sent" if first.sent else "")
        + f", {len(results)} measurement(s) of {first.span:.0f} s each; code"
        f" {code_version()}, Python {platform.python_version()}, Django {version('django')},"
        f" django-q2 {version('django-q2')}, PostgreSQL {dbs.server_version()},"
        f" {psutil.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the end.",
        "",
        f"    {command}",
        "",
        "| per second | " + " | ".join(f"run {i + 1}" for i in range(len(results))) + " |",
        "|---|" + "---:|" * len(results),
    ]

    def row(label: str, values: list[str]) -> None:
        lines.append(f"| {label} | " + " | ".join(values) + " |")

    row("**PostgreSQL CPU, ms**", [f"**{r.per_second(r.pg_cpu) * 1e3:.1f}**" for r in results])
    row("transactions", [f"{r.per_second(r.xacts):.1f}" for r in results])
    row(
        "statements (Django's, health checks included)",
        [f"{r.per_second(r.statements_total()):.1f}" for r in results],
    )
    for role in ROLES:
        row(f"… by the {role}", [f"{r.per_second(r.statements_total(role)):.1f}" for r in results])
    row("rows written", [f"{r.per_second(r.rows):.2f}" for r in results])
    row("our processes' CPU, ms", [f"{r.per_second(r.our_cpu) * 1e3:.1f}" for r in results])
    row("backends seen", [str(r.backends) for r in results])
    if any(r.probes for r in results):
        row(
            "one-shot due now: commit to send, s (each probe)",
            [", ".join(f"{p:.3f}" for p in r.probes) for r in results],
        )
    shapes: Counter[tuple[str, str]] = Counter()
    for r in results:
        for role, counter in r.statements.items():
            for shape, n in counter.items():
                shapes[role, shape] += n
    if shapes:
        total_span = sum(r.span for r in results)
        lines += ["", "| role | statement | per second |", "|---|---|---:|"]
        for (role, shape), n in shapes.most_common(15):
            text = shape if len(shape) <= 110 else shape[:107] + "..."
            text = text.replace("|", "\\|")
            lines.append(f"| {role} | `{text}` | {n / total_span:.2f} |")
    return "\n".join(lines)


# Main ------------------------------------------------------------------------------------


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=2, help="run_reminders processes")
    parser.add_argument("--seconds", type=float, default=30.0, help="the span measured")
    parser.add_argument("--warm-up", type=float, default=10.0, help="seconds idle before measuring")
    parser.add_argument(
        "--repeat", type=int, default=1, help="measurements, each with fresh processes"
    )
    parser.add_argument(
        "--probes", type=int, default=3, help="one-shots due now timed after the span (0: none)"
    )
    parser.add_argument(
        "--sent", type=int, default=0, help="one-shots sent before the idle span (a history)"
    )
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    if argv[:1] == ["probe"]:
        return run_probes(argv[1:])
    if argv[:1] == ["fill"]:
        return fill(argv[1:])
    args = parse(argv)
    url = os.environ.get("DATABASE_URL", DEFAULT_URL)
    command = " ".join(
        [f"DATABASE_URL={shlex.quote(url)}", ".venv/bin/python", "benchmarks/idle.py"]
        + [shlex.quote(a) for a in argv]
    )

    def interrupted(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    dbs = Databases(url)
    results: list[Idle] = []
    work = Path(tempfile.mkdtemp(prefix="bench-reminders-idle-"))
    keep_work = False
    try:
        for n in range(args.repeat):
            round_dir = work / str(n)
            round_dir.mkdir()
            results.append(measure(dbs, round_dir, args))
        print(report(results, command, dbs))
        return 0
    except KeyboardInterrupt:
        log("interrupted; stopping what was started and dropping the database")
        return 130
    except Failed as exc:
        keep_work = True
        log(f"FAILED: {exc} (logs in {work})")
        return 1
    finally:
        dbs.drop_all()
        if not keep_work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
