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

The payload is entered as fields: one per key a registered kind declares
(``Kind.payload_fields``), each marked with the kinds that read it, so that the page shows
those of the kind chosen (``payload_form_fields``). The JSON keeps the other keys, a
CRM's own; a key given both ways, differently, is refused on its field. The payload
saved is the JSON's keys and the chosen kind's fields that are filled; the fields of
other kinds are not read. A builder's refusal that names ``payload["<key>"]`` is shown
on that key's field.
"""

from __future__ import annotations

import re
from datetime import date, datetime, time
from typing import Any, cast

from django import forms
from django.conf import settings as django_settings
from django.core.exceptions import ValidationError
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .. import calendars, kinds
from ..conf import settings as conf
from ..exceptions import UnknownKind
from ..intake import validation
from ..models import Priority, ScheduledTask
from ..registry import PayloadField
from ..schedule import timing

# Saving a task with any of these changed re-plans it, as ``reminders.api.schedule`` does.
SCHEDULE_FIELDS = ("cron", "run_at", "timezone")
# A payload key's form field is named so: ``payload_customer``.
PAYLOAD_PREFIX = "payload_"
# How a builder's refusal names a payload key.
NAMED_KEY = re.compile(r'payload\["(\w+)"\]')


def payload_form_fields() -> dict[str, forms.Field]:
    """A form field for each payload key a registered kind declares, named
    ``payload_<key>`` (a key two kinds read is one field, as the first declares it), its
    widget marked with the kinds that read it (``data-kinds``) for the page to show
    those of the kind chosen, in its order."""
    found: dict[str, tuple[PayloadField, dict[str, int]]] = {}
    # The kinds' own keys first, then those every kind reads (its own text, the language).
    for common in (False, True):
        for name in kinds.names():
            kind = kinds.get(name)
            own = {one.name for one in kind.fields}
            for place, one in enumerate(kind.payload_fields()):
                if (one.name not in own) == common:
                    found.setdefault(one.name, (one, {}))[1][name] = place
    return {
        PAYLOAD_PREFIX + key: _payload_field(one, places) for key, (one, places) in found.items()
    }


def _payload_field(one: PayloadField, places: dict[str, int]) -> forms.Field:
    """The form field of ``one``, marked with the kinds that read it and where it comes
    in each kind's own order (``data-places``: the page orders the chosen kind's so)."""
    marked = {
        "data-kinds": " ".join(places),
        "data-places": " ".join(f"{kind}:{place}" for kind, place in places.items()),
    }
    common: dict[str, Any] = {"label": one.label, "help_text": one.help, "required": False}
    if one.type == "number":
        return forms.IntegerField(min_value=0, widget=forms.NumberInput(attrs=marked), **common)
    if one.type == "language":
        choices = [("", _("the site's language")), *django_settings.LANGUAGES]
        return forms.ChoiceField(choices=choices, widget=forms.Select(attrs=marked), **common)
    text = {**marked, "class": "vTextField"}
    widget: forms.Widget
    if one.type == "long_text":
        widget = forms.Textarea(attrs={**text, "rows": 3})
    elif one.type == "url":
        widget = forms.URLInput(attrs=text)
    else:
        widget = forms.TextInput(attrs=text)
    return forms.CharField(widget=widget, strip=True, **common)


def _shown_as_is(one: PayloadField, value: Any) -> bool:
    """Whether ``value``, stored under ``one``'s key, reads back unchanged from its field:
    else it stays in the JSON, so that saving the form never changes it unseen (an
    explicit ``""``, a number stored as text, a language no longer declared)."""
    if one.type == "number":
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0
    if one.type == "language":
        return value in dict(django_settings.LANGUAGES)
    return isinstance(value, str) and value != "" and value == value.strip()


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
        if "payload" in self.fields:
            self._payload_initial()

    def _payload_initial(self) -> None:
        """The stored payload in the fields of the task's kind; the other keys in the
        JSON."""
        payload = self.instance.payload if isinstance(self.instance.payload, dict) else {}
        others = dict(payload)
        for one in self._declared(self.instance.kind):
            name = PAYLOAD_PREFIX + one.name
            if name in self.fields and one.name in others and _shown_as_is(one, others[one.name]):
                self.initial[name] = others.pop(one.name)
        self.initial["payload"] = others
        payload_field = self.fields["payload"]
        payload_field.label = _("other payload keys (JSON)")
        payload_field.required = False
        payload_field.help_text = _(
            "Keys of the CRM's own beyond the fields above, as a JSON object: {} for none."
        )

    @staticmethod
    def _declared(kind: str | None) -> tuple[PayloadField, ...]:
        try:
            return kinds.get(kind or "").payload_fields()
        except UnknownKind:
            return ()

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data
        if "payload" in self.fields and "payload" not in self.errors:
            self._clean_payload(cleaned)
        if not cleaned.get("priority"):
            try:
                cleaned["priority"] = kinds.policy(cleaned.get("kind") or "").priority
            except UnknownKind:
                cleaned["priority"] = Priority.NORMAL  # the kind's own error is on its field
        return cleaned

    def _clean_payload(self, cleaned: dict[str, Any]) -> None:
        """The payload saved: the JSON's keys and the chosen kind's filled fields."""
        others = cleaned.get("payload")
        if others in (None, ""):
            others = {}
        if not isinstance(others, dict):
            self.add_error("payload", _('It must be a JSON object: {"key": "value"}.'))
            return
        payload = dict(others)
        for one in self._declared(cleaned.get("kind")):
            name = PAYLOAD_PREFIX + one.name
            value = cleaned.get(name)
            if value in (None, "") or name in self.errors:
                continue
            if one.name in others and others[one.name] != value:
                self.add_error(
                    name,
                    _("The JSON below gives %(key)s too, as %(value)s: keep one.")
                    % {"key": one.name, "value": others[one.name]},
                )
                continue
            payload[one.name] = value
        cleaned["payload"] = payload

    def _post_clean(self) -> None:
        # The ModelForm builds the task and runs its full_clean; then come the checks that
        # need the channel, the ones ``reminders.api.schedule`` runs after its full_clean.
        super()._post_clean()  # type: ignore[misc]  # private, so not in django-stubs
        try:
            validation.check_sendable(self.instance, skip=set(self.errors), savepoints=True)
        except ValidationError as exc:
            self._add_sendable_errors(exc)

    def _add_sendable_errors(self, exc: ValidationError) -> None:
        """The checks' errors, each one naming a payload key on that key's field."""
        by_field = exc.error_dict if hasattr(exc, "error_dict") else {None: exc.error_list}
        for field_name, errors in by_field.items():
            for error in errors:
                text = " ".join(error.messages)
                named = NAMED_KEY.search(text)
                target = PAYLOAD_PREFIX + named.group(1) if named else None
                if target in self.fields and target not in self.errors:
                    self.add_error(target, error)
                else:
                    self.add_error(field_name if field_name in self.fields else None, error)
