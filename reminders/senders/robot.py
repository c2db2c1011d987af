"""WeCom group robots (webhooks): ops alerts and group reports.

::

    "ops_group": {
        "BACKEND": "reminders.senders.robot.WeComRobotSender",
        "OPTIONS": {"key": env.str("WECOM_ROBOT_KEY")},
    }

A robot posts to the one group its key belongs to; the message's recipient is only
mentioned (``mention_recipient``) or, by default, ignored. A ``text`` body may carry
``mentioned_list`` (user ids or ``"@all"``) and ``mentioned_mobile_list``.
"""

from __future__ import annotations

import hashlib
from typing import Any, ClassVar

from django.conf import settings as django_settings

from ..exceptions import ConfigurationSendError, InDoubtSendError, PayloadSendError
from .base import BaseSender, Message, Rate, SendResult
from .http import JsonClient, canonical_json, timeout_setting
from .wecom import CONTENT_LIMIT, DEFAULT_API_BASE, classify

INVALID_KEY = 93000
MARKDOWN_LIMIT = 4096  # bytes; WeCom rejects longer markdown from a robot


class WeComRobotSender(BaseSender):
    """Posts to a group robot's webhook, ``/cgi-bin/webhook/send?key=KEY``.

    OPTIONS: ``key`` (the webhook key: a credential), ``api_base`` (default
    ``WECOM_API_BASE``), ``timeout``, ``connect_timeout``, ``mention_recipient``.
    """

    # At most 20 messages a minute per robot, whatever the recipients.
    robot_rate: ClassVar[Rate] = Rate.at_most(20, 60)

    def __init__(
        self,
        alias: str,
        *,
        key: str = "",
        api_base: str | None = None,
        timeout: float | None = None,
        connect_timeout: float | None = None,
        mention_recipient: bool = False,
        **options: Any,
    ) -> None:
        super().__init__(alias, **options)
        self._key = str(key)
        base = api_base or getattr(django_settings, "WECOM_API_BASE", DEFAULT_API_BASE)
        self.api_base = str(base).rstrip("/")
        self.mention_recipient = mention_recipient
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

    def _body(self, message: Message) -> dict[str, Any]:
        body = dict(message.body)
        what = f"WeCom robot {message.msgtype} message"
        limit = {"text": CONTENT_LIMIT, "markdown": MARKDOWN_LIMIT}.get(message.msgtype)
        if limit is not None:
            content = body.get("content")
            if not isinstance(content, str) or not content.strip():
                raise PayloadSendError(f"{what}: the content is empty.", code="empty")
            size = len(content.encode())
            if size > limit:
                raise PayloadSendError(
                    f"{what}: the content is {size} bytes, over WeCom's limit of {limit}.",
                    code="too-large",
                )
        if message.msgtype == "text" and self.mention_recipient and message.recipient:
            mentioned = list(body.get("mentioned_list") or [])
            if message.recipient not in mentioned:
                body["mentioned_list"] = [*mentioned, message.recipient]
        return body
