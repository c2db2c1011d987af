"""Recipients' preferences in the admin: ops change one (an opt-out, their own quiet
hours, a move to a digest) on a recipient's behalf, saying why; every change is kept and shown
(``PreferenceChange``, ``QuietHoursChange``, read-only).

A change goes through ``reminders.preferences.set``, the CRM's own API: the same
refusals (a mandatory kind cannot be opted out of), the same record of who (the signed-in
user's username) and why (required here: ops act for someone else). Deleting is not
offered: opting back in is a change, and kept as one; a recipient's quiet hours go back
to the kinds' own through the API (``preferences.clear_quiet_hours``).

Quiet hours saved without a zone (before the field existed) are read in the project's
``TIME_ZONE``: the list and the change page show that zone, saying it is the default,
never a blank.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from .. import preferences, registry
from ..models import (
    Preference,
    PreferenceChange,
    QuietHours,
    QuietHoursChange,
    validate_calendar,
)
from ..models.preferences import project_timezone
from .read_only import ReadOnlyAdmin


class PreferenceForm(forms.ModelForm):
    kind = forms.ChoiceField(label=_("kind"), choices=())
    reason = forms.CharField(
        label=_("why"),
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=_("Kept with the change: whose wish it is, and how it was asked for."),
    )

    class Meta:
        model = Preference
        fields = ("recipient", "kind", "opted_out", "digest", "reason")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        kinds = [(name, f"{registry.label(name)} ({name})") for name in registry.names()]
        self.fields["kind"].choices = kinds  # type: ignore[attr-defined]
        if self.instance.pk:
            # A row is one recipient's choice about one kind: change the choice only.
            self.fields["recipient"].disabled = True
            self.fields["kind"].disabled = True

    def clean(self) -> dict[str, Any]:
        """The API's own checks, before anything is saved: a mandatory kind refused."""
        data = super().clean() or {}
        kind = data.get("kind")
        if data.get("opted_out") and kind and registry.mandatory(kind):
            raise ValidationError(
                {"opted_out": _("This kind is mandatory: its recipients cannot opt out of it.")}
            )
        if data.get("opted_out") and data.get("digest"):
            raise ValidationError(
                {"digest": _("A kind opted out of is not sent in a digest either: choose one.")}
            )
        return data


@admin.register(Preference)
class PreferenceAdmin(admin.ModelAdmin):
    form = PreferenceForm
    list_display = (
        "recipient",
        "kind",
        "opted_out",
        "digest",
        "changed_by",
        "changed_at",
        "reason",
    )
    list_filter = ("opted_out", "digest", "kind")
    search_fields = ("recipient",)
    ordering = ("recipient", "kind")

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: Preference, form: Any, change: bool) -> None:
        """Through the API, as the CRM changes it: the change and who made it kept."""
        data = form.cleaned_data
        choice = preferences.set(
            obj.recipient,
            obj.kind,
            opted_out=bool(data["opted_out"]),
            digest=bool(data["digest"]),
            by=request.user.get_username(),
            reason=data["reason"],
        )
        saved = Preference.objects.get(recipient=obj.recipient, kind=choice.kind)
        obj.pk, obj.changed_by, obj.changed_at = saved.pk, saved.changed_by, saved.changed_at


@admin.register(PreferenceChange)
class PreferenceChangeAdmin(ReadOnlyAdmin):
    list_display = (
        "changed_at",
        "recipient",
        "kind",
        "opted_out",
        "digest",
        "changed_by",
        "reason",
    )
    list_filter = ("opted_out", "digest", "kind")
    search_fields = ("recipient", "changed_by")


class QuietHoursForm(forms.ModelForm):
    reason = PreferenceForm.base_fields["reason"]

    class Meta:
        model = QuietHours
        fields = ("recipient", "hours", "calendar", "timezone", "reason")
        help_texts = {
            "hours": _(
                'Local HH:MM-HH:MM on the recipient\'s clock, "21:00-08:30", leaving at '
                "least an hour of the day open; empty: none."
            ),
            "calendar": _("A working-day calendar whose rest days are quiet all day; empty: none."),
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["recipient"].disabled = True
        if self.instance.pk and not self.instance.timezone:
            self.initial["timezone"] = project_timezone()
            self.fields["timezone"].help_text = _(
                "None was saved: the hours are read in the project's zone, the default."
            )

    def clean(self) -> dict[str, Any]:
        """The API's own check of the calendar, before anything is saved (the window's is
        the model's, ``validate_quiet_hours``, run by the form as the API runs it)."""
        data = super().clean() or {}
        calendar = data.get("calendar") or ""
        if calendar:
            try:
                validate_calendar(calendar)
            except ValidationError as exc:
                self.add_error("calendar", exc)
        return data


@admin.register(QuietHours)
class QuietHoursAdmin(admin.ModelAdmin):
    form = QuietHoursForm
    list_display = (
        "recipient",
        "hours",
        "calendar",
        "zone",
        "changed_by",
        "changed_at",
        "reason",
    )
    search_fields = ("recipient",)
    ordering = ("recipient",)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description=_("time zone"), ordering="timezone")
    def zone(self, row: QuietHours) -> str:
        """The zone the hours are read in; the project's, said so, for none saved."""
        if row.timezone:
            return row.timezone
        return _("%(zone)s (the default)") % {"zone": project_timezone()}

    def save_model(self, request: HttpRequest, obj: QuietHours, form: Any, change: bool) -> None:
        """Through the API, as the CRM sets them: the change and who made it kept."""
        data = form.cleaned_data
        preferences.set_quiet_hours(
            obj.recipient,
            data.get("hours") or "",
            calendar=data.get("calendar") or "",
            tz=data["timezone"],
            by=request.user.get_username(),
            reason=data["reason"],
        )
        saved = QuietHours.objects.get(recipient=obj.recipient)
        obj.pk, obj.changed_by, obj.changed_at = saved.pk, saved.changed_by, saved.changed_at


@admin.register(QuietHoursChange)
class QuietHoursChangeAdmin(ReadOnlyAdmin):
    list_display = (
        "changed_at",
        "recipient",
        "hours",
        "calendar",
        "timezone",
        "cleared",
        "changed_by",
    )
    search_fields = ("recipient", "changed_by")
