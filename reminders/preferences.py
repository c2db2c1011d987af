"""What each recipient wants of each kind, for the CRM: ``get(user)`` and
``set(user, kind, opted_out=..., digest=..., by=..., reason=...)``.

    from reminders import preferences

    preferences.set(request.user, "birthday", opted_out=True, by=request.user.username,
                    reason="asked in the CRM's settings page")
    preferences.get(request.user)["birthday"].opted_out  # True
    preferences.set(request.user, "follow_up", digest=True, by=request.user.username)

A kind moved to a digest (``digest=True``) reaches its recipient as one message per
window listing its occurrences (the kind's ``Policy.digest_seconds``, else
``REMINDERS_DIGEST_SECONDS``; ``engine.digests``); mandatory kinds may be moved too.

A recipient's own quiet hours (``set_quiet_hours(user, "22:00-08:00", by=...)``)
replace the kinds' (``Policy.quiet_hours``, ``quiet_calendar``) for every kind that does
not break them, read on the recipient's clock (``tz``, default the project's
``TIME_ZONE``), whatever their tasks' zones; ``""`` is none at all; leaving less than an
hour of the day open is refused; ``clear_quiet_hours`` goes back to the kinds'.

``user`` is a WeCom member id, or a user of the CRM (its member id as
``reminders.intake.users`` finds it). A run of a kind its recipient opted out of is
``skipped`` with code ``opted_out`` when the engine starts it (``engine.starting``): the
choice applies to every run not sent yet, whenever it was planned.

Invariants:

* A mandatory kind (``Policy.mandatory``: the reports and inquiry alerts the engine
  ships) cannot be opted out of: ``set`` refuses it, naming ``kind``; a preference left
  from before a kind became mandatory is not obeyed.
* Every change records who made it and why (``PreferenceChange``,
  ``QuietHoursChange``, in the same transaction); ``by`` is required. Bad input is a
  ``ValidationError`` naming each field at fault, and nothing is saved.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Model
from django.utils import timezone
from django.utils.translation import gettext as _

from . import registry
from .intake import users
from .models import (
    OPTED_OUT_CODE,
    Preference,
    PreferenceChange,
    QuietHours,
    QuietHoursChange,
    validate_calendar,
    validate_quiet_hours,
    validate_timezone,
)
from .models.preferences import project_timezone
from .recipients import member_id_problem
from .registry import mandatory

__all__ = [
    "OPTED_OUT_CODE",
    "Choice",
    "Quiet",
    "clear_quiet_hours",
    "get",
    "mandatory",
    "quiet_hours",
    "set",
    "set_quiet_hours",
]


@dataclass(frozen=True)
class Choice:
    """A recipient's choice about one kind: opted out or not, whether the kind is
    mandatory, and who made the choice, when and why (empty: never changed)."""

    kind: str
    opted_out: bool
    mandatory: bool
    changed_by: str = ""
    digest: bool = False
    changed_at: datetime | None = None
    reason: str = ""


def get(user: str | Model) -> dict[str, Choice]:
    """Every registered kind, by name, with ``user``'s choice about it."""
    member = _member(user)
    saved = {row.kind: row for row in Preference.objects.filter(recipient=member)}
    choices = {}
    for kind in registry.names():
        row = saved.get(kind)
        required = mandatory(kind)
        choices[kind] = Choice(
            kind=kind,
            opted_out=bool(row and row.opted_out) and not required,
            mandatory=required,
            digest=bool(row and row.digest),
            changed_by=row.changed_by if row else "",
            changed_at=row.changed_at if row else None,
            reason=row.reason if row else "",
        )
    return choices


def set(  # the API's name, as the CRM calls it (the builtin is not used here)
    user: str | Model,
    kind: str,
    *,
    opted_out: bool = False,
    digest: bool = False,
    by: str,
    reason: str = "",
) -> Choice:
    """Record that ``user`` does not want ``kind`` (``opted_out=True``), wants it in a
    digest (``digest=True``) or each message as it comes (neither), changed by ``by`` (a
    username, or the CRM's word for who) for ``reason``. ``ValidationError`` naming each
    field at fault; nothing saved then."""
    errors: dict[str, ValidationError] = {}
    member = ""
    try:
        member = _member(user)
    except ValidationError as exc:
        errors["user"] = exc
    errors.update(_choice_errors(kind, opted_out, digest))
    by = _who(by, errors)
    _why(reason, errors)
    if errors:
        raise ValidationError(errors)
    now = timezone.now()
    values = {
        "opted_out": opted_out,
        "digest": digest,
        "changed_by": by[:150],
        "reason": reason,
        "changed_at": now,
    }
    with transaction.atomic():
        Preference.objects.update_or_create(recipient=member, kind=kind, defaults=values)
        PreferenceChange.objects.create(recipient=member, kind=kind, **values)
    return Choice(
        kind=kind,
        opted_out=opted_out,
        mandatory=mandatory(kind),
        changed_by=by[:150],
        changed_at=now,
        reason=reason,
        digest=digest,
    )


def _choice_errors(kind: object, opted_out: object, digest: object) -> dict[str, ValidationError]:
    """What is wrong with a choice about ``kind``, by field: a kind not registered, an
    opt-out of a mandatory one, a flag that is not a bool, a digest of a kind opted out of."""
    errors: dict[str, ValidationError] = {}
    if kind not in registry.names():
        errors["kind"] = ValidationError(
            _("%(kind)r is not a registered task kind."), code="unknown_kind", params={"kind": kind}
        )
    elif opted_out is True and mandatory(kind):
        errors["kind"] = ValidationError(
            _("%(kind)s is mandatory: its recipients cannot opt out of it."),
            code="mandatory",
            params={"kind": kind},
        )
    if not isinstance(opted_out, bool):
        errors["opted_out"] = ValidationError(
            _("opted_out must be True or False, not %(value)r."),
            code="invalid",
            params={"value": opted_out},
        )
    if not isinstance(digest, bool):
        errors["digest"] = ValidationError(
            _("digest must be True or False, not %(value)r."),
            code="invalid",
            params={"value": digest},
        )
    elif digest and opted_out is True:
        errors["digest"] = ValidationError(
            _("A kind opted out of is not sent in a digest either: choose one."),
            code="opted_out",
        )
    return errors


@dataclass(frozen=True)
class Quiet:
    """A recipient's own quiet hours (``hours`` "": none at all), the calendar whose rest
    days are quiet too (""), the zone whose clock they are read on, and who set them,
    when and why."""

    hours: str
    calendar: str
    changed_by: str
    changed_at: datetime
    reason: str
    tz: str


def quiet_hours(user: str | Model) -> Quiet | None:
    """``user``'s own quiet hours, or None: the kinds' own apply."""
    row = QuietHours.objects.filter(recipient=_member(user)).first()
    if row is None:
        return None
    return Quiet(row.hours, row.calendar, row.changed_by, row.changed_at, row.reason, row.zone)


def set_quiet_hours(
    user: str | Model,
    hours: str,
    *,
    calendar: str = "",
    by: str,
    reason: str = "",
    tz: str | None = None,
) -> Quiet:
    """Set ``user``'s own quiet hours: ``hours`` local ``"HH:MM-HH:MM"`` on ``tz``'s clock
    (default the project's ``TIME_ZONE``; "": none), and ``calendar`` whose rest days are
    quiet all day (""). Changed by ``by`` for ``reason``; ``ValidationError`` naming each
    field at fault."""
    errors: dict[str, ValidationError] = {}
    member = ""
    try:
        member = _member(user)
    except ValidationError as exc:
        errors["user"] = exc
    zone = project_timezone() if tz is None else tz
    errors.update(_quiet_errors(hours=hours, calendar=calendar, tz=zone))
    by = _who(by, errors)
    _why(reason, errors)
    if errors:
        raise ValidationError(errors)
    now = timezone.now()
    values = {
        "hours": hours,
        "calendar": calendar,
        "timezone": zone,
        "changed_by": by,
        "reason": reason,
    }
    with transaction.atomic():
        QuietHours.objects.update_or_create(
            recipient=member, defaults={**values, "changed_at": now}
        )
        QuietHoursChange.objects.create(recipient=member, changed_at=now, **values)
    return Quiet(hours, calendar, by, now, reason, zone)


def _quiet_errors(**values: object) -> dict[str, ValidationError]:
    """What is wrong with quiet hours, by field: ``hours`` not a window leaving an hour
    of the day open, a ``calendar`` not configured, a ``tz`` that is not a zone; the
    hours and the calendar may be empty (none), the zone may not."""
    checks = {"hours": validate_quiet_hours, "calendar": validate_calendar, "tz": validate_timezone}
    errors: dict[str, ValidationError] = {}
    if not isinstance(values["hours"], str):
        errors["hours"] = ValidationError(_("hours must be text."), code="invalid")
    for name, validate in checks.items():
        value = values[name]
        if name not in errors and (value != "" or name == "tz"):
            try:
                # Not text: refused as the text it reads as ("None" is no calendar).
                validate(str(value))
            except ValidationError as exc:
                errors[name] = exc
    return errors


def clear_quiet_hours(user: str | Model, *, by: str, reason: str = "") -> None:
    """Forget ``user``'s own quiet hours: the kinds' own apply again; kept as a change.
    ``ValidationError`` naming each field at fault; nothing changed then."""
    errors: dict[str, ValidationError] = {}
    member = ""
    try:
        member = _member(user)
    except ValidationError as exc:
        errors["user"] = exc
    by = _who(by, errors)
    _why(reason, errors)
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        QuietHours.objects.filter(recipient=member).delete()
        QuietHoursChange.objects.create(
            recipient=member, cleared=True, changed_by=by, reason=reason, changed_at=timezone.now()
        )


def _who(by: object, errors: dict[str, ValidationError]) -> str:
    who = by.strip()[:150] if isinstance(by, str) else ""
    if not who:
        errors["by"] = ValidationError(_("Say who makes the change."), code="required")
    return who


def _why(reason: object, errors: dict[str, ValidationError]) -> None:
    """A change's ``reason`` must be text (it may be empty)."""
    if not isinstance(reason, str):
        errors["reason"] = ValidationError(_("reason must be text."), code="invalid")


def _member(user: object) -> str:
    """``user``'s member id: a string checked as one, or a CRM user's."""
    if isinstance(user, str):
        problem = member_id_problem(user)
        if problem is not None:
            raise ValidationError(problem.message, code=problem.code, params=problem.params)
        return user
    if isinstance(user, Model) and users.is_user(user):
        try:
            return users.member_id(user)
        except ValidationError as exc:
            raise ValidationError(exc.message_dict["recipient"]) from None
    raise ValidationError(
        _("A WeCom member id or a user of the CRM, not %(type)s."),
        code="invalid",
        params={"type": type(user).__name__},
    )
