"""A morning of digests, end to end: members' follow-ups folded into one message each,
beside their daily report, through WeCom's rate limit.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/reminders \\
        .venv/bin/python benchmarks/digest_morning.py [--members 10000] [--window 900]

The issue's figure: a morning of ``--members`` members with ``--follow-ups`` follow-ups
each plus a daily report, WeCom at 10,000 messages a minute. Targets: every member
receives at most one digest and one report (no follow-up missing or twice); no member
more than 30 messages in any minute; the wave done within its stagger window plus 10%;
the database cost per message within 1.2x of the same morning without digests.

Two scenarios on PostgreSQL, each in a fresh database cloned from a migrated template
(``throughput.py``'s helpers), each with a WeCom sandbox process of its own limited to
10,000 sends a minute (``--rate-limit 166.67``, its member limits on: 30 a minute, 1,000
an hour) and ``--processes`` real ``manage.py run_reminders`` sending to it over HTTP
(``WECOM_RATE_LIMIT=166.67``):

* digests: ``follow_up`` with ``digest_seconds = --window`` (900: 09:00-09:15);
* none: the same morning with ``digest_seconds = 0``, each follow-up its own message.

The morning happens on the real clock, shifted: its start ``W`` (the "09:00") is the
next boundary of a window on the local clock (digests' windows count from local
midnight; for the scenario without digests any whole minute), far enough ahead for the
tasks to be scheduled (``api.schedule_many``) and the processes started first. Each
member has a daily report, a cron at ``W`` with the kind's own stagger (10 batches 60 s
apart plus up to 300 s of jitter: due up to 14 min after ``W``; its working-day calendar
is off, so any day is a morning), and ``--follow-ups`` one-shot follow-ups at whole
fifteenths of the window after ``W`` (minutes, at 900 s), drawn at random. With digests
the planner makes the follow-ups due at the window's end (``W + window``), staggered as
the kind is (``follow_up`` has no stagger: all at once). ``--window`` below 900 scales
the report's stagger by the same factor: a quicker, smaller morning, said so in the
output.

Measured, from the sandbox's ledger (its own clock): per member, digests, reports and
follow-ups received (each follow-up names its member and number, so a missing or
repeated one shows), the busiest 60 s per member; the wave, from ``W`` to the last
delivery, against the stagger window (``W`` to the last due time the planner gave a run
of the morning, from the database) plus 10%. The database cost: statements Django sent
in every process (``benchmarks.dbcount``, counted as ``benchmarks/statements.py``
counts them, by role), PostgreSQL's transactions, rows written and its backends' CPU,
from the processes' start until the wave is done; then the same over ``--idle`` seconds
with nothing due,
whose rate (ticks, polling, heartbeats) times the scenario's length is taken off to give
the work the messages cost ("net"). Every process started is stopped by pid.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import random
import re
import shlex
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from pathlib import Path
from types import FrameType
from typing import Any
from zoneinfo import ZoneInfo

import psutil
import psycopg

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.ratelimit import _run, sandbox_args, wait_for_trees  # noqa: E402
from benchmarks.rates import busiest_window  # noqa: E402
from benchmarks.sandbox_capacity import sandbox_process  # noqa: E402
from benchmarks.throughput import (  # noqa: E402
    DEFAULT_URL,
    PYTHON,
    Databases,
    Failed,
    Processes,
    busy_share,
    code_version,
    compile_sources,
    log,
    show_log_tails,
)
from wecom_sandbox import DEV_AGENT_ID, DEV_CORP_ID, DEV_CORP_SECRET, SandboxClient  # noqa: E402

SETTINGS = "benchmarks.settings_morning"
PER_MINUTE = 10_000  # WeCom's sends a minute for one app
RATE = PER_MINUTE / 60
MEMBER_MINUTE = 30  # WeCom's messages a minute to one member
WAVE_MARGIN = 1.10
COST_TARGET = 1.2
FULL_WINDOW = 900
SLOTS = 15  # follow-ups fall on fifteenths of the window: whole minutes at 900 s
DIGEST = "digests"
NONE = "none"
ZONE = "Asia/Shanghai"  # the project's TIME_ZONE: the tasks' local clock
FOLLOW_UP = re.compile(r"FU (\d+)-(\d+)")
ROLES = ("scheduler", "pusher", "worker", "monitor", "cluster")


# The morning's tasks ------------------------------------------------------------------


def member(i: int) -> str:
    return f"m{i:05d}"


def fill(argv: list[str]) -> int:
    """``python -m benchmarks.digest_morning fill``: the morning's tasks, scheduled through
    ``api.schedule_many`` as a CRM would; prints the seconds it took and the last task's
    id as JSON. Runs in a process of its own, with the settings the engine's have."""
    parser = argparse.ArgumentParser(prog="digest_morning.py fill")
    parser.add_argument("--members", type=int, required=True)
    parser.add_argument("--follow-ups", type=int, required=True)
    parser.add_argument("--start", required=True, help="W, ISO 8601")
    parser.add_argument("--window", type=int, required=True)
    args = parser.parse_args(argv)
    import django

    django.setup()
    from django.db.models import Max

    from reminders import api
    from reminders.models import ScheduledTask

    start = datetime.fromisoformat(args.start).astimezone(ZoneInfo(ZONE))
    cron = f"{start.minute} {start.hour} * * *"
    slot = args.window / SLOTS
    draw = random.Random(42)
    items: list[dict[str, Any]] = []
    for i in range(args.members):
        items.append({"kind": "daily_report", "recipient": member(i), "cron": cron, "tz": ZONE})
        for k in range(args.follow_ups):
            items.append(
                {
                    "kind": "follow_up",
                    "recipient": member(i),
                    "at": start + timedelta(seconds=draw.randrange(SLOTS) * slot),
                    "tz": ZONE,
                    "payload": {
                        "customer": f"FU {i:05d}-{k}",
                        "subject": "Renewal",
                        "url": f"https://crm.example.com/follow-ups/{i}-{k}",
                    },
                }
            )
    began = time.perf_counter()
    for chunk in range(0, len(items), 10_000):
        api.schedule_many(items[chunk : chunk + 10_000])
    seconds = time.perf_counter() - began
    last = ScheduledTask.objects.aggregate(last=Max("pk"))["last"]
    print(json.dumps({"seconds": seconds, "last_task": last, "tasks": len(items)}))
    return 0


def next_start(now: datetime, align: int, lead: float) -> datetime:
    """The first instant at least ``lead`` seconds after ``now`` that is a whole number of
    ``align`` seconds after local midnight: a window's start, as the engine counts them."""
    local = now.astimezone(ZoneInfo(ZONE))
    midnight = local.replace(hour=0, minute=0, second=0, microsecond=0)
    earliest = (local - midnight).total_seconds() + lead
    return midnight + timedelta(seconds=math.ceil(earliest / align) * align)


# Counting -------------------------------------------------------------------------------


@dataclass
class Sample:
    """The database cost so far: statements by role (and shape), transactions and rows
    written in the scenario's database, at ``at``."""

    at: float
    statements: dict[str, Counter[str]]
    server_cpu: dict[str, float]  # CPU seconds of the PostgreSQL backends, by role
    xacts: int
    rows: int

    def total(self, role: str | None = None) -> int:
        roles = [role] if role else list(self.statements)
        return sum(sum(self.statements.get(r, Counter()).values()) for r in roles)

    def cpu(self, role: str | None = None) -> float:
        return sum(v for r, v in self.server_cpu.items() if role in (None, r))


def read_counts(directory: Path) -> tuple[dict[str, Counter[str]], dict[str, float]]:
    """The statements by role and shape, and the backends' CPU by role, of every process."""
    roles: dict[str, Counter[str]] = {}
    cpu: dict[str, float] = {}
    for path in directory.glob("*.json"):
        with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
            data = json.loads(path.read_text())
            for role, shapes in data["roles"].items():
                roles.setdefault(role, Counter()).update(shapes)
            for role, seconds in data["server_cpu"].items():
                cpu[role] = cpu.get(role, 0.0) + seconds
    return roles, cpu


def server_counts(observer: psycopg.Connection, database: str) -> tuple[int, int]:
    observer.execute("SELECT pg_stat_clear_snapshot()")
    row = observer.execute(
        "SELECT xact_commit + xact_rollback, tup_inserted + tup_updated + tup_deleted"
        " FROM pg_stat_database WHERE datname = %s",
        (database,),
    ).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


# One scenario --------------------------------------------------------------------------


@dataclass
class Outcome:
    label: str
    members: int
    follow_ups: int
    window: int
    digest_seconds: int
    start: float  # W, wall time
    planned_last_due: float  # the last due time the planner gave a run of the morning
    fill_seconds: float
    deliveries: list[tuple[str, float, list[tuple[int, int]]]]  # member, at, follow-ups in it
    rejected: Counter[str]
    statuses: Counter[str]
    digest_runs: Counter[str]
    lateness: tuple[float, float, float]  # p50, p95, max of finished_at - due_at, items
    cost: Sample  # start to the end of the wave, raw
    idle_rate: dict[str, float]  # per second with nothing due: statements by role, xacts, rows
    span: float  # seconds the cost was counted over
    cpu: float
    sandbox_cpu: float
    busy: float
    load: tuple[float, float, float]
    code: str  # the code the processes ran (at their start), and if it changed by the end
    items: int = 0

    def __post_init__(self) -> None:
        self.items = self.members * (self.follow_ups + 1)

    @property
    def messages(self) -> int:
        return len(self.deliveries)

    def net(self, role: str | None = None) -> float:
        """Statements of ``role`` (all) less the idle rate over the counted span."""
        roles = [role] if role else list(ROLES)
        idle = sum(self.idle_rate.get(r, 0.0) for r in roles)
        return self.cost.total(role) - idle * self.span

    def net_cpu(self, role: str | None = None) -> float:
        """PostgreSQL's CPU seconds for ``role`` (all) less its idle rate over the span."""
        roles = [role] if role else list(ROLES)
        idle = sum(self.idle_rate.get(f"cpu {r}", 0.0) for r in roles)
        return self.cost.cpu(role) - idle * self.span

    def net_xacts(self) -> float:
        return self.cost.xacts - self.idle_rate["xacts"] * self.span

    def net_rows(self) -> float:
        return self.cost.rows - self.idle_rate["rows"] * self.span


@dataclass
class Bench:
    dbs: Databases
    template: str
    work: Path
    args: argparse.Namespace
    count: int = 0
    outcomes: list[Outcome] = field(default_factory=list)

    @contextlib.contextmanager
    def scenario(self, label: str) -> Iterator[tuple[str, Path, Processes]]:
        self.count += 1
        slug = f"{self.count:02d}_{label}"
        db = self.dbs.create(slug, template=self.template)
        logs = self.work / slug
        logs.mkdir()
        procs = Processes(logs)
        try:
            yield db, logs, procs
        except BaseException:
            show_log_tails(logs)
            raise
        finally:
            procs.stop()
            if self.args.keep_databases:
                self.dbs.created.remove(db)
                log(f"{label}: database {db} kept")
            else:
                self.dbs.drop(db)

    def env(self, db: str, base_url: str, digest_seconds: int, counts: Path) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            DJANGO_SETTINGS_MODULE=SETTINGS,
            DATABASE_URL=self.dbs.url(db),
            LOG_LEVEL="WARNING",
            PYTHONDONTWRITEBYTECODE="1",
            WECOM_API_BASE=base_url,
            WECOM_CORP_ID=DEV_CORP_ID,
            WECOM_CORP_SECRET=DEV_CORP_SECRET,
            WECOM_AGENT_ID=str(DEV_AGENT_ID),
            WECOM_RATE_LIMIT=f"{RATE:.4f}",
            BENCH_DIGEST_SECONDS=str(digest_seconds),
            BENCH_STAGGER_SCALE=f"{self.args.window / FULL_WINDOW:g}",
            BENCH_STATEMENTS_DIR=str(counts),
        )
        return env

    def run(self, label: str, digest_seconds: int) -> Outcome:
        args = self.args
        lead = args.lead or 45 + args.members * (args.follow_ups + 1) / 1000
        align = args.window if digest_seconds else 60
        start = next_start(datetime.now(UTC), align, lead)
        wait = start.timestamp() - lead - time.time()
        log(
            f"{label}: the morning starts at {start:%H:%M:%S} {ZONE}"
            + (f"; waiting {wait:.0f} s to schedule it {lead:.0f} s ahead" if wait > 1 else "")
        )
        if wait > 0:
            time.sleep(wait)
        with (
            self.scenario(label) as (db, logs, procs),
            sandbox_process(*sandbox_args(), "--rate-limit", f"{RATE:.4f}") as (sandbox, url),
            SandboxClient(url, timeout=60) as client,
            self.dbs.connect(db) as conn,
            self.dbs.connect("postgres") as observer,
        ):
            counts = logs / "statements"
            counts.mkdir()
            env = self.env(db, url, digest_seconds, counts)
            command = [PYTHON, "-m", "benchmarks.digest_morning", "fill"]
            command += ["--members", str(args.members), "--follow-ups", str(args.follow_ups)]
            command += ["--start", start.isoformat(), "--window", str(args.window)]
            filled = _run(command, env, capture=True, timeout=max(300.0, lead))
            if filled.returncode:
                raise Failed(f"scheduling failed:\n{filled.stdout}{filled.stderr}")
            setup = json.loads(filled.stdout.strip().splitlines()[-1])
            log(f"{label}: {setup['tasks']} tasks scheduled in {setup['seconds']:.1f} s")
            own = 0  # our own statements in the scenario's database, taken off its counts
            xacts, rows = server_counts(observer, db)
            load = os.getloadavg()
            machine = psutil.cpu_times()
            sandbox_before = _cpu(sandbox)
            began = time.time()
            code = code_version()
            for i in range(args.processes):
                procs.start(f"run_reminders-{i}", ["run_reminders"], env)
            wait_for_trees(procs, timeout=90)
            if time.time() > start.timestamp() - 2:
                raise Failed(f"{label}: not ready before the morning began; give a longer --lead")
            ahead = start.timestamp() - time.time()
            log(f"{label}: processes up; the morning starts in {ahead:.0f} s")
            if args.analyze:
                own += self._analyze(conn, args.members * (args.follow_ups + 1), start)
            expected = args.members * (2 if digest_seconds else args.follow_ups + 1)
            deadline = start.timestamp() + 2 * args.window + 300
            checked = time.monotonic()
            while True:
                if client.stats().get("delivered", 0) >= expected:
                    own += 1
                    if self._settled(conn):
                        break
                if crashed := procs.crashed():
                    raise Failed(f"{label}: process(es) {crashed} exited early")
                if time.time() > deadline:
                    raise Failed(f"{label}: not done by W + {deadline - start.timestamp():.0f} s")
                if time.monotonic() - checked > 10:
                    own += 1
                    if ended := _ended_badly(conn):
                        raise Failed(f"{label}: runs ended other than sent: {ended}")
                    checked = time.monotonic()
                time.sleep(1.0)
            done = time.time()
            busy = busy_share(machine, psutil.cpu_times())
            procs.watch()
            cpu, sandbox_cpu = procs.cpu_seconds(), _cpu(sandbox) - sandbox_before
            log(f"{label}: the wave is done, {done - start.timestamp():.0f} s after W; idle now")
            # Idle backends flush their statistics within 10 s; the statements' files
            # are at most a second old.
            time.sleep(11)
            first = Sample(time.time(), *read_counts(counts), *server_counts(observer, db))
            time.sleep(args.idle)
            second = Sample(time.time(), *read_counts(counts), *server_counts(observer, db))
            idle_span = second.at - first.at
            idle_rate = {
                role: (second.total(role) - first.total(role)) / idle_span for role in ROLES
            }
            idle_rate.update(
                {f"cpu {role}": (second.cpu(role) - first.cpu(role)) / idle_span for role in ROLES}
            )
            idle_rate["xacts"] = (second.xacts - first.xacts) / idle_span
            idle_rate["rows"] = (second.rows - first.rows) / idle_span
            cost = Sample(
                first.at,
                first.statements,
                first.server_cpu,
                first.xacts - xacts - own,
                first.rows - rows,
            )
            procs.stop()
            if code_version() != code:
                code += f" (the checkout was at {code_version()} by the end)"
            planned_last_due, statuses, digest_runs, lateness = _database(conn, setup["last_task"])
            entries = [e for e in client.ledger() if e.endpoint == "message/send"]
        deliveries = [
            (
                e.delivered_to[0],
                e.at,
                sorted({(int(i), int(k)) for i, k in FOLLOW_UP.findall(e.content)}),
            )
            for e in entries
            if e.delivered
        ]
        rejected = Counter(f"{e.status}, errcode {e.errcode}" for e in entries if not e.delivered)
        return Outcome(
            label=label,
            members=args.members,
            follow_ups=args.follow_ups,
            window=args.window,
            digest_seconds=digest_seconds,
            start=start.timestamp(),
            planned_last_due=planned_last_due,
            fill_seconds=setup["seconds"],
            deliveries=deliveries,
            rejected=rejected,
            statuses=statuses,
            digest_runs=digest_runs,
            lateness=lateness,
            cost=cost,
            idle_rate=idle_rate,
            span=first.at - began,
            cpu=cpu,
            sandbox_cpu=sandbox_cpu,
            busy=busy,
            load=load,
            code=code,
        )

    @staticmethod
    def _analyze(conn: psycopg.Connection, runs: int, start: datetime) -> int:
        """``ANALYZE`` the runs and tasks once the morning's runs are planned (or 5 s
        before W): what autovacuum would have done by then; returns the statements sent."""
        sent = 0
        planned = 0
        while time.time() < start.timestamp() - 5:
            row = conn.execute("SELECT count(*) FROM reminders_taskrun").fetchone()
            sent += 1
            planned = int(row[0]) if row else 0
            if planned >= runs:
                break
            time.sleep(1.0)
        conn.execute("ANALYZE reminders_taskrun")
        conn.execute("ANALYZE reminders_scheduledtask")
        log(f"analyzed with {planned:,} of the morning's {runs:,} runs planned")
        return sent + 2

    @staticmethod
    def _settled(conn: psycopg.Connection) -> bool:
        """No run waiting, leased or folded: every item ended with its digest."""
        row = conn.execute(
            "SELECT count(*) FROM reminders_taskrun WHERE status IN"
            " ('scheduled', 'retrying', 'claimed', 'running', 'folded')"
        ).fetchone()
        return row is not None and row[0] == 0


def _ended_badly(conn: psycopg.Connection) -> dict[str, int]:
    rows = conn.execute(
        "SELECT status, count(*) FROM reminders_taskrun"
        " WHERE status IN ('failed', 'unknown', 'expired', 'skipped', 'cancelled')"
        " GROUP BY status"
    ).fetchall()
    return {str(status): int(n) for status, n in rows}


def _database(
    conn: psycopg.Connection, last_task: int
) -> tuple[float, Counter[str], Counter[str], tuple[float, float, float]]:
    """The last due time planned for the morning's runs, their statuses, the digests'
    statuses and the items' lateness (``finished_at - due_at``: p50, p95, max)."""
    row = conn.execute(
        "SELECT extract(epoch FROM max(due_at)),"
        " percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - due_at)),"
        " percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - due_at)),"
        " max(extract(epoch FROM finished_at - due_at))"
        " FROM reminders_taskrun WHERE task_id <= %s",
        [last_task],
    ).fetchone()
    assert row is not None
    statuses = Counter(
        {
            str(s): int(n)
            for s, n in conn.execute(
                "SELECT status, count(*) FROM reminders_taskrun WHERE task_id <= %s"
                " GROUP BY status",
                [last_task],
            ).fetchall()
        }
    )
    digests = Counter(
        {
            str(s): int(n)
            for s, n in conn.execute(
                "SELECT status, count(*) FROM reminders_taskrun WHERE task_id > %s GROUP BY status",
                [last_task],
            ).fetchall()
        }
    )
    return float(row[0]), statuses, digests, (float(row[1]), float(row[2]), float(row[3]))


def _cpu(process: psutil.Process) -> float:
    with contextlib.suppress(psutil.Error):
        times = process.cpu_times()
        return float(times.user + times.system)
    return 0.0


# Judging ------------------------------------------------------------------------------


@dataclass
class Received:
    """What the members received, from the sandbox's ledger."""

    digests: Counter[str]  # member: messages listing two follow-ups or more
    singles: Counter[str]  # member: messages of one follow-up
    reports: Counter[str]  # member: messages of no follow-up (the daily report)
    missing: int  # follow-ups no member received
    repeated: int  # follow-ups received more than once
    misdelivered: int  # follow-ups received by another member
    busiest_minute: int  # the most messages one member received in any 60 s
    busiest_member: str


def received(outcome: Outcome) -> Received:
    digests: Counter[str] = Counter()
    singles: Counter[str] = Counter()
    reports: Counter[str] = Counter()
    got: Counter[tuple[int, int]] = Counter()
    times: dict[str, list[float]] = {}
    misdelivered = 0
    for to, at, items in outcome.deliveries:
        times.setdefault(to, []).append(at)
        target = digests if len(items) > 1 else singles if items else reports
        target[to] += 1
        for i, k in items:
            got[i, k] += 1
            misdelivered += member(i) != to
    expected = {(i, k) for i in range(outcome.members) for k in range(outcome.follow_ups)}
    busiest, who = 0, ""
    for to, stamps in times.items():
        count = busiest_window(stamps, 60.0)[0]
        if count > busiest:
            busiest, who = count, to
    return Received(
        digests=digests,
        singles=singles,
        reports=reports,
        missing=len(expected - set(got)),
        repeated=sum(n - 1 for n in got.values() if n > 1) + len(set(got) - expected),
        misdelivered=misdelivered,
        busiest_minute=busiest,
        busiest_member=who,
    )


def verdict(met: bool) -> str:
    return "met" if met else "**MISSED**"


def report(outcomes: list[Outcome], args: argparse.Namespace, command: str, server: str) -> str:
    lines = [
        f"### A morning of {args.members:,} members: {args.follow_ups} follow-ups each and a "
        f"daily report, WeCom at {PER_MINUTE:,} a minute",
        "",
    ]
    if args.window != FULL_WINDOW:
        lines += [
            f"**Scaled down**: a {args.window} s digest window (not 900 s), the daily report's "
            f"stagger scaled by {args.window / FULL_WINDOW:g} with it.",
            "",
        ]
    lines += [
        "| scenario | what | measured | target | |",
        "|---|---|---:|---|---|",
    ]
    by_label = {o.label: o for o in outcomes}
    for o in outcomes:
        got = received(o)
        members = [member(i) for i in range(o.members)]
        most_digests = max((got.digests[m] for m in members), default=0)
        most_reports = max((got.reports[m] for m in members), default=0)
        fewest_reports = min((got.reports[m] for m in members), default=0)
        window = o.planned_last_due - o.start
        last = max((at for _, at, _ in o.deliveries), default=o.start)
        wave = last - o.start
        lines += [
            f"| {o.label} | messages delivered (items: {o.items:,}) | {o.messages:,} "
            f"| {o.members * (2 if o.digest_seconds else o.follow_ups + 1):,} | |",
        ]
        if o.digest_seconds:
            apart = sum(1 for m in members if got.singles[m])
            lines += [
                f"| | digests per member, most (members with none) | {most_digests} "
                f"({sum(1 for m in members if not got.digests[m]):,}) | 1 | "
                f"{verdict(most_digests <= 1)} |",
                f"| | follow-ups sent on their own, not in their member's digest (members) "
                f"| {sum(got.singles.values()):,} ({apart:,}) | 0 | {verdict(not apart)} |",
            ]
        else:
            lines.append(
                f"| | follow-up messages per member, most | "
                f"{max((got.singles[m] for m in members), default=0)} | {o.follow_ups} | |"
            )
        lines += [
            f"| | reports per member, most / fewest | {most_reports} / {fewest_reports} | 1 | "
            f"{verdict(most_reports <= 1 and fewest_reports == 1)} |",
            f"| | follow-ups missing / received twice / to another member | {got.missing} / "
            f"{got.repeated} / {got.misdelivered} | 0 | "
            f"{verdict(not (got.missing or got.repeated or got.misdelivered))} |",
            f"| | busiest 60 s of one member | {got.busiest_minute} | ≤ {MEMBER_MINUTE} | "
            f"{verdict(got.busiest_minute <= MEMBER_MINUTE)} |",
            f"| | the wave: W to the last delivery | {wave:.0f} s | ≤ {WAVE_MARGIN:.2f} x "
            f"{window:.0f} s = {WAVE_MARGIN * window:.0f} s "
            f"| {verdict(wave <= WAVE_MARGIN * window)} |",
            f"| | sends refused by the sandbox | {sum(o.rejected.values())} | 0 | "
            f"{verdict(not o.rejected)} |",
        ]
    lines.append("")
    for o in outcomes:
        lines += describe(o)
    digests, none = by_label.get(DIGEST), by_label.get(NONE)
    lines += cost_table(outcomes)
    if digests and none:
        per_message = (digests.net() / digests.messages) / (none.net() / none.messages)
        per_item = (digests.net() / digests.items) / (none.net() / none.items)
        raw = (digests.cost.total() / digests.messages) / (none.cost.total() / none.messages)
        xacts = (digests.net_xacts() / digests.messages) / (none.net_xacts() / none.messages)
        cpu_raw = (digests.cost.cpu() / digests.messages) / (none.cost.cpu() / none.messages)
        cpu_ratio = (digests.net_cpu() / digests.messages) / (none.net_cpu() / none.messages)
        server_item = (digests.net_cpu() / digests.items) / (none.net_cpu() / none.items)
        lines += [
            "",
            f"**Database cost per delivered message, digests ÷ none, net of idle: "
            f"{per_message:.2f}x in statements ({raw:.2f}x everything counted), {xacts:.2f}x "
            f"in transactions, {cpu_ratio:.2f}x in PostgreSQL's CPU ({cpu_raw:.2f}x everything "
            f"counted); target ≤ {COST_TARGET}x: statements "
            f"{verdict(per_message <= COST_TARGET)}, CPU {verdict(cpu_ratio <= COST_TARGET)}.** "
            f"Per item (a follow-up or a report reaching its member): {per_item:.2f}x the "
            f"statements, {server_item:.2f}x the CPU. Everything counted includes what the "
            f"processes cost with nothing due (polling, heartbeats) over each scenario's span: "
            f"digests deliver half the messages over a longer span (their window), so that "
            f"share per message doubles without any work.",
        ]
    lines += ["", *shapes(outcomes), *environment(args, server), "", "Reproduce:", "", "```"]
    lines += [command, "```"]
    return "\n".join(lines)


def describe(o: Outcome) -> list[str]:
    local = datetime.fromtimestamp(o.start, ZoneInfo(ZONE))
    times = sorted(at for _, at, _ in o.deliveries)
    window = o.planned_last_due - o.start
    lines = [
        f"- **{o.label}** (follow-ups' `digest_seconds` {o.digest_seconds}; code {o.code}): W = "
        f"{local:%H:%M:%S} {ZONE}; the stagger window, W to the last due time planned for "
        f"a run of the morning, {window:.0f} s; first delivery at W + {times[0] - o.start:.1f} s, "
        f"last at W + {times[-1] - o.start:.1f} s; busiest second over all members "
        f"{busiest_window(times)[0]} (WeCom: {RATE:.0f}/s); the items' lateness "
        f"(`finished_at - due_at`) p50 / p95 / max {o.lateness[0]:.1f} / "
        f"{o.lateness[1]:.1f} / {o.lateness[2]:.1f} s; runs of the morning "
        f"{dict(o.statuses)}" + (f", digest runs {dict(o.digest_runs)}" if o.digest_runs else "")
    ]
    if o.digest_seconds:
        release = o.start + o.window
        after = [at for to, at, items in o.deliveries if len(items) > 1]
        sizes = Counter(len(items) for _, _, items in o.deliveries if len(items) > 1)
        listed = ", ".join(f"{n:,} of {size}" for size, n in sorted(sizes.items(), reverse=True))
        lines[-1] += f"; digests by the follow-ups they list: {listed or 'none'}"
        if after:
            ideal = len(after) / (RATE * 0.97)
            lines[-1] += (
                f"; the {len(after):,} digests went from W + {min(after) - o.start:.1f} s to "
                f"W + {max(after) - o.start:.1f} s, {max(after) - release:.1f} s after their "
                f"window ended (at the paced rate alone: {ideal:.1f} s)"
            )
    lines[-1] += (
        f"; CPU per message: ours {o.cpu / o.messages * 1e3:.1f} ms + PostgreSQL "
        f"{o.cost.cpu() / o.messages * 1e3:.1f} ms + sandbox "
        f"{o.sandbox_cpu / o.messages * 1e3:.1f} ms;"
        f" CPUs busy {o.busy:.0%}; load average {o.load[0]:.2f} at the start; "
        f"tasks scheduled in {o.fill_seconds:.1f} s before the processes started."
    )
    return lines


def cost_table(outcomes: list[Outcome]) -> list[str]:
    lines = [
        "",
        "Database cost, from the processes' start to the end of the wave (net: less the "
        "rate measured with nothing due, times that span):",
        "",
        "| scenario | counted over | statements / msg: all (net) | per item (net) "
        "| transactions / msg (net) | rows written / msg (net) "
        "| PostgreSQL CPU ms / msg: all (net) | per item (net) "
        "| net statements / msg by role: " + ", ".join(ROLES) + " "
        "| net PostgreSQL CPU ms / msg by role |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for o in outcomes:
        n = o.messages
        roles = " / ".join(f"{o.net(role) / n:.2f}" for role in ROLES)
        server = " / ".join(f"{o.net_cpu(role) / n * 1e3:.2f}" for role in ROLES)
        lines.append(
            f"| {o.label} | {o.span:.0f} s | {o.cost.total() / n:.2f} ({o.net() / n:.2f}) "
            f"| {o.net() / o.items:.2f} "
            f"| {o.cost.xacts / n:.2f} ({o.net_xacts() / n:.2f}) "
            f"| {o.cost.rows / n:.2f} ({o.net_rows() / n:.2f}) "
            f"| {o.cost.cpu() / n * 1e3:.2f} ({o.net_cpu() / n * 1e3:.2f}) "
            f"| {o.net_cpu() / o.items * 1e3:.2f} "
            f"| {roles} | {server} |"
        )
    idle = "; ".join(
        f"{o.label} {sum(o.idle_rate[r] for r in ROLES):.0f} statements ("
        + ", ".join(f"{r} {o.idle_rate[r]:.0f}" for r in ROLES)
        + f"), {o.idle_rate['xacts']:.0f} transactions and "
        f"{sum(o.idle_rate[f'cpu {r}'] for r in ROLES) * 1e3:.0f} ms of PostgreSQL CPU a second"
        for o in outcomes
    )
    lines += ["", f"With nothing due: {idle}."]
    return lines


def shapes(outcomes: list[Outcome], top: int = 15) -> list[str]:
    lines = ["Statements of the workers (the jobs) by shape, per delivered message:", ""]
    for o in outcomes:
        lines += [f"{o.label}:", "```"]
        worker = o.cost.statements.get("worker", Counter())
        for sql, count in worker.most_common(top):
            lines.append(f"  {count / o.messages:6.2f}  {sql[:150]}")
        lines += ["```", ""]
    return lines


def environment(args: argparse.Namespace, server: str) -> list[str]:
    statistics = (
        "the runs and tasks analyzed once the morning's runs were planned (`--analyze`)"
        if args.analyze
        else "no ANALYZE but the server's autovacuum's"
    )
    return [
        f"Planner statistics: {statistics}. "
        f"{os.cpu_count()} CPUs ({platform.machine()}), Python "
        f"{platform.python_version()}, Django {version('django')}, django-q2 "
        f"{version('django-q2')}, psycopg {version('psycopg')}, PostgreSQL {server}; "
        f"{args.processes} `run_reminders` processes (their default workers), "
        f"`WECOM_RATE_LIMIT={RATE:.4f}` and the sandbox limited to the same (its member "
        "limits on).",
    ]


# Main ------------------------------------------------------------------------------------


def server(dbs: Databases) -> str:
    """PostgreSQL's version and whether its autovacuum runs."""
    row = dbs.admin.execute("SHOW autovacuum").fetchone()
    return f"{dbs.server_version()} (autovacuum {row[0] if row else '?'})"


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--members", type=int, default=10_000, help="members of the morning")
    parser.add_argument("--follow-ups", type=int, default=3, help="follow-ups per member")
    parser.add_argument(
        "--window",
        type=int,
        default=FULL_WINDOW,
        help="the digest window, seconds; under 900 the report's stagger is scaled with it",
    )
    parser.add_argument("--processes", type=int, default=2, help="run_reminders processes")
    parser.add_argument(
        "--scenarios",
        default=f"{DIGEST},{NONE}",
        help=f"which to run, in order: {DIGEST} (the window), {NONE} (digest_seconds 0)",
    )
    parser.add_argument(
        "--idle", type=float, default=30.0, help="seconds of nothing due measured after the wave"
    )
    parser.add_argument(
        "--lead",
        type=float,
        default=0.0,
        help="seconds before W to schedule the tasks and start the processes "
        "(0: 45 plus one per thousand tasks)",
    )
    parser.add_argument(
        "--analyze",
        action="store_true",
        help="ANALYZE the runs and tasks once the morning's runs are planned, before W "
        "(as autovacuum would on a small table); without it the planner's statistics are "
        "whatever the server's autovacuum made of them",
    )
    parser.add_argument(
        "--keep-databases",
        action="store_true",
        help="keep each scenario's database, to look into (dropped otherwise)",
    )
    args = parser.parse_args(argv)
    args.scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    if not set(args.scenarios) <= {DIGEST, NONE}:
        parser.error(f"--scenarios: {DIGEST} and/or {NONE}")
    if args.window < SLOTS or 86_400 % args.window:
        parser.error("--window: at least 15 seconds, and a whole number of them in a day")
    return args


def main(argv: list[str]) -> int:
    if argv[:1] == ["fill"]:
        return fill(argv[1:])
    args = parse(argv)
    url = os.environ.get("DATABASE_URL", DEFAULT_URL)
    compile_sources()
    command = " ".join(
        [f"DATABASE_URL={shlex.quote(url)}", ".venv/bin/python", "benchmarks/digest_morning.py"]
        + [shlex.quote(a) for a in argv]
    )

    def interrupted(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    dbs = Databases(url)
    work = Path(tempfile.mkdtemp(prefix="bench-morning-"))
    outcomes: list[Outcome] = []
    failed = False
    try:
        template = dbs.migrated("morning_template")
        bench = Bench(dbs, template, work, args)
        for label in args.scenarios:
            outcomes.append(bench.run(label, args.window if label == DIGEST else 0))
        print(report(outcomes, args, command, server(dbs)))
        return 0
    except KeyboardInterrupt:
        log("interrupted; stopping what was started and dropping the databases")
        return 130
    except Failed as exc:
        failed = True
        log(f"FAILED: {exc} (logs in {work})")
        if outcomes:
            print(report(outcomes, args, command, server(dbs)))
        return 1
    finally:
        dbs.drop_all()
        if not failed:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
