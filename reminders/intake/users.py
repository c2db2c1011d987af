"""CRM users as recipients: a user stands for their WeCom member id.

A task stores a member id, never a user: what is sent, and to whom, must not change
when a user's record does (the CRM schedules again for that). So a user given as a
recipient is resolved to their member id when the task is scheduled, by

* ``REMINDERS_RECIPIENT_RESOLVER``: the dotted path of a callable, user -> member id,
  for a CRM that keeps the id elsewhere (a profile, a directory); or else
* ``REMINDERS_USER_ID_FIELD``: the user model's attribute that holds it (default: the
  user model's ``USERNAME_FIELD``, for CRMs whose login is the WeCom id).

A user without one (empty or None) is refused on ``recipient``, saying which user; an
id that is not text is refused too (never coerced: what is stored is what the CRM
keeps). The id is then checked as any recipient is, by the member-id rule. Both settings
are checked at start-up (``reminders.E014``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.contrib.auth import get_user_model
from django.core.checks import CheckMessage, Error, register
from django.core.exceptions import FieldDoesNotExist, ImproperlyConfigured, ValidationError
from django.db import models
from django.utils.module_loading import import_string
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from ..conf import settings as conf

logger = logging.getLogger(__name__)


def is_user(value: object) -> bool:
    """Whether ``value`` is an instance of the user model (``get_user_model()``)."""
    return isinstance(value, get_user_model())


def resolver() -> Callable[[Any], object]:
    """The callable that gives a user's member id, as the settings say."""
    path = conf.RECIPIENT_RESOLVER
    if path:
        try:
            resolve = import_string(path)
        except ImportError as exc:
            raise ImproperlyConfigured(
                gettext("REMINDERS_RECIPIENT_RESOLVER %(path)r cannot be imported: %(error)s")
                % {"path": path, "error": exc}
            ) from None
        if not callable(resolve):
            raise ImproperlyConfigured(
                gettext("REMINDERS_RECIPIENT_RESOLVER %(path)r is not callable.") % {"path": path}
            )
        return resolve
    field = conf.USER_ID_FIELD or get_user_model().USERNAME_FIELD
    return lambda user: getattr(user, field)


def member_id(user: models.Model, resolve: Callable[[Any], object] | None = None) -> str:
    """``user``'s WeCom member id, by ``resolve`` (default: ``resolver()``); a
    ``ValidationError`` on ``recipient`` when the user has none, or it is not text."""
    value = (resolve or resolver())(user)
    if value is None or value == "":
        raise ValidationError(
            {
                "recipient": ValidationError(
                    _("The user %(user)s (pk %(pk)s) has no WeCom member id (%(source)s)."),
                    code="user_without_member_id",
                    params={"user": str(user), "pk": user.pk, "source": _source()},
                )
            }
        )
    if not isinstance(value, str):
        raise ValidationError(
            {
                "recipient": ValidationError(
                    _(
                        "The WeCom member id of the user %(user)s (pk %(pk)s) is %(type)s, "
                        "not text (%(source)s)."
                    ),
                    code="user_member_id_type",
                    params={
                        "user": str(user),
                        "pk": user.pk,
                        "type": type(value).__name__,
                        "source": _source(),
                    },
                )
            }
        )
    return value


def users_of(member: str) -> list[Any]:
    """The active users whose member id (as ``member_id`` finds it) is ``member``,
    whatever its case, as WeCom compares member ids: the reverse of the mapping. Where
    the id is a field of the user model, a query finds them; where a resolver or an
    attribute that is not a field gives it, each active staff user is asked (those
    whose id cannot be had are passed over)."""
    model = get_user_model()
    active = model._default_manager.filter(is_active=True)
    field = conf.USER_ID_FIELD or model.USERNAME_FIELD
    if not conf.RECIPIENT_RESOLVER:
        try:
            model._meta.get_field(field)
        except FieldDoesNotExist:
            pass
        else:
            return list(active.filter(**{f"{field}__iexact": member}).order_by("pk"))
    resolve = resolver()
    found = []
    for user in active.filter(is_staff=True).order_by("pk"):
        try:
            value = resolve(user)
        except Exception:  # a resolver that fails for one user says nothing of the others
            logger.warning("the member id of user %s could not be had", user.pk, exc_info=True)
            continue
        if isinstance(value, str) and value.casefold() == member.casefold():
            found.append(user)
    return found


def _source() -> str:
    """Where the member id was looked for, for messages."""
    if conf.RECIPIENT_RESOLVER:
        return f"REMINDERS_RECIPIENT_RESOLVER {conf.RECIPIENT_RESOLVER}"
    return f"its {conf.USER_ID_FIELD or get_user_model().USERNAME_FIELD!r}"


@register("reminders")
def check_recipient_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``REMINDERS_RECIPIENT_RESOLVER`` imports a callable; ``REMINDERS_USER_ID_FIELD``
    names an attribute of the user model."""
    try:
        resolver()
    except ImproperlyConfigured as exc:
        return [Error(str(exc), id="reminders.E014")]
    field = conf.USER_ID_FIELD
    if not conf.RECIPIENT_RESOLVER and field and not hasattr(get_user_model(), field):
        model = get_user_model()._meta.label
        return [
            Error(
                gettext(
                    "REMINDERS_USER_ID_FIELD %(field)r is not an attribute of the user model "
                    "%(model)s."
                )
                % {"field": field, "model": model},
                id="reminders.E014",
            )
        ]
    return []
