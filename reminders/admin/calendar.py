"""The admin of calendar days (``reminders.calendars.days``): ops enter a year's official
schedule here, or check what ``reminders_calendar import`` entered.

* Calendar days: one date of a calendar, rest or working, with its source; a form for a
  range ("2027-02-06 to 2027-02-13 rest", one click for a holiday week), which may also
  declare its year entered in full.
* Calendar years entered in full: a year ops declare covered, its days not entered
  following Monday to Friday.

Adding, changing and deleting either need ``reminders.edit_calendarday`` (the
operator role has it, the viewer role does not), checked on the server for every page
and POST; viewing needs the model's view permission, and so does the range form (a page
of the days' admin: ``edit_calendarday`` alone does not open it). Who saved a row is recorded
(``changed_by``, a username). The range form calls ``calendar_days.enter``, as the
import does.
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import models
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.formats import date_format
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from .. import calendars
from ..calendars.days import EDIT_PERMISSION, CalendarDay, CalendarYear, DayKind, Entry, enter

# The longest range the form enters at once: a year.
RANGE_DAYS = 366


def _calendar_field(**kwargs: Any) -> forms.ChoiceField:
    """The configured calendars' names, built per form (settings may change)."""
    return forms.ChoiceField(
        label=_("calendar"), choices=[(name, name) for name in calendars.names()], **kwargs
    )


class CalendarDayForm(forms.ModelForm):
    class Meta:
        model = CalendarDay
        fields = ("calendar", "day", "kind", "note")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["calendar"] = _calendar_field(initial=_default_calendar())


class CalendarYearForm(forms.ModelForm):
    class Meta:
        model = CalendarYear
        fields = ("calendar", "year", "note")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["calendar"] = _calendar_field(initial=_default_calendar())


class RangeForm(forms.Form):
    """Every date from ``first`` to ``last`` (inclusive), rest or working, one source."""

    first = forms.DateField(label=_("from"), help_text=_("YYYY-MM-DD"))
    last = forms.DateField(label=_("to"), help_text=_("YYYY-MM-DD, included"))
    kind = forms.ChoiceField(label=_("rest or working"), choices=DayKind.choices)
    note = forms.CharField(
        label=_("source"),
        max_length=200,
        help_text=_("Where this comes from, e.g. the official notice's number."),
    )
    complete = forms.BooleanField(
        label=_("the year's official schedule is now entered in full"),
        required=False,
        help_text=_(
            "Tick with the last range of the notice: the year is then covered, its other "
            "days follow Monday to Friday, and the warnings stop."
        ),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields = {"calendar": _calendar_field(initial=_default_calendar()), **self.fields}

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or self.cleaned_data
        first, last = cleaned.get("first"), cleaned.get("last")
        if isinstance(first, date) and isinstance(last, date):
            if last < first:
                self.add_error("last", gettext("The range ends before it starts."))
            elif (last - first).days >= RANGE_DAYS:
                self.add_error("last", gettext("At most %(n)d days at once.") % {"n": RANGE_DAYS})
            elif cleaned.get("complete") and first.year != last.year:
                self.add_error(
                    "complete",
                    gettext("A range that completes a year stays within that year."),
                )
        return cleaned

    def entries(self) -> list[Entry]:
        first, last = self.cleaned_data["first"], self.cleaned_data["last"]
        kind, note = self.cleaned_data["kind"], self.cleaned_data["note"]
        return [
            Entry(first + timedelta(days=n), kind, note) for n in range((last - first).days + 1)
        ]


def _default_calendar() -> str:
    names = calendars.names()
    return "cn" if "cn" in names else (names[0] if names else "")


class CalendarEditAdmin(admin.ModelAdmin):
    """Editing needs ``edit_calendarday``; saving records who."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(EDIT_PERMISSION)

    def has_change_permission(self, request: HttpRequest, obj: models.Model | None = None) -> bool:
        return request.user.has_perm(EDIT_PERMISSION)

    def has_delete_permission(self, request: HttpRequest, obj: models.Model | None = None) -> bool:
        return request.user.has_perm(EDIT_PERMISSION)

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        obj.changed_by = request.user.get_username()[:150]
        super().save_model(request, obj, form, change)


@admin.register(CalendarDay)
class CalendarDayAdmin(CalendarEditAdmin):
    form = CalendarDayForm
    list_display = ("day", "weekday", "kind", "calendar", "note", "changed_by", "changed_at")
    list_filter = ("calendar", "kind")
    date_hierarchy = "day"
    search_fields = ("note",)
    ordering = ("calendar", "day")
    readonly_fields = ("changed_by", "changed_at")

    @admin.display(description=_("weekday"), ordering="day")
    def weekday(self, day: CalendarDay) -> str:
        return date_format(day.day, "l")

    def get_urls(self) -> list[URLPattern]:
        enter_range = path(
            "range/",
            self.admin_site.admin_view(self.range_view),
            name="reminders_calendarday_range",
        )
        return [enter_range, *super().get_urls()]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        extra = dict(extra_context or {})
        if self.may_enter_range(request):
            extra["range_url"] = reverse(f"{self.admin_site.name}:reminders_calendarday_range")
        return super().changelist_view(request, extra)

    def may_enter_range(self, request: HttpRequest) -> bool:
        """The range form is a page of the days' admin: it needs their view permission
        as well as ``edit_calendarday``."""
        return self.has_view_permission(request) and self.has_add_permission(request)

    def range_view(self, request: HttpRequest) -> HttpResponse:
        """The form for a range of dates; 403 without the days' view permission and
        ``edit_calendarday``."""
        if not self.may_enter_range(request):
            raise PermissionDenied
        form = RangeForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            entries = form.entries()
            first = entries[0].day
            complete = [first.year] if form.cleaned_data["complete"] else []
            done = enter(
                form.cleaned_data["calendar"],
                entries,
                by=request.user.get_username(),
                complete=complete,
            )
            message = ngettext(
                "%(count)d day entered (%(created)d new, %(changed)d changed).",
                "%(count)d days entered (%(created)d new, %(changed)d changed).",
                len(entries),
            ) % {"count": len(entries), "created": done.created, "changed": done.changed}
            if done.years:
                message += " " + gettext("%(year)d is entered in full.") % {"year": first.year}
            self.message_user(request, message, messages.SUCCESS)
            return HttpResponseRedirect(
                reverse(f"{self.admin_site.name}:reminders_calendarday_changelist")
            )
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": gettext("Enter a range of calendar days"),
            "form": form,
        }
        return TemplateResponse(request, "admin/reminders/calendarday/range.html", context)


@admin.register(CalendarYear)
class CalendarYearAdmin(CalendarEditAdmin):
    form = CalendarYearForm
    list_display = ("calendar", "year", "note", "changed_by", "changed_at")
    list_filter = ("calendar",)
    ordering = ("calendar", "year")
    readonly_fields = ("changed_by", "changed_at")
