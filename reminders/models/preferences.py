"""What each recipient wants: ``Preference``, one row per recipient and kind (opted out
or not), and ``QuietHours``, one per recipient; ``PreferenceChange`` and
``QuietHoursChange`` keep every change of them.

A recipient (through the CRM's API, ``reminders.preferences``, or ops on their behalf in
the admin) opts out of a kind that is not mandatory (``Policy.mandatory``). The engine
reads it when it starts a run (``engine.starting``): a run of a kind its recipient opted
out of is ``skipped`` with code ``opted_out``, never sent, and says since when, by whom
and why; one of a kind they moved to a digest (``digest``) is folded with the others of
its window into one message (``engine.digests``).

Invariants: one row per recipient and kind (unique in the database); every change of
one is a ``PreferenceChange`` written in the same transaction, with who made it and why
(both required, in the database too), so what a recipient was sent or not can always be
explained; history outlives the preference.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from .validators import validate_quiet_hours, validate_recipient, validate_timezone


class Preference(models.Model):
    recipient = models.CharField(_("recipient"), max_length=64, validators=[validate_recipient])
    kind = models.CharField(_("kind"), max_length=64)
    opted_out = models.BooleanField(_("opted out"), default=False)
    # Moved to a digest (``Policy.digest_seconds``, else ``REMINDERS_DIGEST_SECONDS``).
    digest = models.BooleanField(
        _("in a digest"),
        default=False,
        db_default=False,
        help_text=_("Fold this kind's messages into one digest per window."),
    )
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
        state = "out" if self.opted_out else "digest" if self.digest else "in"
        return f"{self.recipient} / {self.kind}: {state}"


class PreferenceChange(models.Model):
    recipient = models.CharField(_("recipient"), max_length=64, db_index=True)
    kind = models.CharField(_("kind"), max_length=64)
    opted_out = models.BooleanField(_("opted out"))
    digest = models.BooleanField(_("in a digest"), default=False, db_default=False)
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


def project_timezone() -> str:
    """The project's ``TIME_ZONE``: whose clock a recipient's quiet hours are read on
    unless they say."""
    return str(settings.TIME_ZONE)


class QuietHours(models.Model):
    """A recipient's own quiet hours: they replace the kinds' (``Policy.quiet_hours`` and
    ``quiet_calendar``) for every kind that does not break them, read on their own clock
    (``zone``: ``timezone``, else the project's ``TIME_ZONE``), whatever their tasks'
    zones. ``hours`` empty: none at all, whatever
    the kinds say; no row: the kinds' own."""

    recipient = models.CharField(
        _("recipient"), max_length=64, unique=True, validators=[validate_recipient]
    )
    hours = models.CharField(
        _("quiet hours"), max_length=11, blank=True, validators=[validate_quiet_hours]
    )
    calendar = models.CharField(_("quiet on the rest days of"), max_length=64, blank=True)
    # "": written before the field (or by the code before it): the project's TIME_ZONE.
    timezone = models.CharField(
        _("time zone"),
        max_length=64,
        default=project_timezone,
        db_default="",
        validators=[validate_timezone],
    )
    changed_by = models.CharField(_("changed by"), max_length=150)
    reason = models.TextField(_("why"), blank=True)
    changed_at = models.DateTimeField(_("changed"))

    class Meta:
        verbose_name = _("quiet hours")
        verbose_name_plural = _("quiet hours")
        constraints = [
            models.CheckConstraint(
                condition=~Q(changed_by=""), name="reminders_quiet_changed_by_someone"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.recipient}: {self.hours or '-'} {self.zone}"

    @property
    def zone(self) -> str:
        """The zone whose clock the hours are read on."""
        return self.timezone or project_timezone()


class QuietHoursChange(models.Model):
    """Every change of a recipient's quiet hours; ``cleared``: back to the kinds' own."""

    recipient = models.CharField(_("recipient"), max_length=64, db_index=True)
    hours = models.CharField(_("quiet hours"), max_length=11, blank=True)
    calendar = models.CharField(_("quiet on the rest days of"), max_length=64, blank=True)
    timezone = models.CharField(_("time zone"), max_length=64, blank=True, db_default="")
    cleared = models.BooleanField(_("back to the kinds' own"), default=False)
    changed_by = models.CharField(_("changed by"), max_length=150)
    reason = models.TextField(_("why"), blank=True)
    changed_at = models.DateTimeField(_("changed"))

    class Meta:
        verbose_name = _("quiet hours change")
        verbose_name_plural = _("quiet hours changes")
        ordering = ("-changed_at", "-pk")
        constraints = [
            models.CheckConstraint(
                condition=~Q(changed_by=""), name="reminders_quiet_change_by_someone"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.recipient}: {self.hours or '-'} by {self.changed_by}"
