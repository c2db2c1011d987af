"""A ``template_card`` request body checked as WeCom checks it: the card types the
sandbox takes (``button_interaction``) and WeCom's rules for them, each refusal a
``Rejected`` with the errcode WeCom answers.

WeCom documents the rules (``config.CARD_*``) but not, for most of them, the errcode of
a refusal; the sandbox answers with the closest documented code, and says so here:

* ``task_id`` empty, too long or not of ``0-9a-zA-Z_-@``: 42014, whose message WeCom
  words "taskid has existed or empty or exceed max len" (a ``task_id`` the app used
  before is the same errcode: ``state.SandboxState`` checks that, it is not the body's).
* A text longer than WeCom's recommended length: 45002 (content size out of limit), a
  reading stricter than WeCom's documentation, which recommends the lengths only.
* Anything else missing or out of range (a card type the sandbox does not model, no
  ``main_title``, no button or more than 6, a button without a text or, calling back,
  without a key, a key over 1,024 bytes or used twice, more than 6 lines): 40058
  (invalid parameter), WeCom's errcode for an invalid field.

A button's ``style`` out of 1 to 4 is taken: WeCom documents that it then uses 1.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from typing import Any

from . import codes
from .config import (
    CARD_KEY_BYTES,
    CARD_MAX_BUTTONS,
    CARD_MAX_LINES,
    CARD_TASK_ID_BYTES,
    CARD_TEXT_LIMITS,
    CARD_TYPES,
)
from .replies import Rejected

TASK_ID = re.compile(r"[0-9A-Za-z_\-@]+")


def width(text: str) -> int:
    """Half 字: a full-width character counts 2, any other 1."""
    return sum(2 if unicodedata.east_asian_width(char) in "WF" else 1 for char in text)


def template_card(card: dict[str, Any]) -> tuple[str, str]:
    """What the recipient sees of a card (its texts, one per line, the buttons last)
    and its ``task_id``; ``Rejected`` in WeCom's order of errcodes."""
    card_type = card.get("card_type")
    if card_type not in CARD_TYPES:
        raise Rejected(
            codes.INVALID_PARAMETER,
            f"template_card.card_type {card_type!r} is not one the sandbox takes "
            f"({', '.join(CARD_TYPES)})",
        )
    task_id = card.get("task_id")
    if (
        not isinstance(task_id, str)
        or not TASK_ID.fullmatch(task_id)
        or len(task_id.encode()) > CARD_TASK_ID_BYTES
    ):
        raise Rejected(codes.TASK_ID_INVALID, "template_card.task_id invalid")
    title = card.get("main_title")
    if not isinstance(title, dict) or not title:
        raise Rejected(codes.INVALID_PARAMETER, "template_card.main_title missing")
    source = card.get("source")
    if not isinstance(source, dict):
        source = {}
    texts = {
        "source.desc": source.get("desc"),
        "main_title.title": title.get("title"),
        "main_title.desc": title.get("desc"),
        "sub_title_text": card.get("sub_title_text"),
    }
    for name, value in texts.items():
        check_text(name, value, f"template_card.{name}")
    lines = _lines(card.get("horizontal_content_list"))
    buttons = _buttons(card.get("button_list"))
    shown = [str(texts[name]) for name in list(texts)[1:] if texts[name]]
    return "\n".join([*shown, *lines, " ".join(buttons)]), task_id


def check_text(field: str, value: object, name: str) -> None:
    """``value`` (None, or a string within WeCom's length for ``field``) as ``name``."""
    if value is None:
        return
    if not isinstance(value, str):
        raise Rejected(codes.INVALID_PARAMETER, f"{name} must be a string")
    limit = CARD_TEXT_LIMITS[field]
    if width(value) > 2 * limit:
        raise Rejected(codes.CONTENT_TOO_LARGE, f"{name} exceed max length {limit}")


def _lines(lines: object) -> list[str]:
    if lines is None:
        return []
    if not isinstance(lines, list):
        raise Rejected(codes.INVALID_PARAMETER, "template_card.horizontal_content_list invalid")
    if len(lines) > CARD_MAX_LINES:
        raise Rejected(
            codes.INVALID_PARAMETER,
            f"template_card.horizontal_content_list exceed max count {CARD_MAX_LINES}",
        )
    shown = []
    for index, line in enumerate(lines):
        where = f"template_card.horizontal_content_list[{index}]"
        if not isinstance(line, Mapping) or not isinstance(line.get("keyname"), str):
            raise Rejected(codes.INVALID_PARAMETER, f"{where}.keyname missing")
        for name in ("keyname", "value"):
            check_text(f"horizontal_content_list.{name}", line.get(name), f"{where}.{name}")
        if line.get("type") == 1 and not line.get("url"):
            raise Rejected(codes.INVALID_PARAMETER, f"{where}.url missing")
        shown.append(f"{line['keyname']}: {line.get('value') or ''}")
    return shown


def _buttons(buttons: object) -> list[str]:
    if not isinstance(buttons, list) or not buttons:
        raise Rejected(codes.INVALID_PARAMETER, "template_card.button_list missing")
    if len(buttons) > CARD_MAX_BUTTONS:
        raise Rejected(
            codes.INVALID_PARAMETER,
            f"template_card.button_list exceed max count {CARD_MAX_BUTTONS}",
        )
    keys: set[str] = set()
    shown = []
    for index, button in enumerate(buttons):
        where = f"template_card.button_list[{index}]"
        text = button.get("text") if isinstance(button, Mapping) else None
        if not isinstance(text, str) or not text:
            raise Rejected(codes.INVALID_PARAMETER, f"{where}.text missing")
        check_text("button_list.text", text, f"{where}.text")
        shown.append(f"[{text}]")
        if button.get("type", 0) == 1:
            if not button.get("url"):
                raise Rejected(codes.INVALID_PARAMETER, f"{where}.url missing")
            continue
        key = button.get("key")
        if not isinstance(key, str) or not key:
            raise Rejected(codes.INVALID_PARAMETER, f"{where}.key missing")
        if len(key.encode()) > CARD_KEY_BYTES:
            raise Rejected(
                codes.INVALID_PARAMETER, f"{where}.key exceed max length {CARD_KEY_BYTES}"
            )
        if key in keys:
            raise Rejected(codes.INVALID_PARAMETER, f"{where}.key duplicated")
        keys.add(key)
    return shown


def callback_buttons(card: object) -> dict[str, str]:
    """The buttons of a card (a checked one) that call back when clicked: text by key.
    A button of ``type`` 1 opens its URL instead and is not among them."""
    buttons = card.get("button_list") if isinstance(card, Mapping) else None
    found: dict[str, str] = {}
    for button in buttons if isinstance(buttons, list) else ():
        if isinstance(button, Mapping) and button.get("type", 0) != 1:
            found[str(button.get("key"))] = str(button.get("text"))
    return found
