"""Work made due now by another process does not wait for the scheduler's tick: a real
``run_reminders`` process with a 30 s tick delivers a one-shot scheduled for now by
this process at once. On PostgreSQL only: elsewhere the tick is the bound."""

from __future__ import annotations

import os
import signal
import time

import pytest
from django.db import connection
from django.utils import timezone

from reminders import api
from tests.support.processes import (
    TREE,
    records,
    state,
    wait_exit,
    wait_until,
    wake_listeners,
)

pytestmark = pytest.mark.processes

TICK_SECONDS = 30


def test_a_one_shot_scheduled_for_now_is_delivered_without_waiting_for_the_tick(
    spawn, record_file, on_postgres
):
    if not on_postgres:
        pytest.skip(f"{connection.vendor} has no LISTEN/NOTIFY: the tick is the bound there")
    process = spawn("wake", REMINDERS_TICK_SECONDS=str(TICK_SECONDS))
    wait_until(
        lambda: len(process.tree()) >= TREE and len(wake_listeners()) == 1,
        timeout=60,
        what="the whole tree, its scheduler listening",
        processes=[process],
    )
    time.sleep(1.0)  # the tick that follows its first listen is over: it sleeps 30 s

    latencies = []
    for number in range(3):
        due = time.time()
        api.schedule("follow_up", f"now{number}", at=timezone.now(), channel="recording")
        found = wait_until(
            lambda number=number: [r for r in records(record_file) if r["to"] == f"now{number}"],
            timeout=10,
            what=f"one-shot {number} to be delivered",
            processes=[process],
            explain=lambda: state(record_file),
            interval=0.02,
        )
        latencies.append(found[0]["at"] - due)
        time.sleep(0.5)
    print("delivered after " + ", ".join(f"{took:.3f} s" for took in latencies))
    assert max(latencies) < 2.0, state(record_file)

    os.kill(process.pid, signal.SIGTERM)
    assert wait_exit(process, timeout=60) == 0, process.describe()
