"""Fitting a message to a provider's limit: lines whose CRM text is cut, the engine's
words never.

A ``Line`` is a translated template, the engine's values (``fixed``) and the CRM's text
(``crm``). ``fit`` joins lines so that they, and the lines ``kinds.render`` adds under
them, take at most a limit, measured in UTF-8 bytes (``size``, what WeCom counts for a
text or a textcard) or in half characters (``template_card.width``, what a card's
recommended lengths count). What gives is the CRM's text: its values share the room left
equally (a short one keeps all of itself), each cut at a character (never inside one,
nor between one and its accent or emoji modifier) and marked "…".
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

ELLIPSIS = "…"
# What attaches to the character before it: cutting before one splits a character.
_ATTACHED = frozenset("\u200d\ufe0e\ufe0f") | {chr(c) for c in range(0x1F3FB, 0x1F400)}

# How long a text is, as a provider counts it: additive, character by character.
Measure: TypeAlias = Callable[[str], int]


def size(text: str) -> int:
    """``text``'s length in UTF-8 bytes."""
    return len(text.encode())


@dataclass(frozen=True)
class Line:
    """One line of a message: a translated template with ``%(name)s`` placeholders, the
    engine's values (``fixed``, never cut) and the CRM's text (``crm``, cut to fit)."""

    template: str
    fixed: Mapping[str, object] = field(default_factory=dict)
    crm: Mapping[str, str] = field(default_factory=dict)

    def format(self, crm: Mapping[str, str]) -> str:
        if not self.fixed and not self.crm:
            return self.template
        return self.template % {**self.fixed, **crm}


def fit(
    lines: Sequence[Line], limit: int, tail: Sequence[str] = (), measure: Measure = size
) -> str:
    """``lines`` joined, with the CRM's values cut so that they and ``tail`` (joined
    under them) take at most ``limit`` by ``measure``."""
    blank = [line.format(dict.fromkeys(line.crm, "")) for line in lines]
    room = limit - measure("\n".join([*blank, *tail]))
    values = iter(shares([v for line in lines for v in line.crm.values()], room, measure))
    return "\n".join(line.format({name: next(values) for name in line.crm}) for line in lines)


def shares(values: Sequence[str], budget: int, measure: Measure = size) -> list[str]:
    """``values`` cut to take at most ``budget`` together: each keeps as much of itself
    as an equal share of what the shorter ones leave allows."""
    allowed = [0] * len(values)
    left = max(budget, 0)
    order = sorted(range(len(values)), key=lambda index: measure(values[index]))
    for rank, index in enumerate(order):
        allowed[index] = min(measure(values[index]), left // (len(values) - rank))
        left -= allowed[index]
    return [cut(value, room, measure) for value, room in zip(values, allowed, strict=True)]


def cut(text: str, budget: int, measure: Measure = size) -> str:
    """``text`` in at most ``budget``: whole, or cut at a character boundary that
    splits nothing and ended with "…" (empty when not even that fits)."""
    if measure(text) <= budget:
        return text
    room = budget - measure(ELLIPSIS)
    if room <= 0:
        return ""
    end = 0
    for char in text:
        room -= measure(char)
        if room < 0:
            break
        end += 1
    while end > 0 and (
        unicodedata.combining(text[end]) or text[end] in _ATTACHED or text[end - 1] == "\u200d"
    ):
        end -= 1
    return text[:end].rstrip() + ELLIPSIS
