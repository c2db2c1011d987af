"""A 5-field cron expression in words, for the admin: "At 09:00 on Monday to Friday".

Ops staff read schedules in the admin, and few of them read cron. The invariant: a
description says exactly what the scheduler does with the expression (read as
``croniter``, which the scheduler uses, expands it: names, ranges, steps and ``7`` for
Sunday all come out as plain numbers first), or it is the expression itself. What this
module cannot say exactly is never guessed at, it falls back to the raw expression:
both the day of the month and the weekday restricted (cron fires on either), ``L``,
``#``, minutes within restricted hours ("every 15 minutes from 9 to 17"), steps that
do not divide the hour or the day evenly (``*/7`` restarts at each hour), and more than
``MAX_TIMES`` clock times a day.

Every phrase goes through gettext, in the active language (``zh-hans`` is in the
catalog). Phrases are whole sentences with placeholders rather than words glued in
English order, so that a language can put the days before the time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from croniter import croniter
from django.utils.translation import gettext, ngettext, pgettext

__all__ = ["MAX_TIMES", "describe"]

# More clock times a day than this and the list is no easier to read than the cron.
MAX_TIMES = 6


def describe(expression: str) -> str:
    """``expression`` in words in the active language, or ``expression`` itself when it
    cannot be said exactly (see the module docstring)."""
    try:
        fields, nth = croniter.expand(expression.strip())
    except (ValueError, KeyError, TypeError):
        return expression
    if nth or len(fields) != 5 or not all(_plain(field) for field in fields):
        return expression
    minutes = _values(fields[0], range(60))
    hours = _values(fields[1], range(24))
    days = _values(fields[2], range(1, 32))
    months = _values(fields[3], range(1, 13))
    # Sunday is 0 (or 7): Monday to Sunday is 1 to 7 here, the order they are said in.
    weekdays = _values(
        [day or 7 for day in fields[4]] if fields[4] != ["*"] else ["*"], range(1, 8)
    )
    if days is not None and weekdays is not None:
        return expression  # cron fires on either: too easy to misread in words
    sentence = _sentence(minutes, hours, days, weekdays)
    if sentence is None:
        return expression
    if months is not None:
        sentence = gettext("%(schedule)s, in %(months)s") % {
            "schedule": sentence,
            "months": _runs(months, _month),
        }
    return sentence


def _plain(field: Sequence[object]) -> bool:
    """``*`` or numbers only (not ``l``, cron's "last")."""
    return list(field) == ["*"] or all(isinstance(value, int) for value in field)


def _values(field: Sequence[Any], full: range) -> list[int] | None:
    """The field's values, sorted; None when they are every value the field has."""
    if list(field) == ["*"]:
        return None
    values = sorted({int(value) for value in field})
    return None if values == list(full) else values


def _sentence(
    minutes: list[int] | None,
    hours: list[int] | None,
    days: list[int] | None,
    weekdays: list[int] | None,
) -> str | None:
    if minutes is not None and hours is not None and len(minutes) * len(hours) <= MAX_TIMES:
        return _at_times([f"{h:02d}:{m:02d}" for h in hours for m in minutes], days, weekdays)
    period = _period(minutes, hours)
    if period is None:
        return None
    if weekdays is not None:
        return gettext("%(period)s on %(weekdays)s") % {
            "period": period,
            "weekdays": _runs(weekdays, _weekday),
        }
    if days is not None:
        return ngettext(
            "%(period)s on day %(days)s of the month",
            "%(period)s on days %(days)s of the month",
            len(days),
        ) % {"period": period, "days": _runs(days, str)}
    return period


def _at_times(times: list[str], days: list[int] | None, weekdays: list[int] | None) -> str:
    listed = _join(times)
    if weekdays is not None:
        return gettext("At %(times)s on %(weekdays)s") % {
            "times": listed,
            "weekdays": _runs(weekdays, _weekday),
        }
    if days is not None:
        return ngettext(
            "At %(times)s on day %(days)s of the month",
            "At %(times)s on days %(days)s of the month",
            len(days),
        ) % {"times": listed, "days": _runs(days, str)}
    return gettext("At %(times)s every day") % {"times": listed}


def _period(minutes: list[int] | None, hours: list[int] | None) -> str | None:
    """A schedule that repeats through the day: every minute, every n minutes, once an
    hour, every n hours on the hour (from midnight). None for any other."""
    if hours is None:
        if minutes is None:
            return gettext("Every minute")
        step = _step(minutes, 60)
        if step is not None:
            return ngettext("Every %(n)d minute", "Every %(n)d minutes", step) % {"n": step}
        if len(minutes) != 1:
            return None
        if minutes[0] == 0:
            return gettext("Every hour")
        return gettext("At %(minute)d minutes past the hour") % {"minute": minutes[0]}
    step = _step(hours, 24)
    if step is None or minutes != [0]:
        return None
    return ngettext("Every %(n)d hour", "Every %(n)d hours", step) % {"n": step}


def _step(values: list[int], size: int) -> int | None:
    """n when ``values`` are 0, n, 2n... through a field of ``size`` that n divides."""
    if len(values) < 2 or size % values[1] or values != list(range(0, size, values[1])):
        return None
    return values[1]


def _runs(values: list[int], name: Callable[[int], str]) -> str:
    """Values in words: three or more in a row as a range ("Monday to Friday"), the
    others one by one, all joined as a list."""
    parts: list[str] = []
    start = 0
    while start < len(values):
        end = start
        while end + 1 < len(values) and values[end + 1] == values[end] + 1:
            end += 1
        if end - start >= 2:
            parts.append(
                gettext("%(first)s to %(last)s")
                % {"first": name(values[start]), "last": name(values[end])}
            )
        else:
            parts.extend(name(value) for value in values[start : end + 1])
        start = end + 1
    return _join(parts)


def _join(items: list[str]) -> str:
    if len(items) == 1:
        return items[0]
    separator = pgettext("between the items of a list", ", ")
    return gettext("%(items)s and %(last)s") % {
        "items": separator.join(items[:-1]),
        "last": items[-1],
    }


def _weekday(day: int) -> str:
    """1 (Monday) to 7 (Sunday)."""
    names = [
        pgettext("weekday", "Monday"),
        pgettext("weekday", "Tuesday"),
        pgettext("weekday", "Wednesday"),
        pgettext("weekday", "Thursday"),
        pgettext("weekday", "Friday"),
        pgettext("weekday", "Saturday"),
        pgettext("weekday", "Sunday"),
    ]
    return names[day - 1]


def _month(month: int) -> str:
    names = [
        pgettext("month", "January"),
        pgettext("month", "February"),
        pgettext("month", "March"),
        pgettext("month", "April"),
        pgettext("month", "May"),
        pgettext("month", "June"),
        pgettext("month", "July"),
        pgettext("month", "August"),
        pgettext("month", "September"),
        pgettext("month", "October"),
        pgettext("month", "November"),
        pgettext("month", "December"),
    ]
    return names[month - 1]
