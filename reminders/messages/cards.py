"""Cards people act on: a follow-up or an inquiry alert as WeCom's ``template_card`` of
``card_type`` ``button_interaction``, whose buttons come back through WeCom's callback
when clicked (the button's ``key`` is the click's ``EventKey``, the card's ``task_id``
names the run).

The built-in wording (``messages.wording``) writes one where the task's channel carries
it and its clicks can come back (``carried``): the sender's ``carries_cards`` (true for
a WeCom app, false for a group robot and anything else), and WeCom's callback configured
for the channel's app (``lost_clicks``). Elsewhere the message goes as it would on a
channel without cards (a textcard with its link, or text): never a button no click of
which could reach the engine. System check ``reminders.W008`` names a channel that
carries cards whose clicks could not come back. What a card shows (``card``):

* ``source.desc``: the kind's label; ``main_title``: the title (``Follow-up: Acme``) and
  the headline under it; ``sub_title_text``: the details (subject, due time, how long it
  has waited, from whom it was escalated), and under them the lines ``kinds.render``
  adds to every message (a make-up run's mark, the stamp of the occurrence and task);
* ``horizontal_content_list``: the customer, and the record's link (``payload["url"]``);
* ``button_list``: the kind's buttons (``defaults``): ``done`` ("Done") and
  ``snooze_1h`` ("Remind me in 1 hour"), and first for an inquiry ``take`` ("I'll take
  it"), in the task's language; a CRM changes them per kind with ``buttons``.

Invariants:

* ``task_id(run)`` is ``r<run id>-<10 hex of the SHA-1 of the run's ledger key>``: a
  re-send of a run is the same card, byte for byte, and two runs never share one, which
  WeCom requires within the app. ``run_pk`` reads the run's id back (the callback does).
* The stamp rule holds on a card too: ``sub_title_text`` is never empty (a card without
  details shows its headline there), so ``kinds.render`` always has a line to put the
  stamp under (``stamps.STAMPED_FIELDS``), and two occurrences never look alike.
* It fits: every text within the length WeCom gives it (``senders.template_card``),
  counting the lines ``kinds.render`` adds; what gives is the CRM's text (cut and marked
  "…"), never the engine's words, the stamp or the link.
* A CRM's buttons are held to WeCom's rules (1 to 6, a text, a style of 1 to 4, a key
  of at most 1,024 bytes, unique). A hook that raises, or returns anything else, fails
  the message with ``BuilderFailed`` naming the hook, the kind and the rule, as a
  builder that fails does (``messages.builders``).
* Deterministic: a function of the task, the run, the hooks and the catalogs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from django.core.exceptions import ImproperlyConfigured
from django.utils.translation import gettext, pgettext

from ..conf import settings as conf
from ..exceptions import BuilderFailed, RemindersError
from ..links import short
from ..models import acting
from ..registry import label
from ..senders import get_sender
from ..senders.template_card import CARD_TYPE, buttons_problem, problem, room, width
from . import stamps
from .builders import name_of
from .content import Content
from .fitting import Line, cut, fit

if TYPE_CHECKING:
    from ..models import ScheduledTask, TaskRun
    from ..senders.base import BaseSender

# The keys of the built-in buttons (what a click on each comes back with), and the
# card's task_id of a run and back: the models' (``models.acting``), which the callback
# reads clicks by.
DONE, SNOOZE, TAKE = acting.DONE, acting.SNOOZE, acting.TAKE
task_id = acting.card_id
run_pk = acting.run_pk


@dataclass(frozen=True)
class Button:
    """A button of a card: its ``key`` (the click's ``EventKey``), its ``text`` and
    WeCom's ``style`` (1 to 4; 1 is WeCom's default). With a ``url`` it opens that
    page instead of calling back, and needs no key."""

    key: str
    text: str
    style: int = 1
    url: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The button as WeCom's ``button_list`` takes it."""
        if self.url:
            return {"type": 1, "text": self.text, "style": self.style, "url": self.url}
        return {"key": self.key, "text": self.text, "style": self.style}


# A buttons hook: the buttons of a run's card, given the kind's own.
ButtonsHook: TypeAlias = "Callable[[ScheduledTask, TaskRun, list[Button]], list[Button]]"
H = TypeVar("H", bound=Callable[..., Any])

_hooks: dict[str, ButtonsHook] = {}


def buttons(kind: str) -> Callable[[H], H]:
    """Decorator: ``func(task, run, defaults)`` returns the buttons of ``kind``'s cards
    (``defaults`` are the kind's own, in the task's language); a later one for the same
    kind replaces it, as ``builders.builder`` does. Register it in code every process
    imports (an ``AppConfig.ready()``)."""

    def register(func: H) -> H:
        _hooks[kind] = func
        return func

    return register


def unregister(kind: str) -> None:
    """Forget the buttons hook registered for ``kind``, if any."""
    _hooks.pop(kind, None)


def defaults(kind: str) -> list[Button]:
    """The kind's own buttons, in the active language: ``done`` and ``snooze_1h``, and
    first for an inquiry alert ``take``."""
    done = pgettext("card button, at most 10 characters", "Done")
    snooze = Button(SNOOZE, pgettext("card button, at most 10 characters", "Remind me in 1 hour"))
    if kind == "inquiry_timeout":
        take = Button(TAKE, pgettext("card button, at most 10 characters", "I'll take it"))
        return [take, Button(DONE, done, style=2), Button(snooze.key, snooze.text, style=2)]
    return [Button(DONE, done), Button(snooze.key, snooze.text, style=2)]


def chosen(task: ScheduledTask, run: TaskRun) -> list[Button]:
    """The buttons of the run's card: its kind's hook's, else the kind's own.
    ``BuilderFailed`` naming the hook and the kind when it raises or returns buttons
    WeCom would refuse."""
    kind = task.kind
    own = defaults(kind)
    hook = _hooks.get(kind)
    if hook is None:
        return own
    name = name_of(hook)
    try:
        value = hook(task, run, list(own))
    except Exception as exc:
        raise BuilderFailed(
            f"Buttons hook {name} of kind {kind!r} raised {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(value, list | tuple) or not all(isinstance(b, Button) for b in value):
        raise BuilderFailed(
            f"Buttons hook {name} of kind {kind!r} returned {short(value)}; a buttons "
            "hook returns a list of reminders.messages.cards.Button"
        )
    found = buttons_problem([button.as_dict() for button in value])
    if found:
        raise BuilderFailed(f"Buttons hook {name} of kind {kind!r} returned {found}.")
    return list(value)


def carried(task: ScheduledTask) -> bool:
    """Whether the task's channel carries these cards (its sender's ``carries_cards``)
    and their clicks can come back (``lost_clicks``); a channel that cannot be built is
    taken to carry none (it says so where channels are checked)."""
    try:
        sender = get_sender(task.channel)
    except (RemindersError, ImproperlyConfigured, TypeError):
        return False
    return bool(sender.carries_cards) and not lost_clicks(sender)


def channel_agent(sender: BaseSender) -> str:
    """The WeCom app a channel sends as: its agent id (the WeCom app sender's, else the
    channel's ``OPTIONS["agent_id"]``), ``""`` when it names none."""
    agent = getattr(sender, "agent_id", None) or sender.options.get("agent_id") or ""
    return str(agent).strip()


def lost_clicks(sender: BaseSender) -> str:
    """Why a click on a card ``sender`` sends could not come back, in words; ``""`` when
    it can: WeCom's callback is configured (``conf.CALLBACK``) and takes the clicks of
    the channel's app (``conf.CALLBACK_AGENT_ID``; a channel or a callback that names no
    agent cannot be told apart, and is taken to be the callback's). A callback that
    cannot work (system check ``reminders.E015``) takes none."""
    try:
        if conf.CALLBACK is None:
            return gettext(
                "no callback is configured (WECOM_CALLBACK_TOKEN and WECOM_CALLBACK_AES_KEY)"
            )
        callback_agent = conf.CALLBACK_AGENT_ID
    except ImproperlyConfigured as exc:
        return str(exc)
    agent = channel_agent(sender)
    if callback_agent and agent and agent != callback_agent:
        return gettext(
            "the callback takes the clicks of app %(callback)s, and the channel sends as "
            "app %(agent)s"
        ) % {"callback": callback_agent, "agent": agent}
    return ""


@dataclass(frozen=True)
class Face:
    """What a card shows, before it is fitted: the ``title``, the ``headline`` under it,
    the detail ``lines`` (none: the headline takes their place), the CRM's ``customer``
    and the record's ``url``."""

    title: Line
    headline: Line
    lines: Sequence[Line]
    customer: str = ""
    url: str = ""


def card(task: ScheduledTask, run: TaskRun, face: Face) -> Content:
    """The run's card: ``face`` fitted to WeCom's lengths, with room under its details
    for the lines ``kinds.render`` adds (``stamps.tail``), its ``task_id`` and buttons."""
    details = list(face.lines) or [face.headline]
    main_title = {"title": fit([face.title], room("main_title.title"), measure=width)}
    if face.lines:
        main_title["desc"] = fit([face.headline], room("main_title.desc"), measure=width)
    body: dict[str, Any] = {
        "card_type": CARD_TYPE,
        "source": {"desc": cut(label(task.kind), room("source.desc"), width)},
        "main_title": main_title,
        "sub_title_text": fit(
            details, room("sub_title_text"), stamps.tail(task, run), measure=width
        ),
        "task_id": task_id(run),
        "button_list": [button.as_dict() for button in chosen(task, run)],
    }
    lines = _lines(face)
    if lines:
        body["horizontal_content_list"] = lines
    found = problem(body)
    if found:
        raise ValueError(f"the card of kind {task.kind!r} is one WeCom refuses: {found}")
    return Content("template_card", body)


def _lines(face: Face) -> list[dict[str, Any]]:
    """The customer and the link, as lines of a name and a value."""
    lines: list[dict[str, Any]] = []
    if face.customer:
        name = pgettext("card line name, at most 5 characters", "Customer")
        value = cut(face.customer, room("horizontal_content_list.value"), width)
        lines.append({"keyname": name, "value": value})
    if face.url:
        name = pgettext("card line name, at most 5 characters", "Link")
        view = pgettext("textcard button, at most 4 characters", "View")
        lines.append({"type": 1, "keyname": name, "value": view, "url": face.url})
    return lines
