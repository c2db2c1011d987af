"""Message builders: who writes a task's message, and in which language.

A builder is a callable ``(task, run)`` that returns the message of that run. Every kind
has one of its own (``Kind.render``: for the six the engine ships, its wording in
``reminders.messages.wording``); a CRM replaces it, for one of those or for a kind it registers
itself, by dotted path in the settings or with a decorator in code every process imports
(an ``AppConfig.ready()``)::

    REMINDERS_BUILDERS = {"follow_up": "crm.reminders.build_follow_up"}

    @reminders.messages.builders.builder("follow_up")
    def build_follow_up(task, run): ...

The setting wins over the decorator, which wins over the kind's own. A builder returns a
``kinds.Content``, a ``str`` (sent as ``text``) or WeCom's dict
(``{"msgtype": "textcard", "textcard": {...}}``).

Invariants:

* What a builder returns becomes a ``Content`` (``content.as_content``) or an error; a
  builder that raises or returns anything else raises ``BuilderFailed``, whose message
  names the builder and the kind and says what it raised or returned (a
  ``BuilderFailed`` raised inside it, by a card's buttons hook, ``messages.cards``,
  passes as it is: it names its hook). That fails the
  one run being rendered, code ``render`` (``reminders.engine.delivery`` renders each run apart
  and catches every ``Exception``: never a worker or a tick), and refuses a task at
  scheduling on ``payload`` (``reminders.intake.validation``).
* A builder runs in the task's language, which ``kinds.render`` makes active around it
  (``translation.override``): ``payload["lang"]`` if given (one of
  ``settings.LANGUAGES``; anything else is a bad payload), else ``LANGUAGE_CODE``. So
  ``gettext`` in a builder and the engine's own lines speak it, whatever language the
  calling thread had, and a run rendered again renders the same bytes.
* A dotted path that does not import, or names something that cannot be called, is a
  system-check error (``reminders.E011``), not a failure found at the first send.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.utils import translation
from django.utils.module_loading import import_string

from ..conf import settings as conf
from ..exceptions import BadPayload, BuilderFailed
from .content import Built, Content, as_content

if TYPE_CHECKING:
    from ..models import ScheduledTask, TaskRun

B = TypeVar("B", bound=Callable[..., Any])

# A builder: the message of one run of a task.
Builder: TypeAlias = "Callable[[ScheduledTask, TaskRun], Built]"

_decorated: dict[str, Builder] = {}


def builder(kind: str) -> Callable[[B], B]:
    """Decorator: ``func`` builds the messages of ``kind`` (unless ``REMINDERS_BUILDERS``
    names another); a later one for the same kind replaces it, as ``kinds.register``
    does."""

    def register(func: B) -> B:
        _decorated[kind] = func
        return func

    return register


def unregister(kind: str) -> None:
    """Forget the builder the decorator registered for ``kind``, if any."""
    _decorated.pop(kind, None)


def plugged(kind: str) -> tuple[str, Builder] | None:
    """The builder a CRM plugged in for ``kind`` and its name: the setting's, else the
    decorator's; None when neither. ``BuilderFailed`` for a path that does not import."""
    path = conf.BUILDERS.get(kind)
    if path is not None:
        return path, _imported(kind, path)
    func = _decorated.get(kind)
    return None if func is None else (name_of(func), func)


def build(kind: str, default: Builder, task: ScheduledTask, run: TaskRun) -> Content:
    """The message of ``run`` as the builder of ``kind`` writes it (``default`` unless a
    CRM plugged one in), made a ``Content``; ``BuilderFailed`` naming the builder when it
    raises or returns something else."""
    found = plugged(kind)
    name, func = found if found is not None else (name_of(default), default)
    try:
        value = func(task, run)
    except BuilderFailed:
        raise  # a part of the message (a card's buttons hook) already says what failed
    except Exception as exc:
        raise BuilderFailed(
            f"Builder {name} of kind {kind!r} raised {type(exc).__name__}: {exc}"
        ) from exc
    try:
        return as_content(value)
    except ValueError as exc:
        raise BuilderFailed(f"Builder {name} of kind {kind!r} {exc}.") from None


def name_of(func: Callable[..., Any]) -> str:
    """A builder's dotted name, as a log or an error shows it."""
    qualname = getattr(func, "__qualname__", None) or type(func).__qualname__
    return f"{getattr(func, '__module__', None) or type(func).__module__}.{qualname}"


def plugged_kinds() -> set[str]:
    """The kinds a builder is plugged in for, by the setting (if it is valid) or the
    decorator (for the checks)."""
    kinds = set(_decorated)
    with contextlib.suppress(ImproperlyConfigured):
        kinds.update(conf.BUILDERS)
    return kinds


def setting_problems() -> list[str]:
    """What is wrong with ``REMINDERS_BUILDERS``, one sentence each (for the checks)."""
    try:
        paths = conf.BUILDERS
    except ImproperlyConfigured as exc:
        return [str(exc)]
    problems = []
    for kind, path in paths.items():
        try:
            _imported(kind, path)
        except BuilderFailed as exc:
            problems.append(str(exc))
    return problems


def _imported(kind: str, path: str) -> Builder:
    where = f"REMINDERS_BUILDERS[{kind!r}]"
    try:
        func = import_string(path)
    except Exception as exc:  # ImportError, or whatever the module raised on import
        raise BuilderFailed(f"{where} cannot be imported: {path!r}: {exc}") from exc
    if not callable(func):
        raise BuilderFailed(f"{where} is {path!r}, a {type(func).__name__}, not a callable.")
    builder: Builder = func
    return builder


# The language ---------------------------------------------------------------------------


def language(task: ScheduledTask) -> str:
    """The language the task's message is written in: ``payload["lang"]`` (``zh-hans``,
    ``en``) as ``settings.LANGUAGES`` has it, else ``LANGUAGE_CODE``. ``BadPayload``
    for a language the project does not declare."""
    payload = task.payload if isinstance(task.payload, dict) else {}
    code = payload.get("lang")
    if code is None:
        return str(django_settings.LANGUAGE_CODE)
    found = supported_language(code)
    if found is None:
        raise BadPayload(
            f'payload["lang"] {code!r} is not a language this project declares '
            "(settings.LANGUAGES)."
        )
    return found


def supported_language(code: object) -> str | None:
    """``code`` as ``settings.LANGUAGES`` spells it (``zh-CN`` is ``zh-hans``), or None."""
    if not isinstance(code, str) or not code.strip():
        return None
    try:
        return translation.get_supported_language_variant(code.lower())
    except LookupError:
        return None
