"""The channel's rate limit, shared by real ``run_reminders`` processes, against the
WeCom sandbox running as a process of its own, over HTTP.

The sandbox enforces its per-second limit with a token bucket (burst: one second's
worth) and answers 45009 beyond it, as WeCom does; its ledger stamps each delivery with
the time it took it, so the pace is judged from the provider's side.

These tests found two engine defects, since fixed, and fail if they come back: workers
that fell behind slots reserved for a whole job sent the late ones back to back (the
busiest second went over R + burst), and concurrent ``ratelimit.reserve`` calls
deadlocked on MariaDB.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import TypeVar

import pytest
from django.db import connection
from django.utils import timezone

from benchmarks.rates import backlog_rate, busiest_window
from reminders.models import RateBucket, ScheduledTask, TaskRun
from tests.support.ci import skip_cache_store_off_postgresql
from tests.support.processes import (
    TREE,
    ReminderProcess,
    run_statuses,
    wait_exit,
    wait_until,
)
from tests.support.sandbox import AGENT_ID, CORP_ID, SandboxProcess, sandbox_process, wecom_settings
from wecom_sandbox import LedgerEntry

pytestmark = pytest.mark.processes

SEND = "message/send"
FREQUENCY_LIMIT = 45009
CHANNEL_BUCKET = f"wecom:{CORP_ID}:{AGENT_ID}:channel"
MAX_WAIT = 2.0  # REMINDERS_RATE_MAX_WAIT: how far ahead a worker holds reserved slots

T = TypeVar("T")


@pytest.fixture
def sandbox_at() -> Iterator[Callable[[float | None], SandboxProcess]]:
    """Factory: ``sandbox_at(40)`` is a sandbox process refusing more than 40 a second
    (``None``: no limit), stopped by pid after the test."""
    with contextlib.ExitStack() as stack:

        def start(rate: float | None) -> SandboxProcess:
            limit = ("--rate-limit", str(rate)) if rate else ()
            return stack.enter_context(sandbox_process("--verbosity", "0", *limit))

        yield start


def start_processes(
    spawn: Callable[..., ReminderProcess],
    box: SandboxProcess,
    rate: float,
    count: int = 3,
    cache_prefix: str = "",
) -> list[ReminderProcess]:
    """``count`` processes sending through ``box`` at ``rate``; with ``cache_prefix`` they
    keep the rate limits in Redis (under that prefix) instead of the database."""
    env = {
        **wecom_settings(box.base_url),
        "TEST_RATE_CACHE_PREFIX": cache_prefix,
        "WECOM_RATE_LIMIT": str(rate),
        "REMINDERS_RATE_MAX_WAIT": str(MAX_WAIT),
        # The channel's limiter at R itself, no share kept for high priority runs (their
        # share is tested in tests/reminders/test_rate_share.py and below).
        "REMINDERS_HIGH_RATE_SHARE": "0",
        # Small claims spread the burst over all three processes.
        "REMINDERS_MAX_IN_FLIGHT": "60",
        "REMINDERS_CLAIM_BATCH": "30",
    }
    processes = [spawn(f"p{n}", **env) for n in range(count)]
    # Each whole tree (TREE) up before work is due.
    wait_until(
        lambda: all(len(p.tree()) >= TREE for p in processes),
        timeout=60,
        what="three processes with their clusters",
        processes=processes,
    )
    return processes


def stop(process: ReminderProcess) -> int:
    os.kill(process.pid, signal.SIGTERM)
    return wait_exit(process, timeout=30)


def wait_for(
    predicate: Callable[[], T],
    processes: list[ReminderProcess],
    box: SandboxProcess,
    what: str,
    timeout: float,
) -> T:
    """``wait_until``, failing at once if a worker's job died of a database deadlock."""

    def check() -> T:
        deadlocked = [p.pid for p in processes if "Deadlock found" in p.stderr(tail=200_000)]
        assert not deadlocked, f"a job died of a deadlock in process {deadlocked}"
        return predicate()

    found = wait_until(
        check,
        timeout=timeout,
        what=what,
        processes=processes,
        explain=lambda: f"runs: {dict(run_statuses())}; sandbox: {box.client.stats()}",
    )
    return found


def sends(box: SandboxProcess) -> list[LedgerEntry]:
    return [e for e in box.client.ledger() if e.endpoint == SEND]


def delivered_to(entries: list[LedgerEntry]) -> Counter[str]:
    return Counter(user for e in entries if e.delivered for user in e.delivered_to)


def all_sent(count: int) -> Callable[[], bool]:
    return lambda: TaskRun.objects.filter(status=TaskRun.Status.SENT).count() == count


@pytest.mark.parametrize("store", ["database", "cache"])
def test_three_processes__pace_a_sandbox_limited_to_r_without_a_single_45009(
    spawn, due_tasks, sandbox_at, store
):
    skip_cache_store_off_postgresql(store)
    rate = 40
    burst = rate // 10  # the channel's default burst: a tenth of a second's worth
    # 8 s of backlog on a server; 4 s on SQLite, where the three share one writer.
    count = 320 if connection.vendor != "sqlite" else 160
    box = sandbox_at(rate)
    prefix = f"test-{uuid.uuid4().hex}" if store == "cache" else ""
    processes = start_processes(spawn, box, rate, cache_prefix=prefix)

    tasks = due_tasks(count, "wecom")
    wait_for(all_sent(count), processes, box, f"{count} runs sent", timeout=60 + 3 * count / rate)
    for process in processes:
        assert stop(process) == 0, process.describe()

    entries = sends(box)
    assert [e for e in entries if e.errcode == FREQUENCY_LIMIT] == []
    assert {e.status for e in entries} == {"delivered"}, Counter(e.status for e in entries)
    assert delivered_to(entries) == Counter(task.recipient for task in tasks)
    assert set(TaskRun.objects.values_list("status", "attempts")) == {("sent", 1)}
    # The buckets were where the processes were told to keep them.
    assert RateBucket.objects.filter(name=CHANNEL_BUCKET).exists() == (store == "database")
    times = [e.at for e in entries]
    busiest, at = busiest_window(times)
    paced = backlog_rate(times, burst)
    print(
        f"{count} at {rate}/s (burst {burst}) by 3 processes: busiest second {busiest} "
        f"(+{at - min(times):.1f} s), {paced:.1f}/s first to last ({max(times) - min(times):.2f} s)"
    )
    # The benchmark holds the limiter to 0.95 R; a test on a loaded machine, to 0.9 R.
    assert paced >= 0.9 * rate
    # R + burst holds for the slots the limiter hands out (tests/reminders/test_ratelimit.py).
    # Measured at the provider, the busiest window starts at the first delivery, which
    # leaves a little after its slot: every 1 / R it is late lets one more slot into the
    # window. At start-up, three processes at once on two cores, that was seen to add
    # up to two messages (no 45009 all the same: the sandbox's own limit is the judge).
    assert busiest <= rate + burst + 2


def test_a_45009__pauses_the_channel_for_every_process_and_costs_no_attempt(
    spawn, due_tasks, sandbox_at
):
    rate = 20
    count = 100
    box = sandbox_at(None)
    box.client.control(errcodes=[FREQUENCY_LIMIT])  # WeCom says "too fast" to the first send
    processes = start_processes(spawn, box, rate)

    tasks = due_tasks(count, "wecom")
    bucket = wait_for(
        RateBucket.objects.filter(name=CHANNEL_BUCKET, paused_until__isnull=False).first,
        processes,
        box,
        "the channel to be paused",
        timeout=60,
    )
    assert bucket.paused_until is not None
    assert bucket.paused_until > timezone.now() + timedelta(seconds=50)  # 60 s for 45009

    # Slots other workers reserved before the pause still go out (each holds at most
    # MAX_WAIT of them); then nobody sends, though the rate would allow 20 a second.
    def all_waiting() -> bool:
        unsent = TaskRun.objects.exclude(status=TaskRun.Status.SENT)
        return (
            unsent.exists()
            and not unsent.exclude(
                status=TaskRun.Status.SCHEDULED, error_code="rate_limited", attempts=0
            ).exists()
        )

    wait_for(all_waiting, processes, box, "every unsent run to wait for the pause", timeout=30)
    throttled = [e for e in sends(box) if e.errcode == FREQUENCY_LIMIT]
    assert len(throttled) == 1
    time.sleep(max(0.0, throttled[0].at + MAX_WAIT + 1.5 - time.time()))
    before = sends(box)
    time.sleep(3.0)
    after = sends(box)
    assert after == before, f"{len(after) - len(before)} sends during the pause"
    late = [e.at - throttled[0].at for e in before if e.at > throttled[0].at]
    assert max(late, default=0.0) <= MAX_WAIT + 1.0, late
    waiting = list(TaskRun.objects.exclude(status=TaskRun.Status.SENT))
    assert len(waiting) == count - len(delivered_to(before)) > 0
    resume = bucket.paused_until - timedelta(seconds=1)
    assert all(run.next_attempt_at and run.next_attempt_at >= resume for run in waiting)
    print(
        f"paused by one 45009; {len(late)} reserved sends went out within "
        f"{max(late, default=0.0):.2f} s after it, then none for 3 s; {len(waiting)} waiting"
    )

    # The minute passes: the pause and the runs' wait end together, as on the clock.
    shift = bucket.paused_until - timezone.now()
    RateBucket.objects.filter(name=CHANNEL_BUCKET).update(paused_until=timezone.now())
    for run in waiting:
        assert run.next_attempt_at is not None
        TaskRun.objects.filter(pk=run.pk).update(next_attempt_at=run.next_attempt_at - shift)
    wait_for(all_sent(count), processes, box, "the rest to be sent after the pause", timeout=60)
    for process in processes:
        assert stop(process) == 0, process.describe()

    entries = sends(box)
    assert len([e for e in entries if e.errcode == FREQUENCY_LIMIT]) == 1
    assert delivered_to(entries) == Counter(task.recipient for task in tasks)
    # Throttling is not failure: every run was sent on its first and only attempt.
    assert set(TaskRun.objects.values_list("status", "attempts")) == {("sent", 1)}
    assert not ScheduledTask.objects.filter(retry_count__gt=0).exists()
