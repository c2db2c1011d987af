"""A click on a card's button, as WeCom reports it: the ``template_card_event`` posted,
encrypted and signed, to the app's callback URL (``config.CallbackTarget``).

``SandboxState.prepare_click`` decides under the state's lock whether the click may be
made (the card delivered, not recalled, its buttons not replaced, the key one of its
callback buttons, a callback configured) and issues its response code; ``post`` then
builds the event, seals it with ``reminders.callback`` (the very functions our receiver
reads it with) and posts it with no lock held, so that a receiver that calls the
sandbox back (an update with the click's code) is served at once;
``SandboxState.record_click`` writes the outcome on the card's ledger entry.

The event is WeCom's (接收事件, 模板卡片事件推送): ``ToUserName`` the corp id,
``FromUserName`` the member who clicked, ``CreateTime`` now (the sandbox's wall clock,
seconds: real time plus whatever ``advance`` added), ``MsgType`` event, ``Event``
template_card_event, ``EventKey`` the button's key, ``TaskId`` the card's, ``CardType``
button_interaction, ``ResponseCode`` and ``AgentID``. It is posted as WeCom posts it:
``msg_signature``, ``timestamp`` (the same seconds) and ``nonce`` in the query string,
the envelope (``events.post_xml``) as the body, ``Content-Type: text/xml``, and
WeCom's 5 seconds to answer. Redirects are not followed.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import requests

from reminders.callback import crypto, events

from .config import CallbackTarget

CLIP = 2000  # characters of the callback's answer kept on the ledger entry


class ClickRefused(Exception):
    """A click the sandbox will not make: ``status`` is the HTTP status ``/sandbox/click``
    answers (400, 404 or 409), ``reason`` a word for programs, ``error`` for people."""

    def __init__(self, status: int, reason: str, error: str) -> None:
        super().__init__(error)
        self.status = status
        self.reason = reason
        self.error = error

    def as_dict(self) -> dict[str, Any]:
        return {"error": self.error, "reason": self.reason}


@dataclass(frozen=True)
class ClickPlan:
    """A click the state allowed: what the event says, and where it goes."""

    entry: int
    key: str
    user: str
    task_id: str
    response_code: str
    corp_id: str
    agent_id: int
    at: float
    callback: CallbackTarget


@dataclass(frozen=True)
class Click:
    """A click made, and what the callback answered: its HTTP ``status`` and ``body``
    (clipped), or the ``error`` (no connection, timed out) when it did not answer."""

    entry: int
    key: str
    user: str
    task_id: str
    response_code: str
    at: float
    url: str
    status: int | None
    body: str
    elapsed_ms: float
    error: str | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def ok(self) -> bool:
        return self.error is None and self.status is not None and 200 <= self.status < 300


def event_xml(plan: ClickPlan) -> str:
    """The decrypted ``template_card_event`` of ``plan``, field by field as WeCom writes it."""
    return (
        "<xml>"
        f"<ToUserName>{_cdata(plan.corp_id)}</ToUserName>"
        f"<FromUserName>{_cdata(plan.user)}</FromUserName>"
        f"<CreateTime>{int(plan.at)}</CreateTime>"
        f"<MsgType>{_cdata('event')}</MsgType>"
        f"<Event>{_cdata(events.TEMPLATE_CARD_EVENT)}</Event>"
        f"<EventKey>{_cdata(plan.key)}</EventKey>"
        f"<TaskId>{_cdata(plan.task_id)}</TaskId>"
        f"<CardType>{_cdata('button_interaction')}</CardType>"
        f"<ResponseCode>{_cdata(plan.response_code)}</ResponseCode>"
        f"<AgentID>{plan.agent_id}</AgentID>"
        "</xml>"
    )


def post(plan: ClickPlan) -> Click:
    """Seal the event and post it to the callback; never raises for the receiver's sake."""
    target = plan.callback
    sealed = crypto.seal(
        target.credentials(plan.corp_id), event_xml(plan), timestamp=str(int(plan.at))
    )
    body = events.post_xml(sealed, to_user_name=plan.corp_id, agent_id=str(plan.agent_id))
    params = {
        "msg_signature": sealed.msg_signature,
        "timestamp": sealed.timestamp,
        "nonce": sealed.nonce,
    }
    status: int | None = None
    answer, error = "", None
    started = time.monotonic()
    try:
        response = requests.post(
            target.url,
            params=params,
            data=body.encode(),
            headers={"Content-Type": "text/xml"},
            timeout=target.timeout,
            allow_redirects=False,
        )
        status, answer = response.status_code, response.text[:CLIP]
    except requests.Timeout:
        error = f"no answer within {target.timeout:g} s"
    except requests.RequestException as exc:
        error = f"{type(exc).__name__}: {exc}"[:CLIP]
    elapsed = round((time.monotonic() - started) * 1000, 1)
    return Click(
        entry=plan.entry,
        key=plan.key,
        user=plan.user,
        task_id=plan.task_id,
        response_code=plan.response_code,
        at=plan.at,
        url=target.url,
        status=status,
        body=answer,
        elapsed_ms=elapsed,
        error=error,
    )


def _cdata(value: str) -> str:
    # A "]]>" inside a value ends one CDATA section and starts another, as XML allows.
    return "<![CDATA[" + value.replace("]]>", "]]]]><![CDATA[>") + "]]>"
