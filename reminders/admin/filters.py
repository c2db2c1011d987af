"""The run history's own list filters, and the "failed today" view they make up.

Days are the local days of ``settings.TIME_ZONE`` (the site's, where ops staff work),
not of each task's zone: "today" is one stretch of time for every row, so that a list
filtered by it is what happened since midnight here. "Last 7 days" is today and the six
days before it. A DST change makes a local day 23 or 25 hours long; the bounds are the
local midnights (``timing.day_start``), never 24-hour steps.

"Failed today" is the runs due today that ended ``failed`` and nobody has marked
handled yet: a run once handled drops out (it is still under "failed" with "handled:
yes"), and a handled run retried loses its mark, so that it comes back if it fails
again. ``FAILED_TODAY`` is its query string on the runs' changelist.

"Digest" tells the runs that are digests (one message carrying the runs folded into it,
``engine.digests``) from the others, and shows the runs a digest carried, whatever
became of them (``folded`` while their digest is pending, then as it ended).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings as django_settings
from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.http import urlencode
from django.utils.translation import gettext_lazy as _

from .. import kinds
from ..models import DIGEST_KEY
from ..schedule import timing

TODAY, YESTERDAY, LAST_7_DAYS = "today", "yesterday", "7d"
HANDLED_PARAMETER, DUE_PARAMETER = "handled", "due"
DIGEST_PARAMETER = "digest"

FAILED_TODAY = urlencode({DUE_PARAMETER: TODAY, "status__exact": "failed", HANDLED_PARAMETER: "no"})


def local_days(choice: str, now: datetime) -> tuple[datetime, datetime]:
    """The first instant and the end of the local days ``choice`` names, in
    ``settings.TIME_ZONE``."""
    zone = django_settings.TIME_ZONE
    today = timing.local_date(now, zone)
    first, last = {
        TODAY: (today, today),
        YESTERDAY: (today - timedelta(days=1), today - timedelta(days=1)),
        LAST_7_DAYS: (today - timedelta(days=6), today),
    }[choice]
    return timing.day_start(first, zone), timing.day_start(last + timedelta(days=1), zone)


class DueDayFilter(admin.SimpleListFilter):
    """Runs due on a local day of the site's zone (``settings.TIME_ZONE``)."""

    title = _("due")
    parameter_name = DUE_PARAMETER

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [
            (TODAY, _("Today")),
            (YESTERDAY, _("Yesterday")),
            (LAST_7_DAYS, _("Last 7 days")),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() not in (TODAY, YESTERDAY, LAST_7_DAYS):
            return queryset
        start, end = local_days(str(self.value()), timezone.now())
        return queryset.filter(due_at__gte=start, due_at__lt=end)


class HandledFilter(admin.SimpleListFilter):
    """Whether someone marked the run handled."""

    title = _("handled")
    parameter_name = HANDLED_PARAMETER

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("yes", _("Yes")), ("no", _("No"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() in ("yes", "no"):
            return queryset.filter(handled_at__isnull=self.value() == "no")
        return queryset


class DigestFilter(admin.SimpleListFilter):
    """Digests (their task is one the engine folded, ``messages.digests.is_digest``), the
    other runs, or the runs carried in a digest."""

    title = _("digest")
    parameter_name = DIGEST_PARAMETER

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [
            ("yes", _("Digests")),
            ("no", _("Not digests")),
            ("items", _("Carried in a digest")),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        digests = Q(task__payload__has_key=DIGEST_KEY)
        if self.value() == "yes":
            return queryset.filter(digests)
        if self.value() == "no":
            return queryset.exclude(digests)
        if self.value() == "items":
            return queryset.filter(digest__isnull=False)
        return queryset


class KindListFilter(admin.AllValuesFieldListFilter):
    """The kinds in use, each named by its translated label (``kinds.label``) instead of
    its code; the query string is the field's own (``kind__exact=follow_up``), so links
    made elsewhere (the dashboard's) still land on it."""

    def choices(self, changelist: Any) -> Any:
        # "All", then one choice per kind in ``lookup_choices`` order (displayed as the
        # kind, with its count when facets are on), then the empty value if any.
        names = [str(value) for value in self.lookup_choices if value is not None]
        for index, choice in enumerate(super().choices(changelist)):
            if 1 <= index <= len(names):
                name = names[index - 1]
                display = str(choice["display"])
                choice = {**choice, "display": kinds.label(name) + display[len(name) :]}
            yield choice
