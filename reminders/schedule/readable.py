"""Moments as people read them: on the clock of a zone, month-day and minutes
("12-05 21:19"), the year too when it is not the current one there ("2027-01-09 15:30"),
and the zone named ("12-05 21:19 (Asia/Shanghai)").

Every time the admin shows of a task or its runs (lists, pages, titles) reads this way,
in the task's zone, never as ISO UTC: what ops compare with the form that entered it.
A zone that is not valid (as raw SQL can leave one) reads as UTC, and says so.
"""

from __future__ import annotations

from datetime import datetime, tzinfo

from django.utils import timezone

from . import timing


def _zone(name: str) -> tuple[tzinfo, str]:
    try:
        return timing.zone(name), name
    except timing.InvalidSchedule:
        return timing.UTC, "UTC"


def short(moment: datetime, zone_name: str) -> str:
    """``moment`` on the zone's clock, without the zone: "12-05 21:19", with the year
    when it is not the current year in that zone."""
    zone, _name = _zone(zone_name)
    local = moment.astimezone(zone)
    if local.year != timezone.now().astimezone(zone).year:
        return f"{local:%Y-%m-%d %H:%M}"
    return f"{local:%m-%d %H:%M}"


def moment(moment: datetime | None, zone_name: str) -> str:
    """``short``, then the zone named: "12-05 21:19 (Asia/Shanghai)"; "-" for None."""
    if moment is None:
        return "-"
    return f"{short(moment, zone_name)} ({_zone(zone_name)[1]})"
