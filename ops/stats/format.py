"""How the dashboard and ``reminders_stats`` write the numbers of ``ops.stats`` for
people: seconds as "850 ms", "12.5 s", "4 min 5 s" or "2 h 3 min", rates as percentages,
nothing known as an en dash. One place, so the page and the command agree."""

from __future__ import annotations

from django.utils.translation import gettext as _

NOTHING = "\u2013"  # an en dash: no value


def seconds(value: float | None) -> str:
    if value is None:
        return NOTHING
    sign = "-" if value < 0 else ""
    value = abs(value)
    if value < 1:
        return sign + _("%(n)d ms") % {"n": round(value * 1000)}
    if value < 60:
        return sign + _("%(n)s s") % {"n": f"{value:.2f}" if value < 10 else f"{value:.1f}"}
    whole = round(value)
    if whole < 3600:
        return sign + _("%(m)d min %(s)d s") % {"m": whole // 60, "s": whole % 60}
    return sign + _("%(h)d h %(m)d min") % {"h": whole // 3600, "m": whole % 3600 // 60}


def rate(value: float | None) -> str:
    if value is None:
        return NOTHING
    return f"{value * 100:.1f} %"
