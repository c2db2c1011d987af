"""From a click on a card to the card's update, end to end: the WeCom sandbox posts the
signed callback to the app, a scheduler has the card updated through
``update_template_card``, and the sandbox takes the update.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/reminders \\
        .venv/bin/python benchmarks/card_latency.py [--cards 100] [--burst 100]

Real processes on PostgreSQL (a fresh database cloned from a migrated template, as in
``throughput.py``, whose database and process helpers this reuses): ``manage.py
runserver`` serving the callback, one ``manage.py run_reminders`` (scheduler loop and
django-q2 cluster), and the sandbox in this process, its clicks posted to the server.
Both ends of the latency are the sandbox's own clock: when it posted the click, and when
it took the update, so nothing of the benchmark's polling is counted.

* one at a time: ``--cards`` follow-up cards are delivered, then each is clicked
  ("Done") only once the one before was updated: the latency a person sees.
* burst: ``--burst`` cards clicked at once (a thread each): when the last update came.

Every process started is stopped by pid, also on failure.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import socket
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import FrameType
from typing import Any

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
from wecom_sandbox import (  # noqa: E402
    DEV_AGENT_ID,
    DEV_CORP_ID,
    DEV_CORP_SECRET,
    WeComSandbox,
)

SETTINGS = "benchmarks.settings_wecom"
TOKEN = "bench-callback-token"  # noqa: S105 - a benchmark's own, never a real secret
KEY = "benchCallbackKey0123456789abcdefghijklmnopq"
SCHEDULE = """
from django.utils import timezone
from reminders import api
now = timezone.now()
for n in range({n}):
    api.schedule("follow_up", f"bench-{{n:05d}}", at=now, key=f"card:{{n}}",
                 payload={{"customer": f"Customer {{n}}", "subject": "Quote"}})
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def wait_for(what: str, check: Any, timeout: float, procs: Processes) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if crashed := procs.crashed():
            raise Failed(f"process(es) {crashed} exited while waiting for {what}")
        if time.monotonic() > deadline:
            raise Failed(f"{what}: not after {timeout:.0f}s")
        time.sleep(0.05)


def updated_at(box: WeComSandbox, entry_id: int) -> float | None:
    [entry] = [e for e in box.ledger(entry_id - 1) if e.id == entry_id]
    return float(entry.card_update["at"]) if entry.card_update else None


def measure(args: argparse.Namespace, dbs: Databases, work: Path) -> dict[str, Any]:
    template = dbs.migrated("cards_template", "benchmarks.settings")
    db = dbs.create("cards", template=template)
    port = free_port()
    box = WeComSandbox(
        callback_url=f"http://127.0.0.1:{port}/reminders/wecom/callback",
        callback_token=TOKEN,
        callback_aes_key=KEY,
    )
    base = box.start()
    procs = Processes(work)
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": SETTINGS,
        "DATABASE_URL": dbs.url(db),
        "LOG_LEVEL": "WARNING",
        "WECOM_API_BASE": base,
        "WECOM_CORP_ID": DEV_CORP_ID,
        "WECOM_CORP_SECRET": DEV_CORP_SECRET,
        "WECOM_AGENT_ID": str(DEV_AGENT_ID),
        "WECOM_RATE_LIMIT": "0",
        "WECOM_CALLBACK_TOKEN": TOKEN,
        "WECOM_CALLBACK_AES_KEY": KEY,
    }
    total = args.cards + args.burst
    try:
        procs.start("run_reminders", ["run_reminders"], env)
        wait_for_trees(procs, 60)
        procs.start("runserver", ["runserver", f"127.0.0.1:{port}", "--noreload"], env)
        wait_for("the callback's server", lambda: listening(port), 60, procs)
        filled = _run([PYTHON, "manage.py", "shell", "-c", SCHEDULE.format(n=total)], env, True)
        if filled.returncode:
            raise Failed(f"scheduling failed:\n{filled.stdout}{filled.stderr}")
        wait_for("the cards delivered", lambda: len(box.delivered()) >= total, 120, procs)
        cards = sorted(e.id for e in box.delivered() if e.msgtype == "template_card")
        one_by_one = []
        for entry_id in cards[: args.cards]:
            click = box.click(entry_id, "done")
            if click["status"] != 200:
                raise Failed(f"the callback answered {click['status']}: {click['body']}")
            wait_for("a card's update", lambda e=entry_id: updated_at(box, e), 30, procs)
            one_by_one.append((updated_at(box, entry_id) or 0) - click["at"])
        burst = cards[args.cards :]
        with ThreadPoolExecutor(max_workers=32) as pool:
            clicks = list(pool.map(lambda e: box.click(e, "done"), burst))
        answers = [c["elapsed_ms"] for c in clicks if c["status"] == 200]
        first = min(c["at"] for c in clicks) if clicks else 0.0
        wait_for("the burst's updates", lambda: all(updated_at(box, e) for e in burst), 120, procs)
        last = max((updated_at(box, e) or 0) for e in burst) if burst else 0.0
        return {
            "one_by_one": one_by_one,
            "burst": len(burst),
            "burst_answered": len(answers),
            "burst_seconds": last - first,
            "burst_answer_ms": answers,
        }
    except BaseException:
        show_log_tails(work)
        raise
    finally:
        procs.stop()
        box.stop()
        dbs.drop(db)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def report(result: dict[str, Any], command: str) -> str:
    latencies = sorted(result["one_by_one"])
    p95 = latencies[max(0, round(0.95 * len(latencies)) - 1)] if latencies else 0.0
    answers = sorted(result["burst_answer_ms"])
    lines = [
        f"Click to card update, {code_version()}; reproduce with: {command}",
        "",
        "| measure | value |",
        "|---|---|",
        f"| one at a time, {len(latencies)} cards: median | {ms(statistics.median(latencies))} |",
        f"| one at a time: 95th percentile | {ms(p95)} |",
        f"| one at a time: slowest | {ms(latencies[-1])} |",
        f"| burst of {result['burst']} clicks: last card updated after | "
        f"{ms(result['burst_seconds'])} |",
        f"| burst: callback answered (of {result['burst']}) | {result['burst_answered']} |",
        f"| burst: callback's answer, median / slowest | "
        f"{statistics.median(answers):.0f} / {answers[-1]:.0f} ms |",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cards", type=int, default=100, help="clicked one at a time")
    parser.add_argument("--burst", type=int, default=100, help="clicked at once")
    args = parser.parse_args(argv)
    url = os.environ.get("DATABASE_URL", DEFAULT_URL)
    command = " ".join(
        [f"DATABASE_URL={shlex.quote(url)}", ".venv/bin/python", "benchmarks/card_latency.py"]
        + [shlex.quote(a) for a in argv]
    )

    def interrupted(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", SETTINGS)
    import django

    django.setup()  # the sandbox posts clicks with the app's callback crypto
    dbs = Databases(url)
    try:
        result = measure(args, dbs, Path(tempfile.mkdtemp(prefix="bench-cards-")))
    except Failed as exc:
        log(f"failed: {exc}")
        return 1
    finally:
        dbs.drop_all()
    print(report(result, command))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
