"""The task's change form: what ops may enter, and how it is read.

Kinds, channels and working-day calendars are registered at run time, so their choices
are built per form; a stored value no longer configured stays selectable, so that
opening a task never silently changes it (validation still reports it). A one-shot
time is shown and read on the wall clock of the task's own zone, as ``api.schedule``
reads a naive ``at`` in ``tz``. Left empty, the priority is the kind's and the calendar
the kind's (NULL); "every day" is stored as ``""``. The form runs the checks
``api.schedule`` runs after the task's ``full_clean`` (``validation.check_sendable``),
each in a savepoint: a builder whose query fails is an error on the form, and the page's
transaction goes on (PostgreSQL would otherwise abort it).
"""

from __future__ import annotations

from datetime import date, datetime, time
from typing import Any, cast

from django import forms
from django.core.exceptions import ValidationError
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .. import calendars, kinds
from ..conf import settings as conf
from ..exceptions import UnknownKind
from ..intake import validation
from ..models import Priority, ScheduledTask
from ..schedule import timing

# Saving a task with any of these changed re-plans it, as ``reminders.api.schedule`` does.
SCHEDULE_FIELDS = ("cron", "run_at", "timezone")


def _choices_with(current: str | None, choices: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """Keep a stored value selectable even if its kind or channel is no longer configured,
    so that opening a task does not silently change it; validation still reports it."""
    if current and current not in dict(choices):
        return [*choices, (current, current)]
    return choices


class WallClockDateTimeField(forms.SplitDateTimeField):
    """A date and a time as entered, without a zone: the form reads them in the task's."""

    def compress(self, data_list: tuple[date, time] | None) -> datetime | None:
        if not data_list:
            return None
        day, clock = data_list
        if day in self.empty_values:
            raise ValidationError(self.error_messages["invalid_date"], code="invalid_date")
        if clock in self.empty_values:
            raise ValidationError(self.error_messages["invalid_time"], code="invalid_time")
        return datetime.combine(day, clock)


def wall_clock(moment: datetime, zone_name: str) -> datetime:
    """``moment`` as the clocks of the zone read it (UTC if the zone is not valid)."""
    try:
        return moment.astimezone(timing.zone(zone_name)).replace(tzinfo=None)
    except timing.InvalidSchedule:
        return moment.astimezone(timing.UTC).replace(tzinfo=None)


class RunAtInTaskZoneForm(forms.ModelForm):
    """Shows ``run_at`` in the task's ``timezone`` and reads what is entered in the zone
    the form gives, instead of the site's (its field must be a ``WallClockDateTimeField``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.run_at is not None:
            self.initial["run_at"] = wall_clock(self.instance.run_at, self.instance.timezone)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or self.cleaned_data
        run_at = cleaned.get("run_at")
        if isinstance(run_at, datetime) and timezone.is_naive(run_at):
            cleaned["run_at"] = timing.wall_clock_in(run_at, cleaned.get("timezone") or "")
        return cleaned


# The admin's word for a task's calendar ``""`` (every day), apart from NULL (the kind's).
EVERY_DAY = "*"


def _calendar_choice(value: str | None) -> str:
    return "" if value is None else (value or EVERY_DAY)


def _calendar_field(current: str | None) -> forms.TypedChoiceField:
    """Left empty, the kind's calendar applies (NULL); "every day" is stored as ""."""
    choices: list[tuple[str, Any]] = [("", _("the kind's calendar")), (EVERY_DAY, _("every day"))]
    choices += [(name, name) for name in calendars.names()]
    return forms.TypedChoiceField(
        label=_("working-day calendar"),
        choices=_choices_with(_calendar_choice(current) or None, choices),
        coerce=lambda choice: "" if choice == EVERY_DAY else choice,
        empty_value=None,
        required=False,
        help_text=_("Occurrences on the calendar's rest days are skipped, with the reason."),
    )


class ScheduledTaskForm(RunAtInTaskZoneForm):
    class Meta:
        model = ScheduledTask
        fields = (
            "kind",
            "recipient",
            "channel",
            "priority",
            "calendar",
            "payload",
            "key",
            *SCHEDULE_FIELDS,
        )
        field_classes = {"run_at": WallClockDateTimeField}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Kinds and channels are registered at run time, so the choices are built per form.
        if "kind" in self.fields:
            self.fields["kind"].widget = forms.Select(
                choices=_choices_with(
                    self.instance.kind,
                    [("", "---------")]
                    + [(name, f"{kinds.get(name).label} ({name})") for name in kinds.names()],
                )
            )
        if "channel" in self.fields:
            self.fields["channel"].widget = forms.Select(
                choices=_choices_with(
                    self.instance.channel, [(alias, alias) for alias in conf.CHANNELS]
                )
            )
        if "priority" in self.fields:
            # Left empty, the kind's own priority applies, as with ``api.schedule``.
            priority = cast(forms.ChoiceField, self.fields["priority"])
            priority.required = False
            priority.choices = [("", _("the kind's default")), *Priority.choices]

        if "calendar" in self.fields:
            self.fields["calendar"] = _calendar_field(self.instance.calendar)
            self.initial["calendar"] = _calendar_choice(self.instance.calendar)

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data
        if not cleaned.get("priority"):
            try:
                cleaned["priority"] = kinds.policy(cleaned.get("kind") or "").priority
            except UnknownKind:
                cleaned["priority"] = Priority.NORMAL  # the kind's own error is on its field
        return cleaned

    def _post_clean(self) -> None:
        # The ModelForm builds the task and runs its full_clean; then come the checks that
        # need the channel, the ones ``reminders.api.schedule`` runs after its full_clean.
        super()._post_clean()  # type: ignore[misc]  # private, so not in django-stubs
        try:
            validation.check_sendable(self.instance, skip=set(self.errors), savepoints=True)
        except ValidationError as exc:
            self.add_error(None, exc)
