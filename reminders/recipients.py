"""What a recipient is: one WeCom member id, never a list, a department or everyone.

WeCom's rule for a member id (``userid``): 1 to 64 bytes of letters, digits and
``_-@.``, starting with a letter or a digit. The model's validator, its database
constraint and the senders' send-time check all read it from here.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any, NamedTuple

from django.utils.translation import gettext_lazy as _

MEMBER_ID_MAX_BYTES = 64
_CHARS = "A-Za-z0-9_.@-"
MEMBER_ID = re.compile(rf"[A-Za-z0-9][{_CHARS}]{{0,{MEMBER_ID_MAX_BYTES - 1}}}")
_MEMBER_CHAR = re.compile(f"[{_CHARS}]")

# For the database constraint, where three regex dialects must agree. On SQLite (Python)
# and MariaDB (PCRE) "$" also matches before a final newline, so the full pattern is
# paired with "no character outside the set", which holds the newline out.
MEMBER_ID_SQL = rf"^{MEMBER_ID.pattern}$"
OUTSIDE_MEMBER_ID_SQL = rf"[^{_CHARS}]"

# Unicode control characters and the line and paragraph separators.
_CONTROL_CATEGORIES = frozenset({"Cc", "Zl", "Zp"})


class Problem(NamedTuple):
    """Why a value is not a member id, as a ``ValidationError``'s message, code and params."""

    code: str
    message: Any  # a lazily translated string with %(name)s placeholders
    params: dict[str, Any]

    def __str__(self) -> str:
        return str(self.message) % self.params


def control_character(value: str) -> str | None:
    """The first control character in ``value``, escaped for a message; None if none."""
    for char in value:
        if unicodedata.category(char) in _CONTROL_CATEGORIES:
            return ascii(char)
    return None


def member_id_problem(value: str) -> Problem | None:
    """Why ``value`` is not one WeCom member id; None when it is one."""
    if value == "@all":
        return Problem(
            "recipient_everyone",
            _('The recipient "@all" means everyone in the company; a task messages one member.'),
            {},
        )
    if "|" in value:
        return Problem(
            "recipient_list",
            _('The recipient %(value)r lists several members ("|"); schedule one task each.'),
            {"value": value},
        )
    char = control_character(value)
    if char is not None:
        return Problem(
            "recipient_control_character",
            _("The recipient contains the control character %(char)s."),
            {"char": char},
        )
    return _shape_problem(value)


def _shape_problem(value: str) -> Problem | None:
    size = len(value.encode())
    if not 1 <= size <= MEMBER_ID_MAX_BYTES:
        return Problem(
            "recipient_length",
            _("The recipient is %(size)d bytes; a WeCom member id is 1 to %(max)d."),
            {"size": size, "max": MEMBER_ID_MAX_BYTES},
        )
    if MEMBER_ID.fullmatch(value):
        return None
    bad = next((char for char in value if not _MEMBER_CHAR.fullmatch(char)), None)
    if bad is not None:
        return Problem(
            "recipient_character",
            _(
                "The recipient %(value)r contains %(char)s; a WeCom member id has only "
                "ASCII letters, digits and _-@."
            ),
            {"value": value, "char": ascii(bad)},
        )
    return Problem(
        "recipient_start",
        _("The recipient %(value)r must start with a letter or a digit."),
        {"value": value},
    )
