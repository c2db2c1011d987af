"""Schedules the CRM names by their occasion rather than by cron: a member's birthday,
and the reply deadline of a customer's inquiry with its escalation.

Each helper builds items, the keyword arguments of ``api.schedule``, so that what it
makes is checked, upserted and saved by the one path (``reminders.intake.scheduling``), alone
or among thousands in ``api.schedule_many``. They refuse what is wrong with their own
parameters (``born``, ``arrived_at``, ``minutes``...) by name, before any item is made.

Birthdays: yearly at ``at`` (09:00) on the birthday, on the clock of the task's zone.
A 29 February birthday is greeted on the last day of February, the 28th in common years
and the 29th in leap years (cron day-of-month ``L`` of month 2: ``0 9 L 2 *``), so that
it is greeted every year rather than every fourth.

Inquiry timeouts: a one-shot at ``arrived_at`` plus ``minutes`` (minutes that pass, so
across a change of the clocks too), and optionally a second one to ``escalate_to``
``escalate_after_minutes`` later, whose payload adds ``escalated_from`` (the first
recipient's member id) and ``minutes`` (how long the inquiry will have waited by then).
Both are about the inquiry, so that ``api.cancel_for(inquiry)`` (its reply recorded)
cancels both, and keyed from ``key``, or else from the inquiry (its type and primary
key), so that scheduling again updates them instead of adding more. The two keys name
the inquiry's alerts (``inquiry_keys``), which a click treats as one: "I'll take it" on
one holds them all (``intake.clicks``).
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ValidationError
from django.db.models import Model
from django.utils import timezone

from ..schedule import timing
from . import about, users

BIRTHDAY_KIND = "birthday"
BIRTHDAY_TIME = time(9, 0)
INQUIRY_KIND = "inquiry_timeout"
# Told to an inquiry's owner when someone clicks "I'll take it" on its alert.
TAKEN_KIND = "inquiry_taken"
# The escalation's key: the first one's plus this.
ESCALATION_SUFFIX = ":escalation"


def birthday_cron(born: date, at: time = BIRTHDAY_TIME) -> str:
    """The cron expression of a yearly greeting at ``at`` on ``born``'s day and month;
    29 February is the last day of February (``L``)."""
    day = "L" if (born.month, born.day) == (2, 29) else str(born.day)
    return f"{at.minute} {at.hour} {day} {born.month} *"


def birthday_item(
    recipient: str | Model,
    born: date,
    *,
    at: time = BIRTHDAY_TIME,
    tz: str | None = None,
    key: str | None = None,
    about: Model | None = None,
    payload: dict[str, Any] | None = None,
    channel: str | None = None,
    priority: str | None = None,
    kind: str = BIRTHDAY_KIND,
) -> dict[str, Any]:
    """The ``api.schedule`` arguments of a yearly birthday greeting: for
    ``api.schedule_many``, or ``api.schedule(**item)``. ``ValidationError`` names
    ``born`` or ``at`` when they are not a date and a whole-minute wall-clock time."""
    errors: dict[str, str] = {}
    if not isinstance(born, date) or isinstance(born, datetime):
        errors["born"] = f"born must be a date, not {type(born).__name__}."
    if not isinstance(at, time):
        errors["at"] = f"at must be a time of day, not {type(at).__name__}."
    elif at.tzinfo is not None:
        errors["at"] = "at is a time on the clock of tz: give it without a zone, the zone as tz."
    elif at.second or at.microsecond:
        errors["at"] = f"at must be a whole minute, not {at.isoformat()}."
    if errors:
        raise ValidationError(errors)
    return {
        "kind": kind,
        "recipient": recipient,
        "cron": birthday_cron(born, at),
        "tz": tz,
        "key": key,
        "about": about,
        "payload": payload,
        "channel": channel,
        "priority": priority,
    }


def inquiry_timeout_items(
    recipient: str | Model,
    arrived_at: datetime,
    *,
    minutes: int,
    about: Model | None,
    escalate_to: str | Model | None = None,
    escalate_after_minutes: int | None = None,
    payload: dict[str, Any] | None = None,
    key: str | None = None,
) -> list[dict[str, Any]]:
    """The ``api.schedule`` arguments of an inquiry's timeout alert and, with
    ``escalate_to``, of its escalation (second). ``ValidationError`` names the parameter
    at fault."""
    reference = _checked_inquiry(
        arrived_at, minutes, about, escalate_to, escalate_after_minutes, payload, key
    )
    try:
        due = _utc(arrived_at) + timedelta(minutes=minutes)
        escalation_due = due + timedelta(minutes=escalate_after_minutes or 0)
    except OverflowError:
        raise ValidationError(
            {"arrived_at": f"arrived_at {arrived_at.isoformat()} is out of range."}
        ) from None
    first_key = key or f"{INQUIRY_KIND}:{reference}"
    items = [
        {
            "kind": INQUIRY_KIND,
            "recipient": recipient,
            "at": due,
            "payload": payload,
            "key": first_key,
            "about": about,
        }
    ]
    if escalate_to is not None and escalate_after_minutes is not None:
        items.append(
            {
                "kind": INQUIRY_KIND,
                "recipient": escalate_to,
                "at": escalation_due,
                "payload": {
                    **(payload or {}),
                    "escalated_from": _member_id(recipient),
                    "minutes": minutes + escalate_after_minutes,
                },
                "key": escalation_key(first_key),
                "about": about,
            }
        )
    return items


def _checked_inquiry(
    arrived_at: object,
    minutes: object,
    about: object,
    escalate_to: object,
    escalate_after_minutes: object,
    payload: object,
    key: object,
) -> str:
    """``inquiry_timeout_items``'s own parameters checked; the inquiry's reference."""
    errors: dict[str, Any] = {}
    if not isinstance(arrived_at, datetime):
        errors["arrived_at"] = f"arrived_at must be a datetime, not {type(arrived_at).__name__}."
    _check_minutes(errors, "minutes", minutes)
    if (escalate_to is None) != (escalate_after_minutes is None):
        missing = "escalate_after_minutes" if escalate_to is not None else "escalate_to"
        errors[missing] = "Give escalate_to and escalate_after_minutes together, or neither."
    elif escalate_after_minutes is not None:
        _check_minutes(errors, "escalate_after_minutes", escalate_after_minutes)
    if payload is not None and not isinstance(payload, dict):
        errors["payload"] = f"payload must be a JSON object, not {type(payload).__name__}."
    if key is not None and not isinstance(key, str):
        errors["key"] = f"key must be text, not {type(key).__name__}."
    reference = ""
    if about is None:
        errors["about"] = "about is required: the inquiry, which api.cancel_for cancels by."
    else:
        try:
            reference = about_reference(about)
        except ValidationError as exc:
            errors["about"] = exc
    if errors:
        raise ValidationError(errors)
    return reference


def escalation_key(first_key: str) -> str:
    return f"{first_key}{ESCALATION_SUFFIX}"


def inquiry_keys(kind: str, key: str | None) -> tuple[str, str] | None:
    """The keys of the alerts of one inquiry, the first's and its escalation's, from
    either's kind and key; None for a task of another kind, or without a key."""
    if kind != INQUIRY_KIND or not key:
        return None
    first = key.removesuffix(ESCALATION_SUFFIX)
    return first, escalation_key(first)


def about_reference(obj: object) -> str:
    """``obj``'s type and primary key as text: ``"crm.inquiry:42"``."""
    content_type, object_id = about.reference(obj)
    return about.label(content_type, object_id)


def _check_minutes(errors: dict[str, Any], name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        errors[name] = f"{name} must be a whole number of minutes, at least 1, not {value!r}."


def _utc(moment: datetime) -> datetime:
    """``moment`` in UTC, a naive one read on the clock of ``TIME_ZONE``: minutes are
    then added as they pass, whatever the clocks do meanwhile."""
    if timezone.is_naive(moment):
        moment = timing.wall_clock_in(moment, django_settings.TIME_ZONE)
    return moment.astimezone(UTC)


def _member_id(recipient: str | Model) -> str | None:
    """The first recipient's member id, for the escalation to say whom it escalates
    from; a recipient that is not one is left to the first item's own check."""
    if isinstance(recipient, str):
        return recipient
    if users.is_user(recipient):
        try:
            return users.member_id(recipient)
        except ValidationError:
            return None
    return None
