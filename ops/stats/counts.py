"""Runs counted by what became of them: ``Counts``, and the three count queries of a day
(by hour, kind and channel), of the chart's earlier days (by day) and of the week's
earlier days (by channel).

**Success rate** of a channel over a period: ``sent / (sent + failed + unknown +
expired)`` of its runs due in the period, i.e. runs sent among the runs that ended one
way or the other. Pending runs have not ended; ``skipped`` (a holiday, a missed
occurrence) and ``cancelled`` ones were never meant to be sent; ``unknown`` counts
against (nobody confirmed the message arrived). None when no run ended. The period is the
day, or the 7 local days ending with it. (The alert check of ``ops.alerts`` applies the
same ratio to runs *finished* in a sliding window.)

**Digests** (``reminders.engine.digests``): a run folded into a digest is ``pending``
(``folded``) until its digest goes, and then ends as its digest does; the digest is a
run of its own, due when it was made. So a digest of three runs sent is four runs
``sent`` and one message (the ledger's row, which ``ops.stats.wave`` counts): these
figures count runs, never messages.

Invariants: ``planned`` = ``pending`` + ``sent`` + ``failed`` + ``expired`` +
``unknown`` + ``skipped``, and counts add up (``+``), so the hours of a day add up to the
day. Every run status is ``pending`` or one of the others: none is left out. Each query
groups by status too, with one ``COUNT(*)``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from django.db.models import Count, QuerySet

from reminders.models import TaskRun

from .days import bucket_of

# Not finished: waiting, claimed, or folded into a digest that has not ended them.
PENDING: tuple[str, ...] = TaskRun.UNFINISHED


@dataclass(frozen=True)
class Counts:
    """Runs by what became of them (``pending``: scheduled, queued, running, retrying,
    or in a digest not sent yet)."""

    pending: int = 0
    sent: int = 0
    failed: int = 0
    expired: int = 0
    unknown: int = 0
    skipped: int = 0
    cancelled: int = 0

    @property
    def planned(self) -> int:
        """Every run due in the period but the cancelled ones."""
        return self.pending + self.sent + self.failed + self.expired + self.unknown + self.skipped

    @property
    def ended(self) -> int:
        """Runs sent or given up: the success rate's denominator."""
        return self.sent + self.failed + self.unknown + self.expired

    @property
    def success_rate(self) -> float | None:
        return self.sent / self.ended if self.ended else None

    @classmethod
    def of_statuses(cls, statuses: Mapping[str, int]) -> Counts:
        """From runs counted by status."""
        return cls(
            pending=sum(statuses.get(status, 0) for status in PENDING),
            **{
                name: statuses.get(name, 0)
                for name in ("sent", "failed", "expired", "unknown", "skipped", "cancelled")
            },
        )

    def __add__(self, other: Counts) -> Counts:
        return Counts(
            self.pending + other.pending,
            self.sent + other.sent,
            self.failed + other.failed,
            self.expired + other.expired,
            self.unknown + other.unknown,
            self.skipped + other.skipped,
            self.cancelled + other.cancelled,
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "planned": self.planned,
            **{f.name: getattr(self, f.name) for f in fields(self)},
            "ended": self.ended,
            "success_rate": None if self.success_rate is None else round(self.success_rate, 4),
        }


# Why three count queries and not one over the 14 days grouped by day or hour, kind and
# channel: on a million runs that one took 250-350 ms (the join to the tasks and a CASE
# for each of 155,000 rows; and PostgreSQL, unable to estimate how many groups a CASE
# makes, sorted them on disk). Only the day needs the kind; only the week, the channel;
# the chart's earlier days need neither. And why ``status`` among the groups with one
# ``COUNT(*)`` rather than a ``COUNT(…) FILTER`` per status: a tenth of the work per row,
# and with an index on ``due_at`` that includes ``status`` and ``task_id`` the runs are
# read from the index alone (figures in the README).


def _by_status(rows: Iterable[Mapping[str, Any]], *keys: str) -> dict[Any, Counts]:
    """Rows of ``keys`` + ``status`` + ``n`` as ``Counts`` per key (one key: the value)."""
    found: dict[Any, dict[str, int]] = defaultdict(dict)
    for row in rows:
        key = tuple(row[k] for k in keys) if len(keys) > 1 else row[keys[0]]
        found[key][row["status"]] = found[key].get(row["status"], 0) + row["n"]
    return {key: Counts.of_statuses(statuses) for key, statuses in found.items()}


def by_hour_kind_channel(
    of_day: QuerySet[TaskRun], hours: Sequence[datetime]
) -> dict[tuple[int, str, str], Counts]:
    """Query: the day's runs by hour (index into ``hours``), kind and channel."""
    rows = (
        of_day.annotate(bucket=bucket_of(hours))
        .values("bucket", "task__kind", "task__channel", "status")
        .annotate(n=Count("*"))
        .order_by()
    )
    return _by_status(rows, "bucket", "task__kind", "task__channel")


def by_day(runs: QuerySet[TaskRun], days: Sequence[datetime]) -> dict[int, Counts]:
    """Query: the earlier days' runs by day (index into ``days``); no join."""
    rows = (
        runs.annotate(bucket=bucket_of(days))
        .values("bucket", "status")
        .annotate(n=Count("*"))
        .order_by()
    )
    return _by_status(rows, "bucket")


def by_channel(runs: QuerySet[TaskRun]) -> dict[str, Counts]:
    """Query: the runs of the week's earlier days by channel."""
    rows = runs.values("task__channel", "status").annotate(n=Count("*")).order_by()
    return _by_status(rows, "task__channel")
