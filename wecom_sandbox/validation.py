"""The request bodies the sandbox takes, checked as WeCom checks them, in WeCom's order
of errcodes: each refusal raises ``Rejected`` with the errcode WeCom answers.

Invariants: lengths are counted in UTF-8 bytes, as WeCom counts them; a text or a
textcard over WeCom's limit is cut as WeCom documents (never inside a character) when
the sandbox's ``overflow`` is ``truncate``, else refused with 45002 (a markdown is
always refused); a message to no valid recipient at all is 81013, naming the invalid
ones. A ``template_card`` is checked by ``wecom_sandbox.cards`` (the card types the
sandbox takes and WeCom's rules for them). Nothing here changes the sandbox's state.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from . import codes
from .cards import template_card
from .config import (
    DEFAULT_DUPLICATE_CHECK_INTERVAL,
    MARKDOWN_LIMIT,
    MAX_DUPLICATE_CHECK_INTERVAL,
    MAX_TOUSER,
    ROBOT_MARKDOWN_LIMIT,
    ROBOT_TEXT_LIMIT,
    TEXT_LIMIT,
    TEXTCARD_DESCRIPTION_LIMIT,
    TEXTCARD_TITLE_LIMIT,
    SandboxConfig,
)
from .replies import Rejected

APP_MSGTYPES = ("text", "markdown", "textcard", "template_card")
ROBOT_MSGTYPES = ("text", "markdown", "image", "news", "file", "template_card")
ROBOT_CARD_TYPES = ("text_notice", "news_notice")


def cut(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes without splitting a character."""
    return text.encode()[:limit].decode(errors="ignore")


def nbytes(text: str) -> int:
    return len(text.encode())


@dataclass(frozen=True)
class AppRequest:
    """A ``message/send`` body that passed validation."""

    body: dict[str, Any]
    msgtype: str
    content: str
    truncated: bool
    interval: int
    users: tuple[str, ...]
    invalid: tuple[str, ...]
    valid: list[str]
    # A template card's task_id, which the app may use once.
    task_id: str = ""


@dataclass(frozen=True)
class RobotRequest:
    """A ``webhook/send`` body that passed validation: what its group sees, and whom
    a text mentions."""

    body: dict[str, Any]
    msgtype: str
    content: str
    mentioned: tuple[str, ...]


def parse(raw: bytes) -> dict[str, Any]:
    """A request body as the JSON object it must be; 47001 (data format error) otherwise."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise Rejected(codes.DATA_FORMAT_ERROR) from None
    if not isinstance(body, dict):
        raise Rejected(codes.DATA_FORMAT_ERROR)
    return body


def app_request(raw: bytes, config: SandboxConfig, invalid_users: Collection[str]) -> AppRequest:
    """The request body checked as WeCom checks it, in WeCom's order of errcodes."""
    body = parse(raw)
    check_agent(body.get("agentid"), config.agent_id)
    msgtype = body.get("msgtype")
    if msgtype not in APP_MSGTYPES:
        raise Rejected(codes.INVALID_MSGTYPE)
    task_id = ""
    if msgtype == "template_card" and isinstance(body.get(msgtype), dict) and body[msgtype]:
        content, task_id = template_card(body[msgtype])
        truncated = False
    else:
        content, truncated = _app_content(msgtype, body.get(msgtype), config.overflow)
    interval = _duplicate_interval(body)
    users = ids(body.get("touser"))
    parties, tags = ids(body.get("toparty")), ids(body.get("totag"))
    if len(users) > MAX_TOUSER:
        raise Rejected(codes.INVALID_PARAMETER, f"touser exceed max count {MAX_TOUSER}")
    if not (users or parties or tags):
        raise Rejected(codes.INVALID_PARAMETER, "touser, toparty and totag are all empty")
    invalid = tuple(u for u in users if u in invalid_users)
    valid = [u for u in users if u not in invalid_users]
    valid += [f"party:{p}" for p in parties] + [f"tag:{t}" for t in tags]
    if not valid:
        raise Rejected(codes.ALL_RECIPIENTS_INVALID, invaliduser="|".join(invalid))
    return AppRequest(
        body, msgtype, content, truncated, interval, tuple(users), invalid, valid, task_id
    )


def robot_request(raw: bytes) -> RobotRequest:
    """A group robot's request body checked as WeCom checks it (its key checked first,
    by the caller)."""
    body = parse(raw)
    msgtype = body.get("msgtype")
    if msgtype not in ROBOT_MSGTYPES:
        raise Rejected(codes.INVALID_MSGTYPE)
    payload = body.get(msgtype)
    if not isinstance(payload, dict) or not payload:
        raise Rejected(codes.EMPTY_CONTENT)
    if msgtype == "template_card" and payload.get("card_type") not in ROBOT_CARD_TYPES:
        # WeCom's robot API documents text_notice and news_notice cards only; the code
        # of its refusal of another type is not documented: 40058 is the closest.
        raise Rejected(
            codes.INVALID_PARAMETER,
            f"template_card.card_type {payload.get('card_type')!r} is not one a group robot "
            f"takes ({', '.join(ROBOT_CARD_TYPES)})",
        )
    content = f"[{msgtype}]"
    mentioned: tuple[str, ...] = ()
    if msgtype in ("text", "markdown"):
        text = payload.get("content")
        if not isinstance(text, str) or not text:
            raise Rejected(codes.EMPTY_CONTENT)
        content = text
        limit = ROBOT_TEXT_LIMIT if msgtype == "text" else ROBOT_MARKDOWN_LIMIT
        if nbytes(content) > limit:
            raise Rejected(codes.INVALID_PARAMETER, f"{msgtype}.content exceed max length {limit}")
    if msgtype == "text":
        mentioned = tuple(str(m) for m in payload.get("mentioned_list") or ())
        mentioned += tuple(str(m) for m in payload.get("mentioned_mobile_list") or ())
    return RobotRequest(body, msgtype, content, mentioned)


def ids(value: Any) -> list[str]:
    """``"a|b"`` (or a list, which WeCom does not take but a careless caller might) as ids."""
    if isinstance(value, str):
        return [part for part in value.split("|") if part]
    return []


def check_agent(agentid: Any, agent_id: int) -> None:
    """41011 without an agentid, 40056 for another app's."""
    if agentid is None or agentid == "":
        raise Rejected(codes.MISSING_AGENTID)
    # WeCom reads a numeric string as the number; anything else cannot match.
    if isinstance(agentid, bool) or str(agentid) != str(agent_id):
        raise Rejected(codes.INVALID_AGENTID)


def _app_content(msgtype: str, payload: Any, overflow: str) -> tuple[str, bool]:
    if not isinstance(payload, dict):
        raise Rejected(codes.EMPTY_CONTENT)
    if msgtype == "textcard":
        return _textcard(payload, overflow)
    content = payload.get("content")
    if not isinstance(content, str) or not content:
        raise Rejected(codes.EMPTY_CONTENT)
    limit = TEXT_LIMIT if msgtype == "text" else MARKDOWN_LIMIT
    if nbytes(content) <= limit:
        return content, False
    if msgtype == "text" and overflow == "truncate":
        return cut(content, limit), True
    raise Rejected(codes.CONTENT_TOO_LARGE, f"{msgtype}.content exceed max length {limit}")


def _textcard(payload: dict[str, Any], overflow: str) -> tuple[str, bool]:
    title, description, url = (payload.get(k) for k in ("title", "description", "url"))
    if not (isinstance(title, str) and title and isinstance(description, str) and description):
        raise Rejected(codes.EMPTY_CONTENT)
    if not isinstance(url, str) or not url:
        raise Rejected(codes.INVALID_PARAMETER, "textcard.url missing")
    truncated = False
    for name, limit in (
        ("title", TEXTCARD_TITLE_LIMIT),
        ("description", TEXTCARD_DESCRIPTION_LIMIT),
    ):
        value = title if name == "title" else description
        if nbytes(value) <= limit:
            continue
        if overflow != "truncate":
            raise Rejected(codes.CONTENT_TOO_LARGE, f"textcard.{name} exceed max length {limit}")
        truncated = True
        if name == "title":
            title = cut(title, limit)
        else:
            description = cut(description, limit)
    return f"{title}\n\n{description}", truncated


def _duplicate_interval(body: dict[str, Any]) -> int:
    """Seconds the duplicate check holds for this request; 0 when it is off."""
    if body.get("enable_duplicate_check") not in (1, "1", True):
        return 0
    interval = body.get("duplicate_check_interval", DEFAULT_DUPLICATE_CHECK_INTERVAL)
    if isinstance(interval, bool) or not isinstance(interval, int):
        raise Rejected(codes.INVALID_PARAMETER, "duplicate_check_interval must be an integer")
    if not 0 < interval <= MAX_DUPLICATE_CHECK_INTERVAL:
        raise Rejected(
            codes.INVALID_PARAMETER,
            f"duplicate_check_interval must be within 1..{MAX_DUPLICATE_CHECK_INTERVAL}",
        )
    return interval
