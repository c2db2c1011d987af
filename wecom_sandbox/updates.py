"""A ``message/update_template_card`` body (更新模版卡片消息) checked as WeCom checks it,
without the sandbox's state: what the state then checks against the card is in
``SandboxState.message_update_template_card``.

The body: ``agentid`` (the app's), ``response_code`` (from ``message/send``'s reply to
a button card, or from a click's event), whom to update (``userids``, a list of at most
1,000 member ids; ``partyids`` and ``tagids``, lists of at most 100 ids; or ``atall``
1 for every recipient) and what the card becomes: ``button.replace_name`` (its buttons
become one that cannot be clicked, reading that text) or a whole ``template_card``.

WeCom documents these rules but not, for most of them, the errcode of a refusal; the
sandbox answers with the closest documented code, and says so here:

* No ``agentid``: 41011; another app's: 40056 (as ``message/send``).
* No ``response_code``; a code never issued, already used (each is good for one
  update) or issued more than 72 hours ago on the sandbox clock; neither ``button``
  nor ``template_card``, or both (WeCom documents them as alternatives; taking both is
  a reading the sandbox does not make); no ``replace_name``; recipients that are not
  lists of ids, or over their counts; none at all without ``atall`` 1; ``atall`` other
  than 0 or 1; a ``template_card`` whose ``task_id`` is not the updated card's; a card
  that was recalled: 40058 (invalid parameter), WeCom's errcode for an invalid field.
* A ``replace_name`` longer than a button's text may be (10 字, ``cards``): 45002, as
  a button's text of ``message/send``.
* A ``template_card`` is checked by ``wecom_sandbox.cards`` as ``message/send`` checks
  one, with its errcodes.
* ``userids`` of members the card was not delivered to are answered in ``invaliduser``
  (a list, as WeCom's reply writes it) and not updated; when nobody named is a
  recipient: 81013 (user & party & tag all invalid), as ``message/send`` answers.

A refusal changes nothing: the response code stays unspent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import codes
from .cards import check_text, template_card
from .config import MAX_UPDATE_PARTYIDS, MAX_UPDATE_TAGIDS, MAX_UPDATE_USERIDS, SandboxConfig
from .replies import Rejected
from .validation import check_agent, parse


@dataclass(frozen=True)
class UpdateRequest:
    """An update body that passed the checks that need no state."""

    body: dict[str, Any]
    response_code: str
    userids: tuple[str, ...]
    partyids: tuple[str, ...]
    tagids: tuple[str, ...]
    atall: bool
    replace_name: str | None = None
    card: dict[str, Any] | None = None
    content: str = ""
    task_id: str = ""


def update_request(raw: bytes, config: SandboxConfig) -> UpdateRequest:
    body = parse(raw)
    check_agent(body.get("agentid"), config.agent_id)
    code = body.get("response_code")
    if not isinstance(code, str) or not code:
        raise Rejected(codes.INVALID_PARAMETER, "response_code missing")
    button, card = body.get("button"), body.get("template_card")
    if button is not None and card is not None:
        raise Rejected(codes.INVALID_PARAMETER, "give button or template_card, not both")
    replace_name: str | None = None
    content = task_id = ""
    if button is not None:
        replace_name = button.get("replace_name") if isinstance(button, dict) else None
        if not isinstance(replace_name, str) or not replace_name:
            raise Rejected(codes.INVALID_PARAMETER, "button.replace_name missing")
        check_text("button_list.text", replace_name, "button.replace_name")
    elif isinstance(card, dict) and card:
        content, task_id = template_card(card)
    else:
        raise Rejected(codes.INVALID_PARAMETER, "button or template_card missing")
    atall = body.get("atall", 0)
    if isinstance(atall, bool) or atall not in (0, 1):
        raise Rejected(codes.INVALID_PARAMETER, "atall must be 0 or 1")
    userids = _ids(body, "userids", MAX_UPDATE_USERIDS, str)
    partyids = _ids(body, "partyids", MAX_UPDATE_PARTYIDS, int)
    tagids = _ids(body, "tagids", MAX_UPDATE_TAGIDS, int)
    if not (atall or userids or partyids or tagids):
        raise Rejected(
            codes.INVALID_PARAMETER, "userids, partyids and tagids are all empty and atall is 0"
        )
    return UpdateRequest(
        body=body,
        response_code=code,
        userids=userids,
        partyids=partyids,
        tagids=tagids,
        atall=atall == 1,
        replace_name=replace_name,
        card=card if replace_name is None else None,
        content=content,
        task_id=task_id,
    )


def _ids(body: dict[str, Any], name: str, limit: int, kind: type) -> tuple[str, ...]:
    """A list of ids (member ids are strings, department and tag ids numbers), as text."""
    value = body.get(name)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(
        isinstance(v, kind) and not isinstance(v, bool) and v != "" for v in value
    ):
        what = "member ids" if kind is str else "numbers"
        raise Rejected(codes.INVALID_PARAMETER, f"{name} must be a list of {what}")
    if len(value) > limit:
        raise Rejected(codes.INVALID_PARAMETER, f"{name} exceed max count {limit}")
    return tuple(str(v) for v in value)
