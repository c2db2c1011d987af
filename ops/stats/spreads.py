"""Percentiles: the duration of the last attempt and the lateness (``due_at`` →
``finished_at``) of the day's ``sent`` runs, by kind, by hour and for the whole day.

They are continuous, interpolated between the two nearest ranks exactly as PostgreSQL's
``percentile_cont``: of n sorted values x[0] .. x[n-1], the p-th is at rank
h = (n - 1) * p: x[i] + (h - i) * (x[i+1] - x[i]) with i = floor(h) (so p50 of an even
count is the mean of the middle two). On PostgreSQL they are computed in SQL
(``PERCENTILE_CONT … WITHIN GROUP``: 3 queries, nothing but the results leaves the
server). Elsewhere (SQLite, MariaDB, whose ``PERCENTILE_CONT`` is only a window function)
one query fetches the day's sent runs' kind, due, finished and duration, and the same
formula runs here: exact, and bounded by one day's sent runs (about 40 bytes each), never
by the history. Values are rounded to the millisecond; both paths give the same figures.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import (
    Aggregate,
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    QuerySet,
)

from reminders.models import TaskRun

from .days import bucket_of, index

QUANTILES = (0.5, 0.95)


def percentile(ordered: Sequence[float], fraction: float) -> float | None:
    """``percentile_cont``: linear interpolation between the closest ranks of ``ordered``
    (sorted ascending); None for no values."""
    if not ordered:
        return None
    rank = (len(ordered) - 1) * fraction
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (rank - low) * (ordered[high] - ordered[low])


class PercentileCont(Aggregate):
    """PostgreSQL's ``PERCENTILE_CONT(fraction) WITHIN GROUP (ORDER BY expression)`` of
    intervals (``DurationField``); the fraction is one of our constants, never input."""

    function = "PERCENTILE_CONT"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"

    def __init__(self, expression: Any, fraction: float, **extra: Any) -> None:
        super().__init__(
            expression, fraction=repr(float(fraction)), output_field=DurationField(), **extra
        )


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 3)


@dataclass(frozen=True)
class Spread:
    """How many values, and their 50th and 95th percentiles in seconds (None if none)."""

    count: int = 0
    p50: float | None = None
    p95: float | None = None

    @classmethod
    def of(cls, values: Iterable[float]) -> Spread:
        ordered = sorted(values)
        p50, p95 = (_ms(percentile(ordered, q)) for q in QUANTILES)
        return cls(len(ordered), p50, p95)

    @classmethod
    def from_sql(cls, count: int, p50: timedelta | None, p95: timedelta | None) -> Spread:
        return cls(
            count,
            _ms(p50.total_seconds() if p50 is not None else None),
            _ms(p95.total_seconds() if p95 is not None else None),
        )


def spread_dict(spread: Spread) -> dict[str, Any]:
    return {"count": spread.count, "p50": spread.p50, "p95": spread.p95}


@dataclass
class Spreads:
    """Percentiles by kind (None: all kinds) and by hour index of the day."""

    duration: dict[str | None, Spread] = field(default_factory=dict)
    lateness: dict[str | None, Spread] = field(default_factory=dict)
    hours: dict[int, Spread] = field(default_factory=dict)


def _lateness() -> ExpressionWrapper:
    return ExpressionWrapper(F("finished_at") - F("due_at"), output_field=DurationField())


def spreads_in_sql(sent: QuerySet[TaskRun], bounds: Sequence[datetime]) -> Spreads:
    """Queries 2 to 4 on PostgreSQL: by kind, by hour, and for the whole day."""
    both = {
        "duration_n": Count("duration"),
        "duration_50": PercentileCont("duration", 0.5),
        "duration_95": PercentileCont("duration", 0.95),
        "lateness_n": Count("finished_at"),
        "lateness_50": PercentileCont(_lateness(), 0.5),
        "lateness_95": PercentileCont(_lateness(), 0.95),
    }
    spreads = Spreads()
    groups: list[Mapping[str, Any]] = [
        *sent.values("task__kind").annotate(**both).order_by(),
        {"task__kind": None, **sent.aggregate(**both)},
    ]
    for row in groups:
        kind = row["task__kind"]
        spreads.duration[kind] = Spread.from_sql(
            row["duration_n"], row["duration_50"], row["duration_95"]
        )
        spreads.lateness[kind] = Spread.from_sql(
            row["lateness_n"], row["lateness_50"], row["lateness_95"]
        )
    by_hour = (
        sent.annotate(bucket=bucket_of(bounds))
        .values("bucket")
        .annotate(
            n=Count("finished_at"),
            p50=PercentileCont(_lateness(), 0.5),
            p95=PercentileCont(_lateness(), 0.95),
        )
        .order_by()
    )
    for row in by_hour:
        spreads.hours[row["bucket"]] = Spread.from_sql(row["n"], row["p50"], row["p95"])
    return spreads


def spreads_in_python(sent: QuerySet[TaskRun], bounds: Sequence[datetime]) -> Spreads:
    """Query 2 elsewhere: the day's sent runs, four columns each; percentiles here."""
    durations: dict[str | None, list[float]] = defaultdict(list)
    lateness: dict[str | None, list[float]] = defaultdict(list)
    by_hour: dict[int, list[float]] = defaultdict(list)
    rows = sent.values_list("task__kind", "due_at", "finished_at", "duration").order_by()
    for kind, due_at, finished_at, duration in rows.iterator(chunk_size=5000):
        if duration is not None:
            seconds = duration.total_seconds()
            durations[kind].append(seconds)
            durations[None].append(seconds)
        if finished_at is None:  # a sent run always has finished; as the SQL, skip it
            continue
        late = (finished_at - due_at).total_seconds()
        lateness[kind].append(late)
        lateness[None].append(late)
        by_hour[index(bounds, due_at)].append(late)
    return Spreads(
        duration={kind: Spread.of(values) for kind, values in durations.items()},
        lateness={kind: Spread.of(values) for kind, values in lateness.items()},
        hours={hour: Spread.of(values) for hour, values in by_hour.items()},
    )
