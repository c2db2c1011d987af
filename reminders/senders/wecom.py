"""WeCom app messages through the server API (``gettoken``, ``message/send``).

::

    "wecom": {
        "BACKEND": "reminders.senders.wecom.WeComSender",
        "OPTIONS": {"oversize": "reject"},  # credentials default to the WECOM_* settings
    }

Every message is rendered to the same bytes every time, and sent with WeCom's
duplicate check on, so a re-send after a lost reply is dropped by WeCom instead of
reaching the employee twice. That check compares content, not our idempotency key: two
different reminders with identical text to the same user inside the interval would be
merged too, which is why ``reminders.kinds.render`` stamps every message with its
occurrence, and why each part of a split text carries that stamp (``split_content``).

A card with buttons (``template_card``, ``button_interaction``: ``messages.cards``) is
held unique by its ``task_id`` instead, which WeCom refuses to take twice from one app
(errcode 42014): each run's card has its own, the same on every attempt. So a re-send of
a card whose first attempt reached WeCom (its reply lost) is answered 42014, and this
sender reports it as delivered before (``template_card.delivered_before``: no failure,
no second card); such cards, like the stamped types, are ones the provider does not
deliver twice (``deduplicates``). They go without the body check, which their
``task_id`` makes needless.

A message type with no field the stamp goes in (``news``, ``file``, ``image`` and the
other types outside ``stamps.STAMPED_FIELDS``), and a template card without a
``task_id``, is sent *without* the duplicate check: two occurrences of it may be the
same bytes, and WeCom would drop the second while our ledger says ``sent``. Making them
distinct in some other field would bet on which fields WeCom compares, which it does not
document (a ``file`` or an ``image`` has no such field at all). So for those messages
this channel is one without de-duplication (``deduplicates`` is false): the engine
never re-sends one whose delivery is in doubt (it ends ``unknown`` for ops, unless the
channel sets ``retry_in_doubt``), and never reserves its key in a batch.

A text split into parts (``oversize: "split"``) is one request per part. A part that
fails names the parts delivered before it (``SendError.delivered_parts``), and a message
that names the parts an earlier attempt delivered (``Message.sent_parts``) gets only the
rest sent, its reply listing every part's msgid.

Errors are classified by ``errcode`` alone (never ``errmsg``) as ``WECOM.md`` lists them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any, ClassVar
from urllib.parse import urlsplit

from django.conf import settings as django_settings

from ..exceptions import (
    ConfigurationSendError,
    InDoubtSendError,
    PayloadSendError,
    RecipientSendError,
    SendError,
    ThrottledSendError,
    TransientSendError,
)
from ..messages.stamps import STAMPED_FIELDS
from . import template_card
from .base import BaseSender, Limit, Message, Rate, SendResult
from .client import JsonClient, Reply, bare_url, canonical_json, timeout_setting
from .parts import CONTENT_LIMIT, MAX_PARTS, split_content
from .parts import size as _size
from .tokens import SharedToken, token_name

logger = logging.getLogger(__name__)

DEFAULT_API_BASE = "https://qyapi.weixin.qq.com"

# -- what WeCom's errcodes mean (WECOM.md) -----------------------------------------------
TOKEN_CODES = frozenset({40014, 42001, 41001})
PASSING_CODES = frozenset({-1, 6000})
# 45009 blocks the caller for a minute (an hour for the hourly limit, which we stay far
# under); 45033 is too many concurrent calls and clears as soon as calls finish.
THROTTLE_PAUSES: dict[int, float] = {45009: 60.0, 45033: 5.0}
# 41002 and 41004 (corpid, corpsecret missing) come from gettoken with empty settings.
CONFIGURATION_CODES = frozenset(
    {40001, 40013, 40091, 40056, 41011, 50003, 48002, 301002, 60020, 41002, 41004}
)
RECIPIENT_CODES = frozenset({81013, 82001, 40003, 40031, 40032, 60011, 50002})
# 47001 (data format error): the same bytes are malformed the next time too. 42014 (a
# card's task_id empty, too long or used before) reaches here only for a task_id we did
# not check; a checked one used before is a card delivered before (``send``).
PAYLOAD_CODES = frozenset({40008, 40035, 40058, 44004, 45002, 40033, 47001, 42014})

# -- what WeCom accepts ------------------------------------------------------------------
FIELD_LIMITS: dict[str, dict[str, int]] = {
    "textcard": {"title": 128, "description": 512, "url": 2048}
}
# The app message types of message/send.
APP_MSGTYPES = frozenset(
    {
        "text",
        "image",
        "voice",
        "video",
        "file",
        "textcard",
        "news",
        "mpnews",
        "markdown",
        "miniprogram_notice",
        "template_card",
    }
)
MAX_DUPLICATE_CHECK_SECONDS = 4 * 3600
RECALL_WINDOW = timedelta(hours=24)
# The types sent with WeCom's duplicate check, which compares bodies: those carrying the
# stamp in a text of their own. A template card is held unique by its task_id instead.
BODY_CHECKED = frozenset(STAMPED_FIELDS) - {"template_card"}


def classify(errcode: int, errmsg: str, what: str) -> SendError:
    """The error a non-zero ``errcode`` means; ``errmsg`` is only quoted."""
    text = f"{what}: WeCom errcode {errcode}" + (f" ({errmsg})." if errmsg else ".")
    code = str(errcode)
    if errcode in THROTTLE_PAUSES:
        return ThrottledSendError(text, code=code, pause_seconds=THROTTLE_PAUSES[errcode])
    if errcode in CONFIGURATION_CODES:
        return ConfigurationSendError(text, code=code)
    if errcode in RECIPIENT_CODES:
        return RecipientSendError(text, code=code)
    if errcode in PAYLOAD_CODES:
        return PayloadSendError(text, code=code)
    if errcode not in PASSING_CODES and errcode not in TOKEN_CODES:
        # A code we do not know yet, and so no proof that nothing was delivered. Where
        # the provider drops a repeated body (the app's duplicate check) the engine sends
        # it again inside the window; elsewhere (a robot) the outcome is unknown.
        logger.warning("%s: unknown WeCom errcode %s, delivery in doubt", what, errcode)
        return InDoubtSendError(text, code=code)
    return TransientSendError(text, code=code)


class WeComSender(BaseSender):
    """App messages (``text``, ``markdown``, ``textcard``, ``template_card``) to WeCom
    users.

    OPTIONS (each defaults to its ``WECOM_*`` setting, read when the sender is built):
    ``api_base``, ``corp_id``, ``corp_secret``, ``agent_id``, ``timeout`` (connect and
    read, seconds) and ``connect_timeout``; ``duplicate_check_interval`` (seconds, at
    most 4 hours, which is the default: it must cover the engine's whole retry window);
    ``oversize``: ``"reject"`` (default) or ``"split"`` for content over 2,048 bytes;
    ``safe``: 1 to send confidential messages.
    """

    supports_duplicate_check: ClassVar[bool] = True
    duplicate_check_seconds: ClassVar[int] = MAX_DUPLICATE_CHECK_SECONDS
    # WeCom's per-member limit of 30 a minute and 1,000 an hour, for the shared limiter.
    recipient_rate: ClassVar[Rate | None] = Rate.at_most(30, 60)
    msgtypes: ClassVar[frozenset[str] | None] = APP_MSGTYPES
    carries_cards: ClassVar[bool] = True
    # WeCom's message/recall takes back an app message within 24 hours of its sending.
    recall_window: ClassVar[timedelta | None] = RECALL_WINDOW
    # App messages spend the corp's daily quota (seats x 200 a Beijing day).
    spends_app_quota: ClassVar[bool] = True

    def __init__(
        self,
        alias: str,
        *,
        api_base: str | None = None,
        corp_id: str | None = None,
        corp_secret: str | None = None,
        agent_id: str | int | None = None,
        timeout: float | None = None,
        connect_timeout: float | None = None,
        duplicate_check_interval: int = MAX_DUPLICATE_CHECK_SECONDS,
        oversize: str = "reject",
        safe: int = 0,
        **options: Any,
    ) -> None:
        # The secret is kept off ``self.options``, which anything may print.
        super().__init__(alias, **options)
        self.api_base = str(api_base or _setting("WECOM_API_BASE", DEFAULT_API_BASE)).rstrip("/")
        self.corp_id = str(corp_id if corp_id is not None else _setting("WECOM_CORP_ID", ""))
        self._secret = str(
            corp_secret if corp_secret is not None else _setting("WECOM_CORP_SECRET", "")
        )
        raw_agent = agent_id if agent_id is not None else _setting("WECOM_AGENT_ID", "")
        self.agent_id = str(raw_agent).strip()
        if oversize not in {"reject", "split"}:
            raise ConfigurationSendError(
                f"Channel {alias!r}: oversize must be 'reject' or 'split', not {oversize!r}.",
                code="options",
            )
        self.oversize = oversize
        interval = int(duplicate_check_interval)
        if not 0 < interval <= MAX_DUPLICATE_CHECK_SECONDS:
            raise ConfigurationSendError(
                f"Channel {alias!r}: duplicate_check_interval must be 1 to "
                f"{MAX_DUPLICATE_CHECK_SECONDS} seconds, not {interval}.",
                code="options",
            )
        self.duplicate_check_seconds = interval  # type: ignore[misc]
        self.safe = int(safe)
        self.client = JsonClient(
            timeout=float(timeout or timeout_setting()),
            connect_timeout=connect_timeout,
            secrets=self.secrets,
        )
        self.token = SharedToken(
            token_name(
                "wecom",
                urlsplit(self.api_base).netloc + urlsplit(self.api_base).path,
                self.corp_id,
                self.agent_id,
                secret=self._secret,
            ),
            self._fetch_token,
            lease_seconds=2 * sum(self.client.timeout) + 5,
        )

    @property
    def rate_scope(self) -> str:
        """WeCom counts limits per app: every alias of one app shares its buckets."""
        return str(self.options.get("rate_scope") or f"wecom:{self.corp_id}:{self.agent_id}")

    def limits(self, message: Message, priority: str | None = None) -> list[Limit]:
        """The app's channel and the member's buckets; a message split into n parts is n
        messages to WeCom, so it spends n slots of each, less the parts an earlier
        attempt delivered (``Message.sent_parts``). One that cannot be split or is
        invalid costs 1: its send reports the error."""
        try:
            cost = max(1, len(self._parts(message)) - len(message.sent_parts))
        except SendError:
            cost = 1
        return [replace(limit, cost=cost) for limit in super().limits(message, priority)]

    def channel_rate(self) -> Rate | None:
        """OPTIONS ``rate_limit``, else ``WECOM_RATE_LIMIT`` messages a second."""
        if not self.options.get("rate_limit"):
            per_second = _setting("WECOM_RATE_LIMIT", 0)
            if per_second:
                self.options["rate_limit"] = float(per_second)
        return super().channel_rate()

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.alias!r} {self.api_base} "
            f"corp={self.corp_id} agent={self.agent_id}>"
        )

    def close(self) -> None:
        self.client.close()

    def secrets(self) -> list[str]:
        return [self._secret, self.token.local_value, *super().secrets()]

    # -- the access token -------------------------------------------------------------

    def check(self) -> None:
        self._require_credentials()

    def prepare(self) -> None:
        self._require_credentials()
        self.token.get()

    def _require_credentials(self) -> int:
        missing = [
            name
            for name, value in (
                ("WECOM_CORP_ID", self.corp_id),
                ("WECOM_CORP_SECRET", self._secret),
                ("WECOM_AGENT_ID", self.agent_id),
            )
            if not value
        ]
        if missing:
            raise ConfigurationSendError(
                f"Channel {self.alias!r}: {', '.join(missing)} not set.", code="credentials"
            )
        try:
            return int(self.agent_id)
        except ValueError:
            raise ConfigurationSendError(
                f"Channel {self.alias!r}: WECOM_AGENT_ID must be an integer, "
                f"not {self.agent_id!r}.",
                code="credentials",
            ) from None

    def _fetch_token(self) -> tuple[str, float]:
        what = "WeCom gettoken"
        reply = self.client.call(
            "GET",
            f"{self.api_base}/cgi-bin/gettoken",
            what=what,
            params={"corpid": self.corp_id, "corpsecret": self._secret},
        )
        data = self._errcode_reply(reply, what)
        errcode = data["errcode"]
        if errcode != 0:
            if errcode in TOKEN_CODES:
                # Not a token problem when asking for a token: our request is wrong.
                raise ConfigurationSendError(f"{what}: WeCom errcode {errcode}.", code=str(errcode))
            raise classify(errcode, self.client.redact(str(data.get("errmsg", ""))), what)
        token = data.get("access_token")
        if not isinstance(token, str) or not token:
            raise TransientSendError(f"{what}: the reply has no access_token.", code="bad-reply")
        expires_in = data.get("expires_in")
        lifetime = float(expires_in) if isinstance(expires_in, int | float) else 7200.0
        return token, max(lifetime, 1.0)

    # -- sending ----------------------------------------------------------------------

    def send(self, message: Message) -> SendResult:
        agent_id = self._require_credentials()
        # Checked when the task was scheduled; checked again because "@all" or a "|"
        # list in ``touser`` would reach the whole company or past the per-member limit.
        self.validate_recipient(message.recipient)
        bodies = [self._payload(message, agent_id, part) for part in self._parts(message)]
        task_id = template_card.card_task_id(message)
        replies: list[dict[str, Any]] = []
        delivered = list(message.sent_parts)
        # The parts an earlier attempt delivered are not sent again: only the rest.
        for index, body in enumerate(bodies[len(delivered) :], len(delivered) + 1):
            what = "WeCom message/send"
            if len(bodies) > 1:
                what += f" (part {index}/{len(bodies)}, {index - 1} delivered before it)"
            try:
                reply = self._send_body(body, what, card=task_id is not None)
                if task_id is not None and reply["errcode"] == template_card.TASK_ID_USED:
                    # Our task_id is valid and no other run's: this card reached WeCom before.
                    return template_card.delivered_before(task_id)
                self._check_recipients(message.recipient, reply, what)
            except SendError as exc:
                exc.delivered_parts = tuple(delivered)
                raise
            replies.append(reply)
            delivered.append(str(reply.get("msgid") or ""))
        return self._result(replies, message.sent_parts)

    def check_message(self, message: Message) -> None:
        self._parts(message)

    def _parts(self, message: Message) -> list[dict[str, Any]]:
        """The message's body, or its parts when it is too long and splitting is on."""
        body = message.body
        what = f"WeCom {message.msgtype} message"
        if not self.accepts(message.msgtype):
            raise PayloadSendError(
                f"{what}: WeCom app messages have no type {message.msgtype!r}.", code="msgtype"
            )
        if message.msgtype == "template_card" and body.get("card_type") == template_card.CARD_TYPE:
            problem = template_card.problem(body)
            if problem:
                raise PayloadSendError(f"{what}: {problem}.", code="card")
        for name, limit in FIELD_LIMITS.get(message.msgtype, {}).items():
            size = _size(str(body.get(name, "")))
            if size > limit:
                raise PayloadSendError(
                    f"{what}: {name} is {size} bytes, over WeCom's limit of {limit}.",
                    code="too-large",
                )
        if message.msgtype not in {"text", "markdown"}:
            return [body]
        content = body.get("content")
        if not isinstance(content, str) or not content.strip():
            raise PayloadSendError(f"{what}: the content is empty.", code="empty")
        size = _size(content)
        if size <= CONTENT_LIMIT:
            return [body]
        if self.oversize != "split":
            raise PayloadSendError(
                f"{what}: the content is {size} bytes, over WeCom's limit of "
                f"{CONTENT_LIMIT} (the channel rejects oversize content rather than cut it).",
                code="too-large",
            )
        parts = split_content(content)
        if len(parts) > MAX_PARTS:
            raise PayloadSendError(
                f"{what}: the content is {size} bytes, {len(parts)} parts; at most "
                f"{MAX_PARTS} are sent.",
                code="too-large",
            )
        return [{**body, "content": part} for part in parts]

    def deduplicates(self, message: Message) -> bool:
        """WeCom does not deliver this message twice: a type that carries the stamp, sent
        with WeCom's duplicate check, or a card with a valid ``task_id`` (see the
        module's docstring)."""
        return message.msgtype in BODY_CHECKED or template_card.card_task_id(message) is not None

    def _payload(self, message: Message, agent_id: int, body: dict[str, Any]) -> bytes:
        payload: dict[str, Any] = {
            "touser": message.recipient,
            "msgtype": message.msgtype,
            message.msgtype: body,
            "agentid": agent_id,
        }
        if message.msgtype in BODY_CHECKED:
            payload["enable_duplicate_check"] = 1
            payload["duplicate_check_interval"] = self.duplicate_check_seconds
        if self.safe:
            payload["safe"] = self.safe
        return canonical_json(payload)

    def _send_body(self, body: bytes, what: str, *, card: bool = False) -> dict[str, Any]:
        """WeCom's reply to ``body`` (errcode 0), or the error it means; a ``card``'s
        "task_id used" (42014) is a reply too, for ``send`` to read."""
        passing = (template_card.TASK_ID_USED,) if card else ()
        return self._call("message/send", body, what, passing=passing)

    def _call(
        self, endpoint: str, body: bytes, what: str, *, passing: tuple[int, ...] = ()
    ) -> dict[str, Any]:
        """WeCom's reply to ``body`` posted to ``/cgi-bin/<endpoint>`` (errcode 0, or one
        of ``passing``), or the error it means. A token WeCom expired or revoked early is
        fetched afresh once, and the same bytes posted again."""
        token = self.token.get()
        data = self._post(endpoint, token, body, what)
        if data["errcode"] in TOKEN_CODES:
            token = self.token.get(stale=token)
            data = self._post(endpoint, token, body, what)
            if data["errcode"] in TOKEN_CODES:
                raise TransientSendError(
                    f"{what}: WeCom rejected a freshly fetched token too "
                    f"(errcode {data['errcode']}).",
                    code=str(data["errcode"]),
                )
        if data["errcode"] != 0 and data["errcode"] not in passing:
            raise classify(data["errcode"], self.client.redact(str(data.get("errmsg", ""))), what)
        return data

    def _post(self, endpoint: str, token: str, body: bytes, what: str) -> dict[str, Any]:
        reply = self.client.call(
            "POST",
            f"{self.api_base}/cgi-bin/{endpoint}",
            what=what,
            params={"access_token": token},
            body=body,
        )
        return self._errcode_reply(reply, what)

    # -- after the send: recall, and a card's update ----------------------------------

    def recall(self, message_id: str) -> None:
        """WeCom's ``message/recall`` of one message (one part of a split one): an app
        message, within 24 hours of its sending, which WeCom checks too."""
        self._require_credentials()
        what = f"WeCom message/recall of {message_id}"
        self._call("message/recall", canonical_json({"msgid": message_id}), what)

    def update_card(self, recipient: str, response_code: str, replace_name: str) -> None:
        """WeCom's ``update_template_card``: the buttons of the card ``response_code``
        names, as ``recipient`` sees it, become one that cannot be clicked, reading
        ``replace_name``. WeCom takes a response code once, within 72 hours."""
        self._update(recipient, response_code, {"button": {"replace_name": replace_name}})

    def replace_card(self, recipient: str, response_code: str, card: dict[str, Any]) -> None:
        """WeCom's ``update_template_card`` with a whole ``template_card``: the card
        ``response_code`` names, as ``recipient`` sees it, becomes ``card``."""
        self._update(recipient, response_code, {"template_card": card})

    def _update(self, recipient: str, response_code: str, change: dict[str, Any]) -> None:
        agent_id = self._require_credentials()
        self.validate_recipient(recipient)
        what = "WeCom message/update_template_card"
        body = canonical_json(
            {
                "userids": [recipient],
                "agentid": agent_id,
                "response_code": response_code,
                **change,
            }
        )
        reply = self._call("message/update_template_card", body, what)
        refused = reply.get("invaliduser") or []
        if isinstance(refused, str):
            refused = refused.split("|")
        if recipient.lower() in {str(user).lower() for user in refused}:
            raise RecipientSendError(
                f"{what}: WeCom did not update the card of {recipient} (invaliduser).",
                code="invaliduser",
            )

    def message_statistics(self, time_type: int = 1) -> dict[str, Any]:
        """WeCom's ``message/get_statistics`` for this app: ``{"agentid", "app_name",
        "count"}``, the count being the app's messages that reached someone (WeCom's
        发消息成功人次: a member reached is one) on Beijing's day ``time_type`` (0 today,
        1 yesterday). An app WeCom does not list sent nothing: count 0, no name. Errors
        are ``SendError``s, classified as a send's."""
        agent_id = self._require_credentials()
        if time_type not in (0, 1):
            raise ValueError(f"time_type is 0 (today) or 1 (yesterday), not {time_type!r}")
        what = "WeCom message/get_statistics"
        reply = self._call("message/get_statistics", canonical_json({"time_type": time_type}), what)
        rows = reply.get("statistics")
        if not isinstance(rows, list):
            raise TransientSendError(f"{what}: the reply has no statistics.", code="bad-reply")
        for row in rows:
            if isinstance(row, dict) and str(row.get("agentid")) == str(agent_id):
                count = row.get("count")
                if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                    raise TransientSendError(
                        f"{what}: the count of agent {agent_id} is {count!r}, not a number.",
                        code="bad-reply",
                    )
                return {
                    "agentid": agent_id,
                    "app_name": str(row.get("app_name") or ""),
                    "count": count,
                }
        return {"agentid": agent_id, "app_name": "", "count": 0}

    def _errcode_reply(self, reply: Reply, what: str) -> dict[str, Any]:
        self.client.check_status(reply, what)
        data = reply.object
        if not isinstance(data.get("errcode"), int):
            # WeCom always answers JSON with an errcode; anything else is a proxy or a
            # load balancer in the way, which passes; whether WeCom got it is not known.
            raise InDoubtSendError(
                f"{what}: the reply from {bare_url(self.api_base)} is not WeCom's JSON.",
                code="bad-reply",
            )
        return data

    def _check_recipients(self, recipient: str, reply: dict[str, Any], what: str) -> None:
        """errcode 0 with our one recipient listed invalid means nobody got it."""
        refused = {
            user.lower()
            for name in ("invaliduser", "unlicenseduser")
            for user in str(reply.get(name) or "").split("|")
        }
        if recipient.lower() in refused:
            raise RecipientSendError(
                f"{what}: WeCom did not deliver to {recipient} "
                f"(invaliduser={reply.get('invaliduser') or ''!s}, "
                f"unlicenseduser={reply.get('unlicenseduser') or ''!s}).",
                code="invaliduser",
            )

    def _result(self, replies: list[dict[str, Any]], earlier: Sequence[str] = ()) -> SendResult:
        """What WeCom said to the parts sent (``replies``), after those ``earlier``
        attempts delivered (their message ids)."""
        # The detail is what else WeCom said: the code and first msgid have fields of
        # their own, and keeping them out lets a batch's plain replies share one UPDATE.
        msgids = [*earlier, *(str(reply.get("msgid") or "") for reply in replies)]
        detail: dict[str, Any] = {}
        if len(msgids) > 1:
            detail["parts"] = len(msgids)
            detail["msgids"] = msgids
        for name in ("invaliduser", "invalidparty", "invalidtag", "unlicenseduser"):
            values = sorted({str(r[name]) for r in replies if r.get(name)})
            if values:
                detail[name] = "|".join(values)
        if len(replies) == 1 and replies[0].get("response_code"):
            # A card with buttons: the code that updates it once, within 72 hours.
            detail["response_code"] = str(replies[0]["response_code"])
        return SendResult(message_id=msgids[0], code="0", detail=detail)


def _setting(name: str, default: Any) -> Any:
    return getattr(django_settings, name, default)
