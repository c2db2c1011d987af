"""Run what the scheduler enqueued on django-q2's ORM broker, in this process."""

from __future__ import annotations

from typing import Any

from django_q.models import OrmQ
from django_q.signing import SignedPackage

from reminders.delivery import deliver


def queued() -> list[dict[str, Any]]:
    """The queued jobs, oldest first, without removing them."""
    return [SignedPackage.loads(row.payload) for row in OrmQ.objects.order_by("id")]


def run_queued(*, keep: bool = False) -> int:
    """Execute every queued job as a django-q2 worker would; returns messages sent."""
    sent = 0
    for row in list(OrmQ.objects.order_by("id")):
        job = SignedPackage.loads(row.payload)
        assert job["func"] == "reminders.delivery.deliver", job["func"]
        sent += deliver(*job["args"], **job["kwargs"])
        if not keep:
            row.delete()
    return sent
