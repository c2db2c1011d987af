"""Fill a benchmark database: ``python -m benchmarks.fixtures {tasks,jobs} N [CHANNEL]``.

Started by ``throughput.py`` with ``DJANGO_SETTINGS_MODULE=benchmarks.settings`` and
``DATABASE_URL`` naming the scenario's database. Prints the seconds the filling took.
"""

from __future__ import annotations

import sys
import time

import django


def make_tasks(n: int, channel: str = "bench") -> None:
    """``n`` one-shot ``follow_up`` tasks (no stagger) on ``channel``, one recipient each,
    due now.

    ``bulk_create`` rather than ``api.schedule`` only to keep setup short; the rows are
    what ``api.schedule`` writes. The orchestrator sets ``run_at`` again just before
    it starts the workers, so lateness is counted from that moment.
    """
    from django.conf import settings
    from django.utils import timezone

    from reminders.models import ScheduledTask

    now = timezone.now()
    tasks = []
    for i in range(n):
        task = ScheduledTask(
            kind="follow_up",
            recipient=f"user{i:06d}",
            channel=channel,
            run_at=now,
            timezone=settings.TIME_ZONE,
            priority="normal",
        )
        task.plan_first_run(now)
        tasks.append(task)
    ScheduledTask.objects.bulk_create(tasks, batch_size=1000)


def enqueue_jobs(n: int) -> None:
    """``n`` ``async_task`` calls of the same send, with the body the engine would send."""
    from django.db import transaction
    from django_q.tasks import async_task

    from reminders.senders.base import render_body

    body = render_body("text", {"content": "You have a customer follow-up due now."})
    with transaction.atomic():  # one commit: only the setup gets faster
        for i in range(n):
            async_task("benchmarks.senders.bare_send", f"bare:{i}", f"user{i:06d}", body)


def main(argv: list[str]) -> None:
    what, n = argv[1], int(argv[2])
    django.setup()
    started = time.perf_counter()
    if what == "tasks":
        make_tasks(n, *argv[3:4])
    else:
        enqueue_jobs(n)
    print(f"{time.perf_counter() - started:.3f}")


if __name__ == "__main__":
    main(sys.argv)
