"""Recipients' preferences in the admin: ops change one on a recipient's behalf, saying
why; every change is kept and shown (``PreferenceChange``, read-only).

A change goes through ``reminders.preferences.set``, the CRM's own API: the same
refusals (a mandatory kind cannot be opted out of), the same record of who (the signed-in
user's username) and why (required here: ops act for someone else). Deleting a
preference is not offered: opting back in is a change, and kept as one.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from .. import preferences, registry
from ..models import Preference, PreferenceChange
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
        fields = ("recipient", "kind", "opted_out", "reason")

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
        return data


@admin.register(Preference)
class PreferenceAdmin(admin.ModelAdmin):
    form = PreferenceForm
    list_display = ("recipient", "kind", "opted_out", "changed_by", "changed_at", "reason")
    list_filter = ("opted_out", "kind")
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
            by=request.user.get_username(),
            reason=data["reason"],
        )
        saved = Preference.objects.get(recipient=obj.recipient, kind=choice.kind)
        obj.pk, obj.changed_by, obj.changed_at = saved.pk, saved.changed_by, saved.changed_at


@admin.register(PreferenceChange)
class PreferenceChangeAdmin(ReadOnlyAdmin):
    list_display = ("changed_at", "recipient", "kind", "opted_out", "changed_by", "reason")
    list_filter = ("opted_out", "kind")
    search_fields = ("recipient", "changed_by")
