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
import http.client
import json
import os
import platform
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil
import requests

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from wecom_sandbox import DEV_AGENT_ID, DEV_CORP_ID, DEV_CORP_SECRET  # noqa: E402

MEMBERS = 1000


@dataclass(frozen=True)
class Capacity:
    messages: int
    seconds: float
    latencies: list[float]
    server_cpu: float
    client_cpu: float

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
        # The read blocks: a sandbox that never prints its URL is killed, which ends it.
        timer = threading.Timer(startup_timeout, popen.kill)
        timer.start()
        try:
            line = popen.stdout.readline()
        finally:
            timer.cancel()
        if not line.startswith("WECOM_API_BASE="):
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


def measure(
    base_url: str,
    messages: int,
    process: psutil.Process | None = None,
    client: str = "requests",
    trust_env: bool = False,
) -> Capacity:
    """Send ``messages`` app messages over one kept-alive connection; all must pass.

    ``client="http.client"`` sends through the standard library's much cheaper client
    instead of ``requests``, to show what the sandbox takes when the client costs less.
    ``trust_env=True`` lets ``requests`` look for proxy settings in the environment on
    every request, which here costs more than the whole round trip.
    """
    with requests.Session() as session:
        session.trust_env = trust_env
        path = f"/cgi-bin/message/send?access_token={token(session, base_url)}"
        post = _poster(base_url, path, session, client)
        # New bodies every run: the duplicate check would suppress a repeat of an earlier one.
        run = secrets.token_hex(4)
        cpu_before = _cpu(process)
        client_before = time.process_time()
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
            reply = post(body)
            latencies.append(time.perf_counter() - sent)
            if reply["errcode"] != 0:
                raise RuntimeError(f"send {i} answered errcode {reply['errcode']}")
        seconds = time.perf_counter() - started
        server_cpu = _cpu(process) - cpu_before
        return Capacity(
            messages, seconds, latencies, server_cpu, time.process_time() - client_before
        )


def _poster(
    base_url: str, path: str, session: requests.Session, client: str
) -> Callable[[dict[str, Any]], Any]:
    if client == "requests":
        return lambda body: session.post(base_url + path, json=body, timeout=10).json()
    parts = urlsplit(base_url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    headers = {"Content-Type": "application/json"}

    def post(body: dict[str, Any]) -> Any:
        connection.request("POST", path, json.dumps(body).encode(), headers)
        return json.loads(connection.getresponse().read())

    return post


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
    parser.add_argument(
        "--client",
        choices=("requests", "http.client"),
        default="requests",
        help="the client library; http.client costs less and shows more of the sandbox's "
        "own capacity (default: %(default)s)",
    )
    parser.add_argument(
        "--trust-env",
        action="store_true",
        help="let requests read proxy settings from the environment on every send "
        "(its default; off here, as for a sender with a fixed API base)",
    )
    options = parser.parse_args()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, load average {os.getloadavg()[0]:.1f} at the start"
    )
    with sandbox_process("--verbosity", "0") as (process, base_url):
        measure(base_url, 200, process)  # warm-up: imports, first connection
        results = []
        for round_number in range(1, options.rounds + 1):
            result = measure(base_url, options.messages, process, options.client, options.trust_env)
            results.append(result)
            print(
                f"round {round_number}: {result.messages} sends in {result.seconds:.2f} s = "
                f"{result.per_second:,.0f} sends/s; reply p50 "
                f"{result.percentile(0.5) * 1e3:.2f} ms, p99 "
                f"{result.percentile(0.99) * 1e3:.2f} ms; sandbox CPU "
                f"{result.server_cpu / result.messages * 1e6:.0f} us/send "
                f"(~{result.server_limit:,.0f} sends/s if the client were free), client CPU "
                f"{result.client_cpu / result.messages * 1e6:.0f} us/send"
            )
        expected = 200 + options.messages * options.rounds
        count = delivered(base_url)
        if count != expected:
            sys.exit(f"the sandbox counted {count} deliveries, expected {expected}")
    best = max(r.per_second for r in results)
    worst = min(r.per_second for r in results)
    print(
        f"sandbox capacity, one {options.client} client process "
        f"(trust_env={options.trust_env}), one kept-alive connection: "
        f"{worst:,.0f}-{best:,.0f} sends/s"
    )


if __name__ == "__main__":
    main()
