"""``{% calendar_coverage_banner %}``: the warning that a working-day calendar in use is
about to run out (``reminders.calendars.coverage.ending``), for the task pages of the
admin and the ops dashboard. It says nothing when every calendar in use is covered for
more than ``REMINDERS_CALENDAR_WARN_DAYS`` days. ``calendar_today`` in the context, if set, is
the day it judges from (default: the current local date).
"""

from __future__ import annotations

from typing import Any

from django import template
from django.urls import NoReverseMatch, reverse

from ..calendars import coverage as calendar_coverage

register = template.Library()


@register.inclusion_tag("reminders/calendar_banner.html", takes_context=True)
def calendar_coverage_banner(context: template.Context) -> dict[str, Any]:
    ending = calendar_coverage.ending(context.get("calendar_today"))
    url = None
    if ending:
        try:
            url = reverse("admin:reminders_calendarday_changelist")
        except NoReverseMatch:
            url = None
    return {"ending": ending, "calendar_days_url": url}
