"""Run what the scheduler enqueued on django-q2's ORM broker, in this process."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.test import TestCase
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from reminders.engine import cards, dispatch
from reminders.engine.delivery import deliver


def queued() -> list[dict[str, Any]]:
    """The queued jobs, oldest first, without removing them."""
    return [SignedPackage.loads(row.payload) for row in OrmQ.objects.order_by("id")]


def run_queued(*, keep: bool = False, now: datetime | None = None) -> int:
    """Execute every queued job as a django-q2 worker would; returns messages sent.
    ``now``: the clock the workers decide deadlines by (default: the real one). The
    jobs that update cards (``engine.cards``) run too, and count nothing."""
    sent = 0
    for row in list(OrmQ.objects.order_by("id")):
        job = SignedPackage.loads(row.payload)
        if job["func"] == cards.UPDATE:
            cards.update(*job["args"], **job["kwargs"])
        else:
            assert job["func"] == "reminders.engine.delivery.deliver", job["func"]
            sent += deliver(*job["args"], **job["kwargs"], now=now)
        if not keep:
            row.delete()
    return sent


def tick(now: datetime | None = None) -> int:
    """One scheduler tick and one pass of the workers, as a test inside a transaction
    sees it: on-commit hooks (the signals) run as they come; returns messages sent."""
    with TestCase.captureOnCommitCallbacks(execute=True):
        dispatch.materialize(now=now)
        dispatch.claim("test", 1000, now=now)
        return run_queued()
