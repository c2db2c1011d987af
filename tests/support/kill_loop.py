"""What the kill loops share (``tests/integration/test_kill_loop.py`` and
``test_digest_kill_loop.py``): where they run, the engine's settings that make a kill
cost seconds rather than minutes, a WeCom sandbox process that fails at random, and the
process to kill when a kill must catch a message between its send and its record
(``in_hand``): a kill at a random moment catches one only by luck, the less often the
faster the engine sends.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

import psutil
import pytest
from django.db import connection
from django.db.models import QuerySet

from reminders.models import SendLog
from tests.support.processes import ReminderProcess
from tests.support.sandbox import SandboxProcess, sandbox_process

# On the servers production runs on. SQLite (one host, one writer) has its kills tested
# by test_processes.py; the loops run there with SLOW_TESTS_ON_EVERY_RUN=1.
MARKS = [
    pytest.mark.processes,
    pytest.mark.skipif(
        connection.vendor == "sqlite" and not os.environ.get("SLOW_TESTS_ON_EVERY_RUN"),
        reason="the kill loop runs on PostgreSQL and MariaDB",
    ),
]

LATENCY = 0.15  # seconds before each reply
FAULTS = (
    "--busy-rate=0.05",
    "--http-error-rate=0.03",
    "--lost-reply-rate=0.02",
    "--slow-reply-rate=0.02",
    "--slow-reply-delay=0.5",
)
ENGINE = {
    # A dead process's runs are taken over once its lease ends (config/settings.py also
    # derives django-q2's task timeout from it); retries come fast; a lost reply times
    # out after a second.
    "REMINDERS_LEASE_SECONDS": "5",
    "REMINDERS_RETRY_DELAYS": "1,2,4,4,4",
    "WECOM_TIMEOUT": "1",
    "REMINDERS_RUNS_PER_JOB": "5",
    "REMINDERS_CLAIM_BATCH": "30",
    "REMINDERS_MAX_IN_FLIGHT": "60",
}


@contextmanager
def faulty_sandbox(seed: int, *args: str) -> Iterator[SandboxProcess]:
    """A sandbox process answering some sends busy or HTTP 5xx, losing some replies after
    delivering and answering a few late (``FAULTS``, drawn from ``seed``), every reply
    a network round trip late, so that kills find sends in flight."""
    with sandbox_process("--verbosity=0", f"--seed={seed}", *FAULTS, *args) as box:
        box.client.control(delay=LATENCY)
        yield box


def owners(tree: Iterable[psutil.Process]) -> set[str]:
    """The lease owners of the processes of ``tree`` (``engine.jobs.worker_id``)."""
    return {f"{socket.gethostname()}:{process.pid}" for process in tree}


def in_hand(
    processes: Sequence[ReminderProcess], sending: QuerySet[SendLog], timeout: float
) -> int | None:
    """The slot of a process holding one of ``sending`` (ledger rows ``sending``: sent,
    not yet recorded) as soon as one does; None if none does within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        held = set(sending.values_list("run__lease_owner", flat=True))
        if held:
            for slot, process in enumerate(processes):
                if held & owners(process.tree()):
                    return slot
        time.sleep(0.02)
    return None
