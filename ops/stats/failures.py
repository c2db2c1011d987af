"""The day's runs that ended without their message confirmed delivered (failed, unknown,
expired): grouped by status and error code, and the latest few of them.

Two queries, each bounded (``FAILURE_GROUPS`` groups, ``LATEST_FAILURES`` runs) whatever
the day holds; the latest are the last finished first, those never finished last.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Count, F, Max, QuerySet

from reminders.models import TaskRun

from .days import iso, local_iso

# Runs that ended without their message confirmed delivered: the failures section.
PROBLEMS = (TaskRun.Status.FAILED, TaskRun.Status.UNKNOWN, TaskRun.Status.EXPIRED)
LATEST_FAILURES = 10
FAILURE_GROUPS = 50


@dataclass(frozen=True)
class FailureGroup:
    status: str
    code: str
    count: int
    last_finished_at: datetime | None
    example: str  # one of the group's messages (the greatest, as the database sorts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "code": self.code,
            "count": self.count,
            "last_finished_at": iso(self.last_finished_at),
            "example": self.example,
        }


@dataclass(frozen=True)
class FailedRun:
    id: int
    kind: str
    recipient: str
    channel: str
    status: str
    code: str
    message: str
    due_at: datetime
    finished_at: datetime | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "recipient": self.recipient,
            "channel": self.channel,
            "status": self.status,
            "code": self.code,
            "message": self.message,
            "due_at": local_iso(self.due_at),
            "finished_at": iso(self.finished_at),
        }


def failure_groups(of_day: QuerySet[TaskRun]) -> list[FailureGroup]:
    """Query: the day's failed, unknown and expired runs by status and error code."""
    rows = (
        of_day.filter(status__in=PROBLEMS)
        .values("status", "error_code")
        .annotate(n=Count("pk"), last=Max("finished_at"), example=Max("error_message"))
        .order_by("-n", "status", "error_code")[:FAILURE_GROUPS]
    )
    return [
        FailureGroup(row["status"], row["error_code"], row["n"], row["last"], row["example"] or "")
        for row in rows
    ]


def latest_failures(of_day: QuerySet[TaskRun]) -> list[FailedRun]:
    """Query: the day's last few runs that failed, ended unknown or expired."""
    rows = (
        of_day.filter(status__in=PROBLEMS)
        .order_by(F("finished_at").desc(nulls_last=True), "-pk")
        .values_list(
            "pk",
            "task__kind",
            "task__recipient",
            "task__channel",
            "status",
            "error_code",
            "error_message",
            "due_at",
            "finished_at",
        )[:LATEST_FAILURES]
    )
    return [FailedRun(*row) for row in rows]
