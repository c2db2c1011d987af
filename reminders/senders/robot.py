"""WeCom group robots (webhooks): ops alerts and group reports.

::

    "ops_group": {
        "BACKEND": "reminders.senders.robot.WeComRobotSender",
        "OPTIONS": {"key": env.str("WECOM_ROBOT_KEY")},
    }

A robot posts to the one group its key belongs to; the message's recipient is only
mentioned (``mention_recipient``) or, by default, ignored. A ``text`` body may carry
``mentioned_list`` (member ids) and ``mentioned_mobile_list``; ``"@all"`` in either
mentions the whole group and is refused unless OPTIONS ``allow_mention_all`` is true.
"""

from __future__ import annotations

import hashlib
from typing import Any, ClassVar

from django.conf import settings as django_settings

from ..exceptions import ConfigurationSendError, InDoubtSendError, PayloadSendError
from ..recipients import member_id_problem
from .base import BaseSender, Message, Rate, SendResult
from .client import JsonClient, canonical_json, timeout_setting
from .wecom import CONTENT_LIMIT, DEFAULT_API_BASE, classify

INVALID_KEY = 93000
MARKDOWN_LIMIT = 4096  # bytes; WeCom rejects longer markdown from a robot
# What a group robot posts: no textcard, which is an app message.
# The template cards a group robot posts (WeCom's 群机器人 API): no button card, since a
# robot has no callback to take the clicks.
ROBOT_CARD_TYPES = ("text_notice", "news_notice")
ROBOT_MSGTYPES = frozenset(
    {"text", "markdown", "markdown_v2", "image", "news", "file", "voice", "template_card"}
)


class WeComRobotSender(BaseSender):
    """Posts to a group robot's webhook, ``/cgi-bin/webhook/send?key=KEY``.

    OPTIONS: ``key`` (the webhook key: a credential), ``api_base`` (default
    ``WECOM_API_BASE``), ``timeout``, ``connect_timeout``, ``mention_recipient``,
    ``allow_mention_all`` (default false).
    """

    # At most 20 messages a minute per robot, whatever the recipients.
    robot_rate: ClassVar[Rate] = Rate.at_most(20, 60)
    msgtypes: ClassVar[frozenset[str] | None] = ROBOT_MSGTYPES

    def __init__(
        self,
        alias: str,
        *,
        key: str = "",
        api_base: str | None = None,
        timeout: float | None = None,
        connect_timeout: float | None = None,
        mention_recipient: bool = False,
        allow_mention_all: bool = False,
        **options: Any,
    ) -> None:
        super().__init__(alias, **options)
        self._key = str(key)
        base = api_base or getattr(django_settings, "WECOM_API_BASE", DEFAULT_API_BASE)
        self.api_base = str(base).rstrip("/")
        self.mention_recipient = mention_recipient
        if not isinstance(allow_mention_all, bool):
            raise ConfigurationSendError(
                f"Channel {alias!r}: allow_mention_all must be True or False, "
                f"not {allow_mention_all!r}.",
                code="options",
            )
        self.allow_mention_all = allow_mention_all
        self.client = JsonClient(
            timeout=float(timeout or timeout_setting()),
            connect_timeout=connect_timeout,
            secrets=self.secrets,
        )

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.alias!r} {self.api_base}>"

    def secrets(self) -> list[str]:
        return [self._key, *super().secrets()]

    @property
    def rate_scope(self) -> str:
        """Names the robot, so two aliases of one key share its 20 a minute."""
        return "wecom-robot:" + hashlib.sha256(self._key.encode()).hexdigest()[:16]

    def channel_rate(self) -> Rate | None:
        return super().channel_rate() or self.robot_rate

    def close(self) -> None:
        self.client.close()

    def send(self, message: Message) -> SendResult:
        what = "WeCom webhook/send"
        if not self._key:
            raise ConfigurationSendError(
                f"Channel {self.alias!r}: OPTIONS has no robot key.", code="credentials"
            )
        body = self._body(message)
        reply = self.client.call(
            "POST",
            f"{self.api_base}/cgi-bin/webhook/send",
            what=what,
            params={"key": self._key},
            body=canonical_json({"msgtype": message.msgtype, message.msgtype: body}),
        )
        self.client.check_status(reply, what)
        data = reply.object
        errcode = data.get("errcode")
        if not isinstance(errcode, int):
            # A proxy or load balancer in the way, which passes; whether WeCom got the
            # message is not known.
            raise InDoubtSendError(f"{what}: the reply is not WeCom's JSON.", code="bad-reply")
        if errcode == INVALID_KEY:
            raise ConfigurationSendError(
                f"{what}: WeCom errcode {errcode}: the robot key is invalid.", code=str(errcode)
            )
        if errcode != 0:
            raise classify(errcode, self.client.redact(str(data.get("errmsg", ""))), what)
        return SendResult(code="0", detail={"errcode": 0})

    def check_message(self, message: Message) -> None:
        self._body(message)

    def _body(self, message: Message) -> dict[str, Any]:
        body = dict(message.body)
        what = f"WeCom robot {message.msgtype} message"
        if not self.accepts(message.msgtype):
            raise PayloadSendError(
                f"{what}: a group robot posts no {message.msgtype!r} messages "
                f"(it takes {', '.join(sorted(ROBOT_MSGTYPES))}).",
                code="msgtype",
            )
        self._check_content(message.msgtype, body, what)
        if message.msgtype == "template_card" and body.get("card_type") not in ROBOT_CARD_TYPES:
            raise PayloadSendError(
                f"{what}: a group robot posts template cards of type "
                f"{' and '.join(ROBOT_CARD_TYPES)} only, not {body.get('card_type')!r} "
                "(no buttons: it has no callback).",
                code="msgtype",
            )
        if message.msgtype == "text":
            if self.mention_recipient and message.recipient:
                mentioned = body.get("mentioned_list") or []
                if isinstance(mentioned, list) and message.recipient not in mentioned:
                    body["mentioned_list"] = [*mentioned, message.recipient]
            self._check_mentions(body, what)
        return body

    def _check_content(self, msgtype: str, body: dict[str, Any], what: str) -> None:
        limit = {"text": CONTENT_LIMIT, "markdown": MARKDOWN_LIMIT}.get(msgtype)
        if limit is None:
            return
        content = body.get("content")
        if not isinstance(content, str) or not content.strip():
            raise PayloadSendError(f"{what}: the content is empty.", code="empty")
        size = len(content.encode())
        if size > limit:
            raise PayloadSendError(
                f"{what}: the content is {size} bytes, over WeCom's limit of {limit}.",
                code="too-large",
            )

    def _check_mentions(self, body: dict[str, Any], what: str) -> None:
        """Each ``mentioned_list`` entry is one member id; ``"@all"`` only where allowed."""
        for name in ("mentioned_list", "mentioned_mobile_list"):
            entries = body.get(name) or []
            if not isinstance(entries, list):
                raise PayloadSendError(f"{what}: {name} must be a list.", code="mentions")
            if "@all" in entries and not self.allow_mention_all:
                raise PayloadSendError(
                    f'{what}: {name} has "@all", which mentions everyone in the group; '
                    f"channel {self.alias!r} does not allow it (OPTIONS allow_mention_all).",
                    code="mention-all",
                )
        for entry in body.get("mentioned_list") or []:
            if entry == "@all":
                continue
            problem = member_id_problem(entry) if isinstance(entry, str) else "not text"
            if problem is not None:
                raise PayloadSendError(
                    f"{what}: mentioned_list entry {entry!r}: {problem}", code="mentions"
                )
