"""The WeCom sandbox's own capacity: app sends a second from one client over one connection.

    .venv/bin/python benchmarks/sandbox_capacity.py [--messages 5000] [--rounds 3]

Starts ``manage.py wecom_sandbox --port 0`` as a separate process (its member limits on,
no per-second limit), fetches a token, then sends ``--messages`` text messages with one
``requests.Session`` (kept alive), to 1,000 different members so that no member limit
is reached. Prints sends/s for each round, reply latency percentiles, and the CPU the
sandbox process spent per send (the rate it could reach if the client cost nothing).
Every send must answer errcode 0 and the sandbox's count of deliveries must match.

Other benchmarks import ``sandbox_process`` and ``measure`` to show the sandbox's raw
capacity beside their end-to-end figures, measured in the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import requests

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ops.sandbox import DEV_AGENT_ID, DEV_CORP_ID, DEV_CORP_SECRET  # noqa: E402

MEMBERS = 1000


@dataclass(frozen=True)
class Capacity:
    messages: int
    seconds: float
    latencies: list[float]
    server_cpu: float

    @property
    def per_second(self) -> float:
        return self.messages / self.seconds

    @property
    def server_limit(self) -> float:
        """Sends a second the sandbox could take were the client free: its CPU per send."""
        return self.messages / self.server_cpu if self.server_cpu else float("inf")

    def percentile(self, fraction: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


@contextlib.contextmanager
def sandbox_process(
    *args: str, startup_timeout: float = 30.0
) -> Iterator[tuple[psutil.Process, str]]:
    """A ``manage.py wecom_sandbox --port 0 ARGS`` process and its base URL; stopped after."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE", "config.settings"),
    }
    popen = subprocess.Popen(
        [sys.executable, "manage.py", "wecom_sandbox", "--port", "0", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert popen.stdout is not None
        deadline = time.monotonic() + startup_timeout
        line = popen.stdout.readline()
        if not line.startswith("WECOM_API_BASE=") or time.monotonic() > deadline:
            raise RuntimeError(f"the sandbox did not start: {line!r}")
        yield psutil.Process(popen.pid), line.strip().partition("=")[2]
    finally:
        if popen.poll() is None:
            popen.send_signal(signal.SIGTERM)
            try:
                popen.wait(10)
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait()
        if popen.stdout is not None:
            popen.stdout.close()


def token(session: requests.Session, base_url: str) -> str:
    reply = session.get(
        f"{base_url}/cgi-bin/gettoken",
        params={"corpid": DEV_CORP_ID, "corpsecret": DEV_CORP_SECRET},
        timeout=10,
    ).json()
    if reply.get("errcode") != 0:
        raise RuntimeError(f"gettoken failed: errcode {reply.get('errcode')}")
    return str(reply["access_token"])


def measure(base_url: str, messages: int, process: psutil.Process | None = None) -> Capacity:
    """Send ``messages`` app messages over one kept-alive connection; all must pass."""
    with requests.Session() as session:
        url = f"{base_url}/cgi-bin/message/send?access_token={token(session, base_url)}"
        # New bodies every run: the duplicate check would suppress a repeat of an earlier one.
        run = secrets.token_hex(4)
        cpu_before = _cpu(process)
        latencies = []
        started = time.perf_counter()
        for i in range(messages):
            body = {
                "touser": f"member{i % MEMBERS}",
                "msgtype": "text",
                "agentid": DEV_AGENT_ID,
                "text": {"content": f"Reminder {i} of run {run}: call the customer back."},
                "enable_duplicate_check": 1,
                "duplicate_check_interval": 1800,
            }
            sent = time.perf_counter()
            reply = session.post(url, json=body, timeout=10).json()
            latencies.append(time.perf_counter() - sent)
            if reply["errcode"] != 0:
                raise RuntimeError(f"send {i} answered errcode {reply['errcode']}")
        seconds = time.perf_counter() - started
        return Capacity(messages, seconds, latencies, _cpu(process) - cpu_before)


def _cpu(process: psutil.Process | None) -> float:
    if process is None:
        return 0.0
    times = process.cpu_times()
    return float(times.user + times.system)


def delivered(base_url: str) -> int:
    return int(requests.get(f"{base_url}/sandbox/stats", timeout=10).json().get("delivered", 0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--messages", type=int, default=5000, help="sends per round (default: %(default)s)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds (default: %(default)s)")
    options = parser.parse_args()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    )
    with sandbox_process("--verbosity", "0") as (process, base_url):
        measure(base_url, 200, process)  # warm-up: imports, first connection
        results = []
        for round_number in range(1, options.rounds + 1):
            result = measure(base_url, options.messages, process)
            results.append(result)
            print(
                f"round {round_number}: {result.messages} sends in {result.seconds:.2f} s = "
                f"{result.per_second:,.0f} sends/s; reply p50 "
                f"{result.percentile(0.5) * 1e3:.2f} ms, p99 "
                f"{result.percentile(0.99) * 1e3:.2f} ms; sandbox CPU "
                f"{result.server_cpu / result.messages * 1e6:.0f} us/send "
                f"(~{result.server_limit:,.0f} sends/s if the client were free)"
            )
        expected = 200 + options.messages * options.rounds
        count = delivered(base_url)
        if count != expected:
            sys.exit(f"the sandbox counted {count} deliveries, expected {expected}")
    best = max(r.per_second for r in results)
    worst = min(r.per_second for r in results)
    print(
        "sandbox capacity, one client process, one kept-alive connection: "
        f"{worst:,.0f}-{best:,.0f} sends/s"
    )


if __name__ == "__main__":
    main()
