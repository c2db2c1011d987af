"""The validators of the task fields: each names the field's rule and the value at fault.

Migrations name them by their path in ``reminders.models``, which re-exports them.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

from .. import calendars, recipients, registry
from ..conf import settings as conf
from ..schedule import timing
from ..schedule.quiet import BadQuietHours, QuietWindow
from .choices import DIGEST_KEY


def validate_kind(value: str) -> None:
    if value not in registry.names():
        raise ValidationError(
            _("%(value)s is not a registered kind (known: %(known)s)."),
            code="unknown_kind",
            params={"value": value, "known": ", ".join(registry.names())},
        )


def validate_cron(value: str) -> None:
    try:
        timing.validate_cron(value)
    except timing.InvalidSchedule as exc:
        raise ValidationError(str(exc), code="invalid_cron") from None


def validate_timezone(value: str) -> None:
    try:
        timing.zone(value)
    except timing.InvalidSchedule as exc:
        raise ValidationError(str(exc), code="invalid_timezone") from None


def validate_quiet_hours(value: str) -> None:
    """A quiet window, ``HH:MM-HH:MM`` leaving at least an hour of the day open
    (``schedule.quiet.QuietWindow``: the rule of the model, the API and the admin)."""
    try:
        QuietWindow.parse(value)
    except BadQuietHours as exc:
        raise ValidationError(str(exc), code="invalid_quiet_hours") from None


def validate_channel(value: str) -> None:
    known = list(conf.CHANNELS)
    if value not in known:
        raise ValidationError(
            _("%(value)s is not a configured channel (known: %(known)s)."),
            code="unknown_channel",
            params={"value": value, "known": ", ".join(known)},
        )


def validate_calendar(value: str) -> None:
    known = calendars.names()
    if value not in known:
        raise ValidationError(
            _("%(value)s is not a configured calendar (known: %(known)s)."),
            code="unknown_calendar",
            params={"value": value, "known": ", ".join(known)},
        )


def validate_recipient(value: str) -> None:
    """One WeCom member id: never "@all", a "|" list or a control character."""
    problem = recipients.member_id_problem(value)
    if problem is not None:
        raise ValidationError(problem.message, code=problem.code, params=problem.params)


def validate_key(value: str) -> None:
    char = recipients.control_character(value)
    if char is not None:
        raise ValidationError(
            _("The key contains the control character %(char)s."),
            code="control_character",
            params={"char": char},
        )


def validate_payload(value: Any) -> None:
    if not isinstance(value, dict):
        raise ValidationError(_("Payload must be a JSON object."), code="invalid_payload")
    if DIGEST_KEY in value:
        # The engine's own mark of a digest (``messages.digests``): never the CRM's.
        raise ValidationError(
            _("Payload key %(key)r is the engine's own."),
            code="invalid_payload",
            params={"key": DIGEST_KEY},
        )
