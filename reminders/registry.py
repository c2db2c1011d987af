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

from .conf import settings as conf
from .exceptions import UnknownKind
from .messages.content import Built
from .schedule.policies import Policy

if TYPE_CHECKING:
    from django.utils.functional import _StrPromise


@dataclass(frozen=True)
class Kind:
    """A kind of task: its name, its label (the admin's), its default builder (what
    ``render`` returns a message from: ``reminders.messages.builders``) and its policy.

    ``content_override``: ``payload["content"]``, when set, is the message (as text)
    instead of what any builder of the kind writes. The six built-in kinds have it; a
    CRM's kind reads its payload itself unless it asks for it.
    """

    name: str
    label: str | _StrPromise
    # ``(task, run) -> Built``: see ``messages.builders.Builder``.
    render: Callable[..., Built] = field(compare=False)
    # When its messages go; ``REMINDERS_KINDS`` overrides it field by field.
    policy: Policy = field(default_factory=Policy)
    content_override: bool = False


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
