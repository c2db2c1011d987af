"""The registry of task kinds: each kind's name, label, builder and policy.

A module below the models, so that they may read it (a kind's label, its policy's
``key_per``, the names a task's ``kind`` may take) without importing what writes the
messages. ``reminders.kinds`` is the public face: it re-exports all of this, renders
messages and registers the six built-in kinds.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.utils.translation import gettext_lazy as _

from .conf import settings as conf
from .exceptions import UnknownKind
from .messages.content import Built
from .schedule.policies import Policy

if TYPE_CHECKING:
    from django.utils.functional import _StrPromise


@dataclass(frozen=True)
class PayloadField:
    """One key of a kind's payload that its builder reads, as the admin's task form
    shows it: a field of its own, with its label and help, beside the JSON that keeps
    a CRM's other keys.

    ``type`` says how the form reads it: ``text`` (one line), ``long_text`` (several),
    ``url``, ``member`` (one WeCom member id), ``number`` (a whole number, stored as
    one), ``language`` (one of ``settings.LANGUAGES``). The form only reads and stores
    it: what is valid is the builder's to say, when the form renders the message as the
    send would (a refusal that names ``payload["<name>"]`` is shown on this field).
    """

    name: str
    label: str | _StrPromise
    help: str | _StrPromise = ""
    type: str = "text"

    TYPES = ("text", "long_text", "url", "member", "number", "language")

    def __post_init__(self) -> None:
        if self.type not in self.TYPES:
            raise ValueError(
                f"PayloadField {self.name!r}: type {self.type!r} is not one of {self.TYPES}"
            )
        if not self.name.isidentifier():
            raise ValueError(f"PayloadField {self.name!r}: the name must be an identifier")


@dataclass(frozen=True)
class Kind:
    """A kind of task: its name, its label (the admin's), its default builder (what
    ``render`` returns a message from: ``reminders.messages.builders``) and its policy.

    ``content_override``: ``payload["content"]``, when set, is the message (as text)
    instead of what any builder of the kind writes. The six built-in kinds have it; a
    CRM's kind reads its payload itself unless it asks for it.

    ``fields``: the payload keys its builder reads (``PayloadField``), which the
    admin's form shows as fields; a CRM's kind declares its own the same way.
    """

    name: str
    label: str | _StrPromise
    # ``(task, run) -> Built``: see ``messages.builders.Builder``.
    render: Callable[..., Built] = field(compare=False)
    # When its messages go; ``REMINDERS_KINDS`` overrides it field by field.
    policy: Policy = field(default_factory=Policy)
    content_override: bool = False
    fields: tuple[PayloadField, ...] = ()

    def payload_fields(self) -> tuple[PayloadField, ...]:
        """Its own fields, then the two every kind's message reads through
        ``kinds.render``: ``content`` (where ``content_override`` lets the CRM's own
        text be the message) and ``lang``."""
        common = [LANGUAGE] if not self.content_override else [CONTENT, LANGUAGE]
        own = {one.name for one in self.fields}
        return (*self.fields, *(one for one in common if one.name not in own))


CONTENT = PayloadField(
    "content",
    _("Own text"),
    _("Sent as the message instead of the kind's wording, as written (the stamp is added)."),
    "long_text",
)
LANGUAGE = PayloadField(
    "lang",
    _("Language"),
    _("The message's language; empty: the site's (LANGUAGE_CODE)."),
    "language",
)

_registry: dict[str, Kind] = {}


def register(kind: Kind) -> Kind:
    _registry[kind.name] = kind
    return kind


def get(name: str) -> Kind:
    try:
        return _registry[name]
    except KeyError:
        raise UnknownKind(f"{name!r} is not a registered task kind.") from None


def names() -> list[str]:
    return sorted(_registry)


def label(name: str) -> str:
    """What ops read for kind ``name``: its label in the active language, or the name
    itself for a kind no longer registered (a CRM's, removed), so a row still says it."""
    kind = _registry.get(name)
    return str(kind.label) if kind is not None else name


# Kind name -> (the kind, a copy of the overrides it was built with, the policy): a
# policy is asked for several times per run, and building one validates every field.
_policies: dict[str, tuple[Kind, dict[str, Any], Policy]] = {}


def policy(name: str) -> Policy:
    """The policy kind ``name`` runs under: its own, with the overrides of
    ``REMINDERS_KINDS[name]`` (read on every call, so settings changes apply: one built
    is kept for as long as its kind and its overrides stay equal to those it was built
    from)."""
    kind = get(name)
    overrides = conf.KINDS.get(name, {})
    kept = _policies.get(name)
    if kept is not None and kept[0] is kind and kept[1] == overrides:
        return kept[2]
    built = kind.policy.with_overrides(overrides)
    _policies[name] = (kind, copy.deepcopy(overrides), built)
    return built


def mandatory(name: str) -> bool:
    """Whether kind ``name``'s recipients cannot opt out of it (its policy's
    ``mandatory``); a kind no longer registered is not."""
    try:
        return policy(name).mandatory
    except UnknownKind:
        return False
