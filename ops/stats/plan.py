"""The plan ahead, as of now rather than of the day asked for: per priority, the waiting
runs due within ``PLAN_HORIZON``, the backlog already due and how long its oldest has
waited, the runs claimed and not finished, those folded into a digest that has not
gone yet (``folded``: they go, or not, with their digest, which is a run of its own
counted here as any), and those held back by a paused task.

One query (conditional ``COUNT(…) FILTER``), read through the engine's partial indexes of
waiting, of leased and of folded runs. Invariants: one ``PriorityPlan`` per
``Priority``, in its order, zeros for a priority without runs; ranks outside the three
merge into bulk work, as the engine reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Min, Q

from reminders.models import Priority, ScheduledTask, TaskRun

from .days import tenths

PLAN_HORIZON = timedelta(hours=1)


@dataclass(frozen=True)
class PriorityPlan:
    """Waiting runs of one priority (their task not paused): due within the next hour,
    and already due (the backlog: how many, and how long the oldest has waited); runs
    claimed and not finished (``queued``, ``running``); runs in a digest not sent yet
    (``folded``)."""

    priority: str
    next_hour: int = 0
    backlog: int = 0
    oldest_seconds: float | None = None
    queued: int = 0
    running: int = 0
    paused: int = 0  # waiting runs of paused tasks due by the hour's end: not sent
    folded: int = 0  # runs in a digest not sent yet, whenever due

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def plan(now: datetime) -> list[PriorityPlan]:
    """Query: waiting runs due within the hour, claimed runs and runs in a digest, by
    priority (read through the engine's partial indexes of waiting, leased and folded
    runs)."""
    waiting = Q(status__in=TaskRun.WAITING)
    due = waiting & Q(next_attempt_at__lte=now)
    paused = Q(task__status=ScheduledTask.Status.PAUSED)
    folded = Q(status=TaskRun.Status.FOLDED)
    rows = (
        TaskRun.objects.filter(
            (waiting & Q(next_attempt_at__lte=now + PLAN_HORIZON))
            | Q(status__in=TaskRun.LEASED)
            | folded
        )
        .values("priority")
        .annotate(
            next_hour=Count("pk", filter=waiting & Q(next_attempt_at__gt=now) & ~paused),
            backlog=Count("pk", filter=due & ~paused),
            oldest=Min("next_attempt_at", filter=due & ~paused),
            paused=Count("pk", filter=waiting & paused),
            queued=Count("pk", filter=Q(status=TaskRun.Status.QUEUED)),
            running=Count("pk", filter=Q(status=TaskRun.Status.RUNNING)),
            folded=Count("pk", filter=folded),
        )
        .order_by()
    )
    found: dict[str, PriorityPlan] = {}
    for row in rows:
        name = str(Priority.from_rank(row["priority"]).value)
        oldest = row["oldest"]
        got = PriorityPlan(
            name,
            next_hour=row["next_hour"],
            backlog=row["backlog"],
            oldest_seconds=tenths(max(0.0, (now - oldest).total_seconds())) if oldest else None,
            queued=row["queued"],
            running=row["running"],
            paused=row["paused"],
            folded=row["folded"],
        )
        # Ranks outside the three are bulk work, as the engine reads them.
        found[name] = _merge(found[name], got) if name in found else got
    return [found.get(p.value, PriorityPlan(str(p.value))) for p in Priority]


def _merge(a: PriorityPlan, b: PriorityPlan) -> PriorityPlan:
    oldest = [s for s in (a.oldest_seconds, b.oldest_seconds) if s is not None]
    return PriorityPlan(
        a.priority,
        a.next_hour + b.next_hour,
        a.backlog + b.backlog,
        max(oldest) if oldest else None,
        a.queued + b.queued,
        a.running + b.running,
        a.paused + b.paused,
        a.folded + b.folded,
    )
