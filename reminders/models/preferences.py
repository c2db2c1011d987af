"""What each recipient wants of each kind: ``Preference``, one row per recipient and kind,
and ``PreferenceChange``, every change of it, kept.

A recipient (through the CRM's API, ``reminders.preferences``, or ops on their behalf in
the admin) opts out of a kind that is not mandatory (``Policy.mandatory``). The engine
reads it when it starts a run (``engine.starting``): a run of a kind its recipient opted
out of is ``skipped`` with code ``opted_out``, never sent, and says since when, by whom
and why.

Invariants: one row per recipient and kind (unique in the database); every change of
one is a ``PreferenceChange`` written in the same transaction, with who made it and why
(both required, in the database too), so what a recipient was sent or not can always be
explained; history outlives the preference.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from .validators import validate_recipient


class Preference(models.Model):
    recipient = models.CharField(_("recipient"), max_length=64, validators=[validate_recipient])
    kind = models.CharField(_("kind"), max_length=64)
    opted_out = models.BooleanField(_("opted out"), default=False)
    changed_by = models.CharField(_("changed by"), max_length=150)
    reason = models.TextField(_("why"), blank=True)
    changed_at = models.DateTimeField(_("changed"))

    class Meta:
        verbose_name = _("preference")
        verbose_name_plural = _("preferences")
        constraints = [
            models.UniqueConstraint(
                fields=["recipient", "kind"], name="reminders_preference_one_per_kind"
            ),
            models.CheckConstraint(
                condition=~Q(changed_by=""), name="reminders_preference_changed_by_someone"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.recipient} / {self.kind}: {'out' if self.opted_out else 'in'}"


class PreferenceChange(models.Model):
    recipient = models.CharField(_("recipient"), max_length=64, db_index=True)
    kind = models.CharField(_("kind"), max_length=64)
    opted_out = models.BooleanField(_("opted out"))
    changed_by = models.CharField(_("changed by"), max_length=150)
    reason = models.TextField(_("why"), blank=True)
    changed_at = models.DateTimeField(_("changed"))

    class Meta:
        verbose_name = _("preference change")
        verbose_name_plural = _("preference changes")
        ordering = ("-changed_at", "-pk")
        constraints = [
            models.CheckConstraint(
                condition=~Q(changed_by=""), name="reminders_preference_change_by_someone"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.recipient} / {self.kind} by {self.changed_by} at {self.changed_at}"
