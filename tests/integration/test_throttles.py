"""A throttle is a ceiling under two schedulers: two real ``run_reminders`` processes,
sending side by side (each send slowed, ``RECORD_DELAY``, so that one process's jobs
start while the other's are mid-send), never give a member more messages of a throttled
kind in an hour than its allowance, whatever lands in which process; the rest waits,
throttled, and nothing is lost. Deliveries are read from ``RecordingSender``'s file,
which both processes append to.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.utils import timezone

from reminders.models import THROTTLED_CODE, Priority, ScheduledTask, TaskRun
from tests.support import throttle_settings
from tests.support.processes import TREE, records, run_statuses, wait_until

pytestmark = pytest.mark.processes

MEMBERS = ["alice", "bob", "carol"]
EACH = 12  # follow-ups per member, due over a few seconds
ALLOWANCE = throttle_settings.REMINDERS_KINDS["follow_up"]["throttle_per_hour"]


@pytest.fixture
def throttled(settings: Any) -> None:
    settings.REMINDERS_KINDS = throttle_settings.REMINDERS_KINDS


def schedule_burst() -> None:
    """Each member's follow-ups due one after the other, 0.3 s apart, from 2 s on."""
    now = timezone.now()
    first = now + timedelta(seconds=2)
    tasks = []
    for number in range(EACH):
        for member in MEMBERS:
            task = ScheduledTask(
                kind="follow_up",
                recipient=member,
                run_at=first + timedelta(milliseconds=300 * number),
                timezone=settings.TIME_ZONE,
                channel="recording",
                priority=Priority.NORMAL,
                payload={"customer": f"{member}-{number:02d}"},
            )
            task.plan_first_run(now)
            tasks.append(task)
    ScheduledTask.objects.bulk_create(tasks)


def settled() -> bool:
    """Every run sent, folded into a digest that was, or waiting for the next hour."""
    runs = TaskRun.objects.filter(task__payload__has_key="customer")
    if runs.count() < EACH * len(MEMBERS):
        return False
    waiting = runs.filter(status__in=TaskRun.WAITING)
    return (
        not runs.exclude(status__in=[TaskRun.Status.SENT, *TaskRun.WAITING]).exists()
        and not waiting.exclude(error_code=THROTTLED_CODE).exists()
        and not TaskRun.objects.filter(status__in=TaskRun.LEASED).exists()
    )


@pytest.mark.usefixtures("throttled")
def test_two_schedulers__never_send_a_member_more_than_the_hours_allowance(
    spawn, record_file: Path
) -> None:
    env = {
        "DJANGO_SETTINGS_MODULE": throttle_settings.__name__,
        "RECORD_DELAY": "0.4",
        "REMINDERS_CLAIM_BATCH": "2",
    }
    processes = [spawn(f"p{n}", **env) for n in range(2)]
    wait_until(
        lambda: all(len(p.tree()) >= TREE for p in processes),
        timeout=60,
        what="two processes with their clusters",
        processes=processes,
    )
    schedule_burst()
    wait_until(
        settled,
        timeout=90,
        what="every follow-up sent or throttled",
        processes=processes,
        explain=lambda: f"runs: {dict(run_statuses())}",
    )
    time.sleep(1.0)  # a send past the ceiling would be on its way by now
    delivered = records(record_file)
    per_member = Counter(row["to"] for row in delivered)
    assert set(per_member) == set(MEMBERS)
    assert max(per_member.values()) <= ALLOWANCE, per_member
    # Nothing lost: each follow-up was delivered once, or waits for the next hour.
    held = TaskRun.objects.filter(error_code=THROTTLED_CODE, status__in=TaskRun.WAITING)
    sent = TaskRun.objects.filter(status=TaskRun.Status.SENT, task__payload__has_key="customer")
    assert sent.count() + held.count() == EACH * len(MEMBERS)
    assert held.exists()
