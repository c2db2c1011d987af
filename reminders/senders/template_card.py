"""What WeCom's ``message/send`` takes as a ``template_card`` of ``card_type``
``button_interaction`` (按钮交互型), and what its answer to a used ``task_id`` means.

WeCom documents the card (发送应用消息, 模板卡片消息, 按钮交互型) with these rules:

* ``task_id``, required: at most 128 bytes of ``0-9a-zA-Z_-@``, unique within the app.
  A card whose ``task_id`` the app used before is refused with errcode 42014, whose
  message says "taskid has existed or empty or exceed max len".
* ``button_list``, required: at most 6 buttons (at least one: a button card without a
  button cannot be acted on). Each has a ``text``, a ``style`` of 1 to 4 and, for a
  button that calls back (``type`` 0, the default), a ``key`` of at most 1,024 bytes,
  unique on the card: the click comes back with it as its ``EventKey``.
* ``main_title``, required: ``title`` and ``desc``; ``sub_title_text``; ``source.desc``;
  ``horizontal_content_list`` of at most 6 lines, each with a ``keyname`` and a
  ``value`` (a link line, ``type`` 1, with its ``url``).

WeCom gives the lengths of the texts as what it recommends, in 字 (characters, as its
Chinese documentation counts them): ``main_title.title`` 36, ``main_title.desc`` 44,
``sub_title_text`` 160, ``source.desc`` 20, a line's ``keyname`` 5 and ``value`` 30, a
button's ``text`` 10. It does not document what it does with a longer one; we hold every
card to them all the same (never more forgiving than WeCom), measured by ``width``: a
full-width character is one 字 and a half-width one (a Latin letter, a digit) half of
one, so an English text gets the room its Chinese translation has.

``problem`` says what is wrong with a card body, the first thing in the order above;
``buttons_problem`` the same of a ``button_list`` alone.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

from .base import Message, SendResult

CARD_TYPE = "button_interaction"
# WeCom's errcode for a task_id the app used before (or empty, or too long).
TASK_ID_USED = 42014

TASK_ID = re.compile(r"[0-9A-Za-z_\-@]{1,128}")
TASK_ID_BYTES = 128
MAX_BUTTONS = 6
KEY_BYTES = 1024
STYLES = range(1, 5)
MAX_LINES = 6
# WeCom's recommended lengths, in 字 (``width`` counts two units to one).
TEXT_LIMITS: dict[str, int] = {
    "source.desc": 20,
    "main_title.title": 36,
    "main_title.desc": 44,
    "sub_title_text": 160,
    "horizontal_content_list.keyname": 5,
    "horizontal_content_list.value": 30,
    "button_list.text": 10,
}
UNITS_PER_CHARACTER = 2


def width(text: str) -> int:
    """``text``'s length in half 字: 2 for a full-width character (CJK, full-width
    forms), 1 for any other."""
    return sum(2 if unicodedata.east_asian_width(char) in "WF" else 1 for char in text)


def room(field: str) -> int:
    """The room of a text field (``TEXT_LIMITS``' name), in ``width``'s units."""
    return TEXT_LIMITS[field] * UNITS_PER_CHARACTER


def card_task_id(message: Message) -> str | None:
    """The ``task_id`` of a template card that has a valid one, else None: what WeCom
    holds unique within the app, so a re-send of such a card is never a second card."""
    if message.msgtype != "template_card":
        return None
    value = message.body.get("task_id")
    return value if isinstance(value, str) and TASK_ID.fullmatch(value) else None


def delivered_before(task_id: str) -> SendResult:
    """What a send answered 42014 for a card whose ``task_id`` is valid comes to: the
    app delivered that card before (an earlier attempt of this very message reached
    WeCom, its reply lost), so this one is not a second card and not a failure. WeCom
    does not say the earlier message's id."""
    detail = {"delivered_before": "task_id already used", "task_id": task_id}
    return SendResult(message_id="", code=str(TASK_ID_USED), detail=detail)


def problem(body: Mapping[str, Any]) -> str | None:
    """What WeCom refuses (or we hold it to) in a ``button_interaction`` card's body,
    one sentence naming the field and the limit; None for a card it takes."""
    if body.get("card_type") != CARD_TYPE:
        return f"template_card.card_type is {body.get('card_type')!r}, not {CARD_TYPE!r}"
    found = task_id_problem(body.get("task_id"))
    if found:
        return found
    title = body.get("main_title")
    if not isinstance(title, Mapping) or not title:
        return "template_card.main_title is missing; WeCom requires it"
    texts = [
        ("source.desc", _get(body, "source", "desc")),
        ("main_title.title", title.get("title")),
        ("main_title.desc", title.get("desc")),
        ("sub_title_text", body.get("sub_title_text")),
    ]
    for field, value in texts:
        found = text_problem(field, value)
        if found:
            return found
    found = _lines_problem(body.get("horizontal_content_list"))
    if found:
        return found
    return buttons_problem(body.get("button_list"))


def task_id_problem(value: object) -> str | None:
    if not isinstance(value, str) or not value:
        return "template_card.task_id is missing; WeCom requires one"
    if len(value.encode()) > TASK_ID_BYTES or not TASK_ID.fullmatch(value):
        return (
            f"template_card.task_id {value[:40]!r} is not 1 to {TASK_ID_BYTES} bytes of "
            "0-9a-zA-Z_-@"
        )
    return None


def text_problem(field: str, value: object, name: str = "") -> str | None:
    """A text field (``TEXT_LIMITS``' name; shown as ``name``, by default
    ``template_card.<field>``) that is not text, or longer than its room."""
    name = name or f"template_card.{field}"
    if value is None:
        return None
    if not isinstance(value, str):
        return f"{name} must be text, not {type(value).__name__}"
    if width(value) > room(field):
        return (
            f"{name} is {width(value) / UNITS_PER_CHARACTER:g} characters long, over "
            f"WeCom's {TEXT_LIMITS[field]} (a half-width character counts half)"
        )
    return None


def buttons_problem(buttons: object) -> str | None:
    """What is wrong with a ``button_list``: its count (1 to 6), each button's text,
    style and key (1,024 bytes at most, unique)."""
    if not isinstance(buttons, Sequence) or isinstance(buttons, str) or not buttons:
        return f"template_card.button_list is empty; WeCom takes 1 to {MAX_BUTTONS} buttons"
    if len(buttons) > MAX_BUTTONS:
        return (
            f"template_card.button_list has {len(buttons)} buttons; WeCom takes 1 to {MAX_BUTTONS}"
        )
    keys: set[str] = set()
    for index, button in enumerate(buttons, 1):
        where = f"button_list[{index}]"
        if not isinstance(button, Mapping):
            return f"template_card.{where} is {type(button).__name__}, not an object"
        text = button.get("text")
        if not isinstance(text, str) or not text.strip():
            return f"template_card.{where}.text is missing; WeCom requires one"
        found = text_problem("button_list.text", text, f"template_card.{where}.text")
        if found:
            return found
        style = button.get("style", 1)
        if isinstance(style, bool) or style not in STYLES:
            return f"template_card.{where}.style is {style!r}; WeCom takes 1 to 4"
        if button.get("type", 0) not in (0, 1):
            return f"template_card.{where}.type is {button.get('type')!r}; WeCom takes 0 or 1"
        if button.get("type", 0) == 1:
            if not isinstance(button.get("url"), str) or not button["url"]:
                return f"template_card.{where} links (type 1) without a url"
            continue
        key = button.get("key")
        if not isinstance(key, str) or not key:
            return f"template_card.{where}.key is missing; a button that calls back needs one"
        if len(key.encode()) > KEY_BYTES:
            return (
                f"template_card.{where}.key is {len(key.encode())} bytes, over WeCom's {KEY_BYTES}"
            )
        if key in keys:
            return f"template_card.{where}.key {key!r} is used twice; WeCom takes unique keys"
        keys.add(key)
    return None


def _lines_problem(lines: object) -> str | None:
    if lines is None:
        return None
    if not isinstance(lines, Sequence) or isinstance(lines, str):
        return "template_card.horizontal_content_list must be a list"
    if len(lines) > MAX_LINES:
        return (
            f"template_card.horizontal_content_list has {len(lines)} lines; WeCom takes "
            f"at most {MAX_LINES}"
        )
    for index, line in enumerate(lines, 1):
        where = f"horizontal_content_list[{index}]"
        if not isinstance(line, Mapping):
            return f"template_card.{where} is {type(line).__name__}, not an object"
        keyname = line.get("keyname")
        if not isinstance(keyname, str) or not keyname:
            return f"template_card.{where}.keyname is missing; WeCom requires one"
        for name in ("keyname", "value"):
            field = f"horizontal_content_list.{name}"
            found = text_problem(field, line.get(name), f"template_card.{where}.{name}")
            if found:
                return found
        if line.get("type") == 1 and (not isinstance(line.get("url"), str) or not line["url"]):
            return f"template_card.{where} links (type 1) without a url"
    return None


def _get(body: Mapping[str, Any], outer: str, inner: str) -> object:
    value = body.get(outer)
    return value.get(inner) if isinstance(value, Mapping) else None
