"""The shared rate limit end to end: real ``run_reminders`` processes, the WeCom sandbox
as a process of its own, PostgreSQL.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/reminders \\
        .venv/bin/python benchmarks/ratelimit.py [--rate 100] [--processes 3] [--profile 8] \\
        [--rate-cache redis://127.0.0.1:6379/0]

Every scenario gets a fresh database cloned from one migrated template (as in
``throughput.py``, whose database and process helpers this reuses) and a sandbox process
of its own (``manage.py wecom_sandbox``). The tasks are inserted first, not yet due; the
processes are started and waited for (scheduler, cluster and workers up); then one
``UPDATE`` makes every task due at once. Deliveries are timed by the sandbox: its ledger
stamps each message with the moment it took it, so the pace is judged from the
provider's side. Every process started is stopped by pid, also on failure.

* accuracy: ``--processes`` processes send ``--accuracy-tasks`` messages through
  ``WECOM_RATE_LIMIT=--rate`` (burst: the channel's default, a tenth of a second's
  worth) to a sandbox without a limit. Targets: the busiest one-second window of
  deliveries at most R + burst; the paced rate ``(n - burst) / (last - first)`` at
  least 0.95 R (an exact limiter gives exactly R).
* saturation: ``--saturation-tasks`` (2,000) due at once, the sandbox limited to 100/s
  (its burst: one second's worth) and ``WECOM_RATE_LIMIT=100``. Targets: first to last
  delivery within 1.10 x the ideal n / 100 s; not one 45009.
* priority: ``--priority-tasks`` (2,000) ``low`` runs due at once against the sandbox
  limited to 100/s (``WECOM_RATE_LIMIT=100``, ``REMINDERS_HIGH_RATE_SHARE=--high-share``),
  and ``--priority-high`` (5) ``high`` ones (``inquiry_timeout``) due when half of that
  backlog is still to be sent. Targets: each high one delivered within 1.5 s of its due
  time; the low ones first to last within 1.10 x the ideal n / 100 s (bulk work
  borrows the high share's idle slots). Every paced scenario runs with the share
  (``--high-share``, the default 0.2), split as the product splits it.
* headroom: no limit anywhere (``WECOM_RATE_LIMIT=0``), ``--headroom-processes`` (2)
  processes, ``--headroom-tasks`` messages. Target: at least 334 messages a second end
  to end (twice WeCom's 10,000 a minute), from the moment they fall due to the last
  delivery; shown beside the sandbox's raw capacity (``sandbox_capacity.measure``, one
  client, one kept-alive connection, ``http.client`` and ``requests``) in the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import psutil
import psycopg

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.rates import backlog_rate, busiest_window  # noqa: E402
from benchmarks.sandbox_capacity import Capacity, measure, sandbox_process  # noqa: E402
from benchmarks.throughput import (  # noqa: E402
    DEFAULT_URL,
    PYTHON,
    Databases,
    Failed,
    Processes,
    backend_cpu,
    busy_share,
    code_version,
    compile_sources,
    log,
    show_log_tails,
)
from wecom_sandbox import (  # noqa: E402
    DEV_AGENT_ID,
    DEV_CORP_ID,
    DEV_CORP_SECRET,
    SandboxClient,
)

SETTINGS = "benchmarks.settings_wecom"
PACE_MARGIN = 0.97  # channels are paced this much under their limit (senders.base)
FREQUENCY_LIMIT = 45009
# Twice WeCom's per-corp ceiling of 10,000 calls a minute (166.7 a second), rounded up.
HEADROOM_TARGET = math.ceil(2 * 10_000 / 60)
# main; bulk cluster, sentinel, monitor, pusher and two workers; the same for the high
# cluster with one worker.
TREE = 12


@dataclass
class Outcome:
    """What one scenario did, as the sandbox and the database saw it."""

    label: str
    n: int
    processes: int
    rate: float  # WECOM_RATE_LIMIT, 0 for none
    burst: int
    sandbox_rate: float | None
    due: float  # wall time at which every task fell due
    times: list[float]  # the sandbox's delivery stamps
    calls: int
    throttled: int
    extra_deliveries: int  # members who got more than one message
    attempts: Counter[int]
    statuses: Counter[str]
    cpu: float  # our processes, the scenario only
    pg_cpu: float
    sandbox_cpu: float
    busy: float
    load: tuple[float, float, float]
    profile: Path | None = None
    share: float = 0.0  # REMINDERS_HIGH_RATE_SHARE
    high_delays: list[float] = field(default_factory=list)  # due to delivery, high runs
    bulk_times: list[float] = field(default_factory=list)  # deliveries of bulk runs

    @property
    def bulk_drain(self) -> float:
        return max(self.bulk_times) - min(self.bulk_times)

    @property
    def first_to_last(self) -> float:
        return max(self.times) - min(self.times)

    @property
    def due_to_last(self) -> float:
        return max(self.times) - self.due

    @property
    def end_to_end(self) -> float:
        return self.n / self.due_to_last

    @property
    def steady(self) -> float:
        return backlog_rate(self.times, self.burst or 1)

    def busiest(self) -> int:
        return busiest_window(self.times)[0]

    def busiest_at(self) -> float:
        """When the busiest window starts, seconds after the first delivery."""
        return busiest_window(self.times)[1] - min(self.times)


@dataclass
class Check:
    scenario: str
    what: str
    measured: str
    target: str
    met: bool
    note: str = ""


@dataclass
class Bench:
    dbs: Databases
    template: str
    work: Path
    workers: int
    timeout: float
    profile: int
    rate_cache: str = ""  # a cache URL: the processes keep the rate limits there
    count: int = 0
    spies: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @contextlib.contextmanager
    def scenario(self, label: str) -> Iterator[tuple[str, Path, Processes]]:
        log(label)
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
            self.stop_spies()
            self.dbs.drop(db)

    def run(
        self,
        label: str,
        n: int,
        processes: int,
        rate: float,
        sandbox_rate: float | None = None,
        profile: bool = False,
        high: int = 0,
        share: float = 0.2,
    ) -> Outcome:
        """``n`` runs due at once (``low`` ones when ``high``), and ``high`` high priority
        ones due in the middle of their backlog; ``share``: REMINDERS_HIGH_RATE_SHARE."""
        args = sandbox_args()
        if sandbox_rate:
            args += ["--rate-limit", f"{sandbox_rate:g}"]
        with (
            self.scenario(label) as (db, logs, procs),
            sandbox_process(*args) as (sandbox, url),
            SandboxClient(url, timeout=30) as client,
            self.dbs.connect(db) as conn,
        ):
            env = dict(os.environ)
            env.update(
                DJANGO_SETTINGS_MODULE=SETTINGS,
                DATABASE_URL=self.dbs.url(db),
                Q_WORKERS=str(self.workers),
                LOG_LEVEL="WARNING",
                PYTHONDONTWRITEBYTECODE="1",
                WECOM_API_BASE=url,
                WECOM_CORP_ID=DEV_CORP_ID,
                WECOM_CORP_SECRET=DEV_CORP_SECRET,
                WECOM_AGENT_ID=str(DEV_AGENT_ID),
                WECOM_RATE_LIMIT=f"{rate:g}",
                REMINDERS_HIGH_RATE_SHARE=f"{share:g}",
            )
            if self.rate_cache:
                env.update(CACHE_URL=self.rate_cache, REMINDERS_RATE_LIMIT_CACHE="default")
            fill = _run(
                [PYTHON, "-m", "benchmarks.fixtures", "tasks", str(n + high), "wecom"],
                env,
                capture=True,
            )
            if fill.returncode:
                raise Failed(f"fixtures failed:\n{fill.stdout}{fill.stderr}")
            urgent = _make_high(conn, high) if high else set()
            # Not due until every process is up: start-up is not what is measured.
            conn.execute("UPDATE reminders_scheduledtask SET next_run = now() + interval '1 day'")
            for i in range(processes):
                procs.start(f"run_reminders-{i}", ["run_reminders"], env)
            wait_for_trees(procs, timeout=60)
            if profile:
                self.spy(procs.started[0].pid, logs / "run_reminders-0.collapsed.txt")
                self.spy(sandbox.pid, logs / "sandbox.collapsed.txt")
            load = os.getloadavg()
            cpu_before, pg_before = procs.cpu_seconds(), backend_cpu(conn)
            sandbox_before = _cpu(sandbox)
            machine_before = psutil.cpu_times()
            due = time.time()
            conn.execute("UPDATE reminders_scheduledtask SET run_at = now(), next_run = now()")
            # The high ones fall due when half the bulk backlog is still to be sent.
            high_after = n / (2 * rate * PACE_MARGIN) if high else 0.0
            if high:
                conn.execute(
                    "UPDATE reminders_scheduledtask SET run_at = now() + %s * interval '1 second',"
                    " next_run = now() + %s * interval '1 second' WHERE priority = 'high'",
                    [high_after, high_after],
                )
            deadline = time.monotonic() + self.timeout
            total = n + high
            while client.stats().get("delivered", 0) < total or _count(conn, "sent") < total:
                if crashed := procs.crashed():
                    raise Failed(f"{label}: process(es) {crashed} exited early")
                if time.monotonic() > deadline:
                    raise Failed(
                        f"{label}: not done after {self.timeout:.0f}s: {client.stats()}, "
                        f"runs {_statuses(conn)}"
                    )
                time.sleep(0.25)
            busy = busy_share(machine_before, psutil.cpu_times())
            procs.watch()
            cpu = procs.cpu_seconds() - cpu_before
            pg_cpu = backend_cpu(conn) - pg_before
            sandbox_cpu = _cpu(sandbox) - sandbox_before
            procs.stop()
            entries = [e for e in client.ledger() if e.endpoint == "message/send"]
            attempts = Counter(
                int(row[0])
                for row in conn.execute("SELECT attempts FROM reminders_taskrun").fetchall()
            )
            statuses = _statuses(conn)
        delivered = Counter(user for e in entries if e.delivered for user in e.delivered_to)
        high_due = due + high_after
        return Outcome(
            label=label,
            n=n + high,
            share=share,
            high_delays=sorted(
                e.at - high_due for e in entries if e.delivered and set(e.delivered_to) & urgent
            ),
            bulk_times=[e.at for e in entries if e.delivered and not set(e.delivered_to) & urgent],
            processes=processes,
            rate=rate,
            burst=max(1, int(rate / 10)) if rate else 0,
            sandbox_rate=sandbox_rate,
            due=due,
            times=[e.at for e in entries if e.delivered],
            calls=len(entries),
            throttled=sum(1 for e in entries if e.errcode == FREQUENCY_LIMIT),
            extra_deliveries=sum(count - 1 for count in delivered.values()),
            attempts=attempts,
            statuses=statuses,
            cpu=cpu,
            pg_cpu=pg_cpu,
            sandbox_cpu=sandbox_cpu,
            busy=busy,
            load=load,
            profile=(logs / "run_reminders-0.collapsed.txt") if profile else None,
        )

    def spy(self, pid: int, out: Path) -> None:
        spy = shutil.which("py-spy") or str(Path(PYTHON).with_name("py-spy"))
        if not Path(spy).exists():
            log("profile: py-spy is not installed in the venv")
            return
        cmd = [spy, "record", "--pid", str(pid), "--subprocesses", "--rate", "50"]
        cmd += ["--duration", str(self.profile), "--nonblocking", "--format", "raw"]
        cmd += ["--output", str(out)]
        with out.with_suffix(".log").open("wb") as spy_log:
            self.spies.append(subprocess.Popen(cmd, stdout=spy_log, stderr=subprocess.STDOUT))

    def stop_spies(self) -> None:
        for spy in self.spies:
            try:
                spy.wait(self.profile + 15)
            except subprocess.TimeoutExpired:
                spy.kill()
                spy.wait(5)
        self.spies.clear()


def _run(
    command: list[str], env: dict[str, str], capture: bool = False, timeout: float = 300.0
) -> subprocess.CompletedProcess[str]:
    """A setup command, waited for at most ``timeout`` seconds (then killed)."""
    try:
        return subprocess.run(
            command,
            cwd=ROOT,
            env=env,
            capture_output=capture,
            text=True,
            check=False,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise Failed(f"{' '.join(command[1:])}: still running after {timeout:.0f}s") from None


def sandbox_args() -> list[str]:
    """The development credentials, whatever ``WECOM_*`` this shell has."""
    return [
        "--verbosity",
        "0",
        "--corp-id",
        DEV_CORP_ID,
        "--corp-secret",
        DEV_CORP_SECRET,
        "--agent-id",
        str(DEV_AGENT_ID),
    ]


def wait_for_trees(procs: Processes, timeout: float) -> None:
    """Until each started process has its whole cluster, workers included."""
    deadline = time.monotonic() + timeout
    while True:
        sizes = []
        for proc in procs.started:
            try:
                sizes.append(1 + len(psutil.Process(proc.pid).children(recursive=True)))
            except psutil.NoSuchProcess:
                sizes.append(0)
        if all(size >= TREE for size in sizes):
            procs.watch()
            return
        if crashed := procs.crashed():
            raise Failed(f"process(es) {crashed} exited while starting")
        if time.monotonic() > deadline:
            raise Failed(f"processes not up after {timeout:.0f}s (tree sizes {sizes})")
        time.sleep(0.2)


def _make_high(conn: psycopg.Connection, count: int) -> set[str]:
    """Of the tasks just made, ``count`` become high priority (``inquiry_timeout``) and
    the others ``low``; returns the high ones' recipients."""
    conn.execute("UPDATE reminders_scheduledtask SET priority = 'low'")
    rows = conn.execute(
        "UPDATE reminders_scheduledtask SET priority = 'high', kind = 'inquiry_timeout' "
        "WHERE id IN (SELECT id FROM reminders_scheduledtask ORDER BY id LIMIT %s) "
        "RETURNING recipient",
        [count],
    ).fetchall()
    return {str(row[0]) for row in rows}


def _count(conn: psycopg.Connection, status: str) -> int:
    row = conn.execute("SELECT count(*) FROM reminders_taskrun WHERE status = %s", [status])
    found = row.fetchone()
    return int(found[0]) if found else 0


def _statuses(conn: psycopg.Connection) -> Counter[str]:
    rows = conn.execute("SELECT status, count(*) FROM reminders_taskrun GROUP BY status")
    return Counter({str(status): int(count) for status, count in rows.fetchall()})


def _cpu(process: psutil.Process) -> float:
    with contextlib.suppress(psutil.Error):
        times = process.cpu_times()
        return float(times.user + times.system)
    return 0.0


def raw_capacity(messages: int) -> dict[str, Capacity]:
    """The sandbox alone, one client process (this one), one kept-alive connection."""
    found = {}
    with sandbox_process(*sandbox_args()) as (process, url):
        measure(url, 200, process)  # warm-up: imports, first connection
        for client in ("http.client", "requests"):
            found[client] = measure(url, messages, process, client=client)
    return found


# Report ----------------------------------------------------------------------------------


def checks(outcomes: dict[str, Outcome]) -> list[Check]:
    found = []
    if accuracy := outcomes.get("accuracy"):
        bound = accuracy.rate + accuracy.burst
        busiest = accuracy.busiest()
        found.append(
            Check(
                "accuracy",
                "busiest 1 s window of deliveries",
                f"{busiest}",
                f"<= R + burst = {bound:g}",
                busiest <= bound,
                _by(busiest - bound, "over") if busiest > bound else "",
            )
        )
        found.append(
            Check(
                "accuracy",
                "paced rate while a backlog exists, (n - burst) / (last - first)",
                f"{accuracy.steady:.1f}/s",
                f">= 0.95 R = {0.95 * accuracy.rate:g}/s",
                accuracy.steady >= 0.95 * accuracy.rate,
            )
        )
    if saturation := outcomes.get("saturation"):
        ideal = saturation.n / saturation.rate
        found.append(
            Check(
                "saturation",
                "first to last delivery",
                f"{saturation.first_to_last:.2f} s",
                f"<= 1.10 x {ideal:g} s = {1.1 * ideal:.1f} s",
                saturation.first_to_last <= 1.1 * ideal,
            )
        )
        found.append(
            Check(
                "saturation",
                "45009 replies",
                f"{saturation.throttled}",
                "0",
                saturation.throttled == 0,
            )
        )
    if priority := outcomes.get("priority"):
        found += _priority_checks(priority)
    if headroom := outcomes.get("headroom"):
        target = HEADROOM_TARGET
        found.append(
            Check(
                "headroom",
                "end-to-end rate, due to last delivery",
                f"{headroom.end_to_end:.0f}/s",
                f">= 2 x 10,000/min = {target}/s",
                headroom.end_to_end >= target,
                f"{headroom.end_to_end / target - 1:+.0%} vs target",
            )
        )
    for label, outcome in outcomes.items():
        clean = (
            outcome.extra_deliveries == 0
            and len(outcome.times) == outcome.n
            and outcome.statuses == Counter({"sent": outcome.n})
            and set(outcome.attempts) == {1}
        )
        found.append(
            Check(
                label,
                "each delivered once, sent on attempt 1",
                f"{len(outcome.times)} delivered, {outcome.extra_deliveries} extra, "
                f"attempts {dict(outcome.attempts)}",
                f"{outcome.n} once each, attempts {{1: {outcome.n}}}",
                clean,
            )
        )
    return found


def _priority_checks(o: Outcome) -> list[Check]:
    """High runs due mid-backlog: their delay after due; the bulk drain against the
    ideal at the whole rate (the shares lend each other their idle slots)."""
    delays = o.high_delays or [math.inf]
    p50 = delays[len(delays) // 2]
    bulk = len(o.bulk_times)
    ideal = bulk / o.rate
    return [
        Check(
            "priority",
            f"{len(o.high_delays)} high runs: delivery after due, p50 / max",
            f"{p50:.2f} / {max(delays):.2f} s",
            "max <= 1.5 s",
            max(delays) <= 1.5,
        ),
        Check(
            "priority",
            f"{bulk} low runs: first to last delivery",
            f"{o.bulk_drain:.2f} s",
            f"<= 1.10 x {ideal:g} s (n / R)",
            o.bulk_drain <= 1.1 * ideal,
            f"{o.bulk_drain / ideal:.2f} x the ideal, high share {o.share:g}",
        ),
    ]


def _by(amount: float, word: str) -> str:
    return f"{amount:g} {word}"


def report(
    outcomes: dict[str, Outcome],
    capacity: dict[str, Capacity],
    command: str,
    environment: list[tuple[str, str]],
) -> str:
    cores = os.cpu_count() or 1
    lines = [
        "### Rate limits: real processes, the WeCom sandbox as a process, PostgreSQL",
        "",
        "| scenario | messages | processes x workers | WECOM_RATE_LIMIT (burst) "
        "| sandbox limit | due to last s | first to last s | msgs/s end to end "
        "| paced msgs/s | busiest 1 s | 45009 "
        "| CPU ms/msg: ours + PG + sandbox | CPUs busy | load avg at start |",
        "|---|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for o in outcomes.values():
        limit = f"{o.rate:g}/s ({o.burst})" if o.rate else "none"
        box = f"{o.sandbox_rate:g}/s (burst {o.sandbox_rate:g})" if o.sandbox_rate else "none"
        lines.append(
            f"| {o.label} | {o.n} | {o.processes} x {_workers()} | {limit} | {box} "
            f"| {o.due_to_last:.2f} | {o.first_to_last:.2f} | {o.end_to_end:.0f} "
            f"| {o.steady:.1f} | {o.busiest()} at +{o.busiest_at():.1f} s "
            f"| {o.throttled} "
            f"| {o.cpu / o.n * 1e3:.1f} + {o.pg_cpu / o.n * 1e3:.1f} + "
            f"{o.sandbox_cpu / o.n * 1e3:.1f} | {o.busy:.0%} of {cores} "
            f"| {', '.join(f'{x:.2f}' for x in o.load)} |"
        )
    lines += ["", "| check | measured | target | |", "|---|---:|---|---|"]
    for c in checks(outcomes):
        verdict = "met" if c.met else "**MISSED**"
        note = f" ({c.note})" if c.note else ""
        lines.append(f"| {c.scenario}: {c.what} | {c.measured} | {c.target} | {verdict}{note} |")
    if capacity:
        lines += [
            "",
            "Sandbox raw capacity in the same run (one client process, one kept-alive "
            "connection, no limit):",
            "",
            "| client | sends/s | reply p50 / p99 ms | sandbox CPU us/send |",
            "|---|---:|---:|---:|",
        ]
        for name, cap in capacity.items():
            lines.append(
                f"| {name} | {cap.per_second:,.0f} | {cap.percentile(0.5) * 1e3:.2f} / "
                f"{cap.percentile(0.99) * 1e3:.2f} | {cap.server_cpu / cap.messages * 1e6:.0f} |"
            )
    lines += [
        "",
        "- *due to last*: from the `UPDATE` that made every task due (processes already "
        "up) to the sandbox's last delivery; *msgs/s end to end* = messages / that.",
        "- *paced*: `(n - burst) / (last - first delivery)`; an exact token bucket at R "
        "gives exactly R (the unlimited scenario uses n - 1).",
        "- *busiest 1 s*: most sandbox delivery stamps in any window [t, t + 1 s).",
        "- *CPU*: user+system seconds during the scenario (due to last delivery) of the "
        "run_reminders trees, the PostgreSQL backends of the scenario's database and the "
        "sandbox process; *CPUs busy*: the whole machine, anyone's work.",
        "",
        "| environment | |",
        "|---|---|",
        *[f"| {k} | {v} |" for k, v in environment],
        "",
        "Reproduce:",
        "",
        "```",
        command,
        "```",
    ]
    return "\n".join(lines)


def _workers() -> str:
    return os.environ.get("Q_WORKERS", "2")


def environment(dbs: Databases) -> list[tuple[str, str]]:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return [
        ("CPU cores (logical/physical)", f"{os.cpu_count()}/{psutil.cpu_count(logical=False)}"),
        ("PostgreSQL", dbs.server_version()),
        ("Python", sys.version.split()[0]),
        ("Code", code_version()),
        ("Load average at start (1/5/15 min)", load),
        ("Busiest processes at start (1 s sample, % of one CPU)", busiest_processes()),
    ]


def busiest_processes(top: int = 4) -> str:
    """What else was running: the processes that used the most CPU over one second."""
    procs = list(psutil.process_iter(["name"]))
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.cpu_percent()
    time.sleep(1.0)
    used = []
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            used.append((proc.cpu_percent(), proc.info["name"]))
    used.sort(reverse=True)
    return ", ".join(f"{name} {percent:.0f}%" for percent, name in used[:top] if percent >= 1) or (
        "none above 1%"
    )


def print_profiles(outcomes: dict[str, Outcome]) -> None:
    from benchmarks.profile_summary import summarize

    paths = [
        path
        for o in outcomes.values()
        if o.profile is not None
        for path in (o.profile, o.profile.with_name("sandbox.collapsed.txt"))
    ]
    if not paths:
        return
    print("\n### py-spy, first run_reminders tree and the sandbox\n\n```")
    for path in paths:
        print(summarize(path, top=20) if path.exists() else f"{path}: py-spy wrote nothing")
    print("```")
    log(f"collapsed stacks kept in {paths[0].parent}")


# Main ------------------------------------------------------------------------------------


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--rate", type=float, default=100.0, help="R of the accuracy scenario")
    parser.add_argument("--processes", type=int, default=3, help="accuracy and saturation")
    parser.add_argument("--accuracy-tasks", type=int, default=1500)
    parser.add_argument("--saturation-tasks", type=int, default=2000)
    parser.add_argument("--headroom-tasks", type=int, default=4000)
    parser.add_argument("--priority-tasks", type=int, default=2000, help="low runs")
    parser.add_argument("--priority-high", type=int, default=5, help="high runs")
    parser.add_argument("--high-share", type=float, default=0.2, help="REMINDERS_HIGH_RATE_SHARE")
    parser.add_argument("--headroom-processes", type=int, default=2)
    parser.add_argument(
        "--capacity-messages", type=int, default=3000, help="per client, sandbox raw capacity"
    )
    parser.add_argument(
        "--only",
        default="accuracy,saturation,priority,headroom",
        help="the scenarios to run, comma separated",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=int(os.environ.get("Q_WORKERS", "2")),
        help="django-q2 workers per process (Q_WORKERS)",
    )
    parser.add_argument("--timeout", type=float, default=120.0, help="per scenario, seconds")
    parser.add_argument(
        "--rate-cache",
        default="",
        help="keep the rate limits in this shared cache (e.g. redis://127.0.0.1:6379/0) "
        "instead of the database",
    )
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        help="sample the first process tree and the sandbox of the headroom scenario with "
        "py-spy for this many seconds",
    )
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    os.environ["Q_WORKERS"] = str(args.workers)
    compile_sources()
    url = os.environ.get("DATABASE_URL", DEFAULT_URL)
    command = " ".join(
        [f"DATABASE_URL={shlex.quote(url)}", ".venv/bin/python", "benchmarks/ratelimit.py"]
        + [shlex.quote(a) for a in argv]
    )
    if not argv:
        command = f"make bench   # runs, after throughput.py: {command}"
    only = {s.strip() for s in args.only.split(",") if s.strip()}

    def interrupted(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    work = Path(tempfile.mkdtemp(prefix="bench-ratelimit-"))
    dbs = Databases(url)
    outcomes: dict[str, Outcome] = {}
    capacity: dict[str, Capacity] = {}
    env_rows: list[tuple[str, str]] = []
    keep_work = bool(args.profile)
    try:
        env_rows = environment(dbs)
        template = dbs.migrated("rl_template", "benchmarks.settings")  # no channel to check
        env_rows.append(("Rate limits kept in", args.rate_cache or "the database"))
        bench = Bench(
            dbs, template, work, args.workers, args.timeout, args.profile, args.rate_cache
        )
        plan: list[tuple[str, Callable[[], Outcome]]] = [
            (
                "accuracy",
                lambda: bench.run(
                    "accuracy",
                    args.accuracy_tasks,
                    args.processes,
                    args.rate,
                    share=args.high_share,
                ),
            ),
            (
                "saturation",
                lambda: bench.run(
                    "saturation",
                    args.saturation_tasks,
                    args.processes,
                    100.0,
                    sandbox_rate=100.0,
                    share=args.high_share,
                ),
            ),
            (
                "priority",
                lambda: bench.run(
                    "priority",
                    args.priority_tasks,
                    args.processes,
                    100.0,
                    sandbox_rate=100.0,
                    high=args.priority_high,
                    share=args.high_share,
                ),
            ),
            (
                "headroom",
                lambda: bench.run(
                    "headroom",
                    args.headroom_tasks,
                    args.headroom_processes,
                    0.0,
                    profile=bool(args.profile),
                ),
            ),
        ]
        for label, scenario in plan:
            if label in only:
                outcomes[label] = scenario()
        if "headroom" in only:
            log("sandbox raw capacity")
            capacity = raw_capacity(args.capacity_messages)
        print(report(outcomes, capacity, command, env_rows))
        print_profiles(outcomes)
        missed = [c for c in checks(outcomes) if not c.met]
        for c in missed:
            log(f"MISSED: {c.scenario}: {c.what}: {c.measured}, target {c.target}")
        return 0
    except KeyboardInterrupt:
        log("interrupted; stopping what was started and dropping the databases")
        return 130
    except Failed as exc:
        keep_work = True
        log(f"FAILED: {exc} (logs in {work})")
        if outcomes:
            print(report(outcomes, capacity, command, env_rows))
        return 1
    finally:
        dbs.drop_all()
        if not keep_work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
