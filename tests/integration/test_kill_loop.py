"""Crash after crash against a provider that fails at random: each message once, none lost.

Three real ``run_reminders`` processes send follow-ups through the ``wecom`` channel to a
WeCom sandbox process that answers some sends busy (-1) or HTTP 5xx, loses some replies
after delivering (the sender times out: the send is in doubt) and answers a few late.
Meanwhile the test SIGKILLs whole process trees, over and over, each replaced by a fresh
process. The sandbox's ledger is the truth: at the end every valid member has exactly one
delivered message, the invalid ones none, nothing is left mid-flight, the only failed
runs are the invalid members', and our ledger agrees with the sandbox's.

Every other kill strikes a process as soon as it holds a message between its send and
its record (``kill_loop.in_hand``), waiting at most ``TARGET_WAIT`` seconds for one; the
others strike a process at random.

``KILL_LOOP_SEED`` (environment) picks the faults and the kill times; the default is fixed.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from reminders.models import Priority, ScheduledTask, SendLog, TaskRun
from tests.support import kill_loop
from tests.support.processes import (
    TREE,
    ReminderProcess,
    freeze,
    kill_tree,
    ledger_statuses,
    run_statuses,
    wait_exit,
    wait_until,
)
from tests.support.sandbox import (
    SandboxProcess,
    assert_ledger_matches,
    wecom_settings,
)

pytestmark = kill_loop.MARKS

SEED = int(os.environ.get("KILL_LOOP_SEED", "20261203"))
VALID = [f"member{n:03d}" for n in range(300)]
INVALID = ["ghost1", "ghost2", "ghost3"]
ALL_RECIPIENTS_INVALID = "81013"
SPREAD = 40.0  # seconds over which the follow-ups fall due, while the kills go on
KILLS = 12
TARGET_WAIT = 3.0  # seconds a targeted kill waits for a process mid-send before it strikes anyway
UNFINISHED = [*TaskRun.WAITING, TaskRun.Status.QUEUED, TaskRun.Status.RUNNING]


@pytest.fixture
def faulty_sandbox() -> Iterator[SandboxProcess]:
    invalid = [f"--invalid-user={user}" for user in INVALID]
    with kill_loop.faulty_sandbox(SEED, *invalid) as box:
        yield box


def follow_ups(recipients: list[str], spread: float) -> list[ScheduledTask]:
    """One follow-up to each recipient, all with the CRM's same text, due over ``spread``
    seconds from now."""
    now = timezone.now()
    tasks = []
    for number, recipient in enumerate(recipients):
        at = now + timedelta(seconds=spread * number / len(recipients))
        task = ScheduledTask(
            kind="follow_up",
            recipient=recipient,
            run_at=at,
            timezone=settings.TIME_ZONE,
            channel="wecom",
            priority=Priority.NORMAL,
            payload={"content": "Call ACME back about the quote."},
        )
        task.plan_first_run(now)
        tasks.append(task)
    return ScheduledTask.objects.bulk_create(tasks, batch_size=500)


def explain(box: SandboxProcess) -> Callable[[], str]:
    def state() -> str:
        failed = Counter(
            TaskRun.objects.filter(status=TaskRun.Status.FAILED).values_list(
                "error_code", flat=True
            )
        )
        return (
            f"runs: {dict(run_statuses())}; failed by code: {dict(failed)}; "
            f"ledger: {dict(ledger_statuses())}; sandbox: {box.client.stats()}"
        )

    return state


@dataclass(frozen=True)
class Held:
    """What a killed process held when it died: runs claimed (queued), runs started, and
    of those the messages mid-send (their ledger key ``sending``)."""

    queued: int
    running: int
    sending: int


def kill_and_replace(
    victim: ReminderProcess, spawn: Callable[..., ReminderProcess], name: str, env: dict[str, str]
) -> tuple[ReminderProcess, Held]:
    """SIGKILL ``victim``'s whole tree (frozen first, so what it held is what it died with)
    and start a fresh process in its place; returns that process and what the dead held."""
    runs = TaskRun.objects.filter(lease_owner__in=kill_loop.owners(freeze(victim)))
    keys = list(runs.filter(status=TaskRun.Status.RUNNING).values_list("ledger_key", flat=True))
    held = Held(
        queued=runs.filter(status=TaskRun.Status.QUEUED).count(),
        running=len(keys),
        sending=SendLog.objects.filter(key__in=keys, status=SendLog.Status.SENDING).count(),
    )
    kill_tree(victim)
    return spawn(name, **env), held


def test_kill_loop__every_valid_member_gets_exactly_one_message(spawn, faulty_sandbox):
    box = faulty_sandbox
    rng = random.Random(SEED)
    env = {**wecom_settings(box.base_url), **kill_loop.ENGINE}
    processes = [spawn(f"p{n}", **env) for n in range(3)]
    wait_until(
        lambda: all(len(p.tree()) >= TREE for p in processes),
        timeout=60,
        what="three processes with their clusters",
        processes=processes,
    )
    started = time.monotonic()
    recipients = VALID + INVALID
    rng.shuffle(recipients)
    follow_ups(recipients, SPREAD)

    held_at_kills = []
    mid_send = SendLog.objects.filter(status=SendLog.Status.SENDING)
    for kill in range(KILLS):
        time.sleep(rng.uniform(0.5, 2 * SPREAD / KILLS - 0.5))
        slot = rng.randrange(len(processes))
        if kill % 2:
            found = kill_loop.in_hand(processes, mid_send, TARGET_WAIT)
            slot = slot if found is None else found
        processes[slot], held = kill_and_replace(
            processes[slot], spawn, f"p{slot}-after-kill{kill + 1}", env
        )
        held_at_kills.append(held)
    killed_at = time.monotonic() - started

    def all_finished() -> bool:
        runs = TaskRun.objects.all()
        return runs.count() == len(recipients) and not runs.filter(status__in=UNFINISHED).exists()

    wait_until(
        all_finished,
        timeout=60,
        what="every run to finish after the kills",
        processes=processes,
        explain=explain(box),
    )
    finished_at = time.monotonic() - started
    for process in processes:
        os.kill(process.pid, signal.SIGTERM)
    for process in processes:
        with contextlib.suppress(Exception):
            wait_exit(process, timeout=30)

    entries = box.client.ledger()
    delivered = Counter(user for e in entries if e.delivered for user in e.delivered_to)
    sends = Counter(e.status for e in entries if e.endpoint == "message/send")
    print(
        f"seed {SEED}: {KILLS} kills in {killed_at:.0f} s, all finished at {finished_at:.0f} s; "
        f"held at the kills (queued, running, sending): "
        f"{[(h.queued, h.running, h.sending) for h in held_at_kills]}; "
        f"sandbox sends {dict(sends)}, stats {box.client.stats()}; runs {dict(run_statuses())}"
    )
    # Else the kills proved nothing: at least one caught a message between send and record.
    assert any(h.sending for h in held_at_kills), held_at_kills
    assert {user: n for user, n in delivered.items() if n != 1} == {}
    assert set(delivered) == set(VALID)
    assert not SendLog.objects.filter(status=SendLog.Status.SENDING).exists()
    assert not TaskRun.objects.filter(
        status__in=[TaskRun.Status.RUNNING, TaskRun.Status.QUEUED]
    ).exists()
    outcomes = {
        task.recipient: (run.status, run.error_code)
        for task in ScheduledTask.objects.all()
        for run in task.runs.all()
    }
    invalid = dict.fromkeys(INVALID, ("failed", ALL_RECIPIENTS_INVALID))
    assert {u: outcomes[u] for u in INVALID} == invalid
    assert {u: o for u, o in outcomes.items() if u in VALID and o[0] != "sent"} == {}
    assert_ledger_matches(box.client)
