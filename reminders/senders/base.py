"""The contract every sender implements; the engine knows nothing else about them."""

from __future__ import annotations

import json
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..conf import settings as conf
from ..exceptions import RecipientSendError
from ..recipients import member_id_problem

REDACTED = "***"
# Query parameters that carry credentials in the APIs we call; their values never
# reach a message, whatever the exception text around them.
SECRET_PARAMS = re.compile(
    r"((?:access_token|corpsecret|secret|key|token|password|sign)=)[^&\s'\"()]+", re.IGNORECASE
)
# Option names whose values are credentials, in any sender's OPTIONS.
SECRET_NAME = re.compile(r"pass|secret|key|token|sign|credential|auth", re.IGNORECASE)
MIN_SECRET_LENGTH = 4


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with credential query parameters and each of ``secrets`` masked."""
    text = SECRET_PARAMS.sub(r"\1" + REDACTED, text)
    # As given, trimmed, and as repr() quotes it (an error quoting a header value with a
    # newline shows "\\n"); longest first, so a secret that contains another goes whole.
    found = {
        form
        for secret in secrets
        for form in (secret, secret.strip(), repr(secret)[1:-1])
        if len(form) >= MIN_SECRET_LENGTH
    }
    for secret in sorted(found, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text


def secret_leaves(value: Any, *, secret: bool = False) -> Iterator[str]:
    """The strings inside ``value`` (nested dicts and lists) that are credentials: every
    string under a key that names one (``password``, ``api_key``...), or all of them
    with ``secret``."""
    if isinstance(value, dict):
        for name, item in value.items():
            yield from secret_leaves(item, secret=secret or bool(SECRET_NAME.search(str(name))))
    elif isinstance(value, list | tuple):
        for item in value:
            yield from secret_leaves(item, secret=secret)
    elif isinstance(value, str) and secret:
        yield value


def render_body(msgtype: str, body: dict[str, Any]) -> str:
    """The canonical JSON of a message: the same message always gives the same bytes."""
    return json.dumps(
        {"msgtype": msgtype, msgtype: body},
        ensure_ascii=False,
        sort_keys=True,
        separators=(",", ":"),
    )


@dataclass(frozen=True)
class Rate:
    """A pace: ``per_second`` sustained, with up to ``burst`` sends at once."""

    per_second: float
    burst: int = 1

    @classmethod
    def at_most(cls, count: int, seconds: float) -> Rate:
        """A pace that never exceeds ``count`` sends in any window of ``seconds``.

        The limiter admits at most ``burst + per_second * window`` in a window, so half
        of the allowance is the burst and half is paced: 30 a minute becomes bursts of 15,
        then one every 4 s (which also keeps an hour under 15 + 900).
        """
        burst = max(1, count // 2)
        return cls(per_second=(count - burst) / seconds, burst=burst)

    @property
    def interval(self) -> float:
        return 1.0 / self.per_second

    @property
    def tolerance(self) -> float:
        return (self.burst - 1) * self.interval


UNLIMITED = Rate(math.inf)
PACE_MARGIN = 0.97
HIGH = "high"  # the priority that may spend the whole channel


def bulk_rate(channel: Rate | None) -> Rate | None:
    """The pace bulk sends share on a channel paced at ``channel``: what is left once
    ``REMINDERS_HIGH_RATE_SHARE`` of it is kept for ``high`` sends (its burst too, at
    least one). None where nothing is kept: an unlimited channel, or no share."""
    share = conf.HIGH_RATE_SHARE
    if channel is None or channel.per_second == math.inf or share == 0:
        return None
    rest = 1.0 - share
    return Rate(channel.per_second * rest, max(1, int(channel.burst * rest)))


@dataclass(frozen=True)
class Limit:
    """A named bucket shared by every process (``wecom:channel``) and its pace; a send
    spends ``cost`` slots of it (a message split into n parts is n messages)."""

    name: str
    rate: Rate
    cost: int = 1


@dataclass(frozen=True)
class Message:
    """One message to one recipient, as the ledger recorded it."""

    recipient: str
    msgtype: str
    body: dict[str, Any]
    idempotency_key: str

    @classmethod
    def from_rendered(cls, recipient: str, rendered: str, idempotency_key: str) -> Message:
        data = json.loads(rendered)
        msgtype = data["msgtype"]
        return cls(recipient, msgtype, data[msgtype], idempotency_key)

    @property
    def rendered(self) -> str:
        return render_body(self.msgtype, self.body)


@dataclass(frozen=True)
class SendResult:
    """What the provider answered to a delivered message."""

    message_id: str = ""
    code: str = "0"
    detail: dict[str, Any] = field(default_factory=dict)


class BaseSender(ABC):
    """Delivers one message; raises a ``SendError`` subclass when it cannot.

    ``TransientSendError`` for what may pass (retried), ``PermanentSendError`` for what
    never will. A sender whose provider drops an identical body sent again within
    ``duplicate_check_seconds`` sets ``supports_duplicate_check``: only then does the
    engine re-send a message whose earlier attempt ended with no known outcome.
    """

    supports_duplicate_check: ClassVar[bool] = False
    duplicate_check_seconds: ClassVar[int] = 0
    # The provider's limit per recipient, if it has one (WeCom: 30 a minute).
    recipient_rate: ClassVar[Rate | None] = None

    def __init__(self, alias: str, **options: Any) -> None:
        self.alias = alias
        self.options = options

    @property
    def retry_in_doubt(self) -> bool:
        """OPTIONS ``retry_in_doubt``: send again after an answer that leaves delivery in
        doubt (a read timeout, a 5xx) on a channel whose provider does not drop repeated
        bodies. The trade-off, chosen per channel: the recipient may get it twice,
        rather than the run ending ``unknown`` for ops to decide."""
        return bool(self.options.get("retry_in_doubt"))

    @property
    def resends_in_doubt(self) -> bool:
        """Whether a message whose delivery is in doubt may be sent again on this
        channel: the provider drops a repeated body (inside its window), or the channel
        accepts a possible duplicate (``retry_in_doubt``)."""
        return self.supports_duplicate_check or self.retry_in_doubt

    def secrets(self) -> Iterable[str]:
        """The credentials this sender holds, masked in every error and log line: here
        the OPTIONS values under names that say so; senders add what else they know."""
        return secret_leaves(self.options)

    def redact(self, text: str) -> str:
        return redact(text, self.secrets())

    @property
    def rate_scope(self) -> str:
        """What the provider counts limits against; aliases of one app should share it."""
        return str(self.options.get("rate_scope") or self.alias)

    def channel_rate(self) -> Rate | None:
        """The pace of the whole channel: OPTIONS ``rate_limit`` (per second) and
        ``rate_burst`` (default: a tenth of a second's worth)."""
        per_second = self.options.get("rate_limit")
        if not per_second:
            return None
        burst = self.options.get("rate_burst") or max(1, int(float(per_second) / 10))
        # Paced a little under the limit: a request leaves a few milliseconds after its
        # slot, and that jitter would otherwise push the provider's busiest second over.
        return Rate(float(per_second) * PACE_MARGIN, int(burst))

    def limits(self, message: Message, priority: str | None = None) -> list[Limit]:
        """The shared buckets a send of ``message`` must fit in.

        The channel's bucket is always there, unlimited if no rate is set, because it
        also carries the pause that a provider's "too fast" puts on the whole channel.
        A bulk send (``priority`` other than ``high``) on a paced channel also fits the
        channel's bulk bucket (``bulk_rate``), so that the share
        ``REMINDERS_HIGH_RATE_SHARE`` of the channel is always left to ``high`` sends.
        ``None``: the priority is unknown, the whole channel may be used.
        """
        rate = self.channel_rate()
        limits = [Limit(f"{self.rate_scope}:channel", rate or UNLIMITED)]
        bulk = bulk_rate(rate) if priority not in (None, HIGH) else None
        if bulk is not None:
            limits.append(Limit(f"{self.rate_scope}:channel:bulk", bulk))
        if self.recipient_rate is not None:
            limits.append(Limit(f"{self.rate_scope}:to:{message.recipient}", self.recipient_rate))
        return limits

    @abstractmethod
    def send(self, message: Message) -> SendResult: ...

    def validate_recipient(self, recipient: str) -> None:
        """Raise ``RecipientSendError`` when this channel cannot send to ``recipient``.

        The default is the model's rule, one WeCom member id. A channel may narrow it
        (call this first, then refuse more), never widen it: the model has refused
        anything else before the channel is asked."""
        problem = member_id_problem(recipient)
        if problem is not None:
            raise RecipientSendError(f"Channel {self.alias!r}: {problem}", code="recipient")

    def check_message(self, message: Message) -> None:  # noqa: B027 - optional hook
        """Raise ``PayloadSendError`` when this channel cannot carry ``message`` (empty,
        too large); asked when a task is scheduled, with its first occurrence's message,
        so that the mistake is refused then rather than failing at every send."""

    def prepare(self) -> None:  # noqa: B027 - optional hook
        """Get ready to send at once (an access token in hand); called before a send's
        rate-limit slot is taken, so that the request leaves at its slot. May raise a
        ``SendError``: the send that follows meets it again and records it."""

    def check(self) -> None:  # noqa: B027 - optional hook
        """Raise ``ConfigurationSendError`` when the channel cannot work as configured;
        run by the system checks, so that this shows at start-up, not on the first send."""

    def close(self) -> None:  # noqa: B027 - optional hook, most senders hold nothing
        """Release connections; called when the settings change."""
