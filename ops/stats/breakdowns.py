"""The day's counts cut up: by hour (with the hour's lateness) and by day for the charts,
by kind (with its percentiles) and by channel (the day's and the week's success rate).

No query here: what ``ops.stats.counts`` and ``ops.stats.spreads`` fetched is folded in
one pass over the day's groups. Invariants: the hours add up to the day, and so do the
kinds and the channels; the chart's last day is the day itself, its totals; kinds and
channels are sorted by name; a channel with runs in the week but none today is listed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from .counts import Counts
from .days import label, local_iso
from .spreads import Spread, Spreads, spread_dict


@dataclass(frozen=True)
class Bucket:
    """A stretch of time (an hour of the day, or a day) and its runs due in it."""

    start: datetime
    end: datetime
    label: str
    counts: Counts
    lateness: Spread | None = None  # hours of the day only

    def as_dict(self) -> dict[str, Any]:
        data = {
            "start": local_iso(self.start),
            "end": local_iso(self.end),
            "label": self.label,
            **self.counts.as_dict(),
        }
        if self.lateness is not None:
            data["lateness"] = spread_dict(self.lateness)
        return data


@dataclass(frozen=True)
class KindDay:
    kind: str
    counts: Counts
    duration: Spread
    lateness: Spread

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            **self.counts.as_dict(),
            "duration": spread_dict(self.duration),
            "lateness": spread_dict(self.lateness),
        }


@dataclass(frozen=True)
class ChannelRate:
    channel: str
    day: Counts
    week: Counts

    def as_dict(self) -> dict[str, Any]:
        def part(counts: Counts) -> dict[str, Any]:
            data = counts.as_dict()
            return {key: data[key] for key in ("sent", "failed", "unknown", "expired", "ended")} | {
                "success_rate": data["success_rate"]
            }

        return {"channel": self.channel, "day": part(self.day), "week": part(self.week)}


@dataclass
class DayGroups:
    """The day's counts by hour index, by kind, by channel, and all of them."""

    of_hour: dict[int, Counts]
    of_kind: dict[str, Counts]
    of_channel: dict[str, Counts]
    totals: Counts

    @classmethod
    def fold(cls, by_hour: Mapping[tuple[int, str, str], Counts]) -> DayGroups:
        """One pass over the day's groups: by hour, kind, channel, and all."""
        groups = cls(defaultdict(Counts), defaultdict(Counts), defaultdict(Counts), Counts())
        for (hour, kind, channel), counts in by_hour.items():
            groups.of_hour[hour] += counts
            groups.of_kind[kind] += counts
            groups.of_channel[channel] += counts
            groups.totals += counts
        return groups


def hour_buckets(hours: Sequence[datetime], groups: DayGroups, spreads: Spreads) -> list[Bucket]:
    """The day's hours (``hours``: their starts and the day's end)."""
    return [
        Bucket(
            at,
            hours[i + 1],
            label(at, "%H:%M"),
            groups.of_hour[i],
            spreads.hours.get(i, Spread()),
        )
        for i, at in enumerate(hours[:-1])
    ]


def day_buckets(
    days: Sequence[datetime],
    by_day: Mapping[int, Counts],
    day: date,
    end: datetime,
    totals: Counts,
) -> list[Bucket]:
    """The chart's days: the earlier ones (``days``: their starts and the day's), then
    the day itself with its totals."""
    return [
        *(
            Bucket(at, days[i + 1], label(at, "%Y-%m-%d"), by_day.get(i, Counts()))
            for i, at in enumerate(days[:-1])
        ),
        Bucket(days[-1], end, day.isoformat(), totals),
    ]


def kinds(groups: DayGroups, spreads: Spreads) -> list[KindDay]:
    return [
        KindDay(
            kind,
            groups.of_kind[kind],
            spreads.duration.get(kind, Spread()),
            spreads.lateness.get(kind, Spread()),
        )
        for kind in sorted(groups.of_kind)
    ]


def channels(groups: DayGroups, week_before: Mapping[str, Counts]) -> list[ChannelRate]:
    """Each channel's day, and its week: the day and the week's earlier days."""
    of_channel = groups.of_channel
    return [
        ChannelRate(
            channel,
            of_channel[channel],
            of_channel[channel] + week_before.get(channel, Counts()),
        )
        for channel in sorted(set(of_channel) | set(week_before))
    ]
