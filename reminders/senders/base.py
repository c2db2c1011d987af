"""The contract every sender implements; the engine knows nothing else about them.

A sender's credentials (``BaseSender.secrets``) never reach a log line or a row:
``redact`` masks each in every spelling a gateway may echo it in (``spellings``: as
given, ``repr()``-quoted, JSON-escaped, percent-encoded), before any error text leaves
the sender.
"""

from __future__ import annotations

import json
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar
from urllib.parse import quote, quote_plus

from ..conf import settings as conf
from ..exceptions import PermanentSendError, RecipientSendError
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
    """``text`` with credential query parameters and each of ``secrets`` masked, in
    every spelling of it a reply may quote (``spellings``); hex escapes in either case."""
    text = SECRET_PARAMS.sub(r"\1" + REDACTED, text)
    found = {form for secret in secrets for form in spellings(secret)}
    if not found:
        return text
    # Longest first, so that a secret that contains another goes whole.
    forms = sorted(found, key=len, reverse=True)
    pattern = re.compile("|".join(re.escape(form) for form in forms), re.IGNORECASE)
    return pattern.sub(REDACTED, text)


def spellings(secret: str) -> set[str]:
    """``secret`` as given and trimmed, each as ``repr()`` quotes it (an error quoting a
    header value with a newline shows "\\n"), JSON-escaped (ASCII only or not, ``/``
    escaped or not: how gateways echo a request) and percent-encoded (as a path, a query
    value or a form, in UTF-8 and in GBK); those of ``MIN_SECRET_LENGTH`` and more."""
    forms: set[str] = set()
    for text in {secret, secret.strip()}:
        escaped = {repr(text)[1:-1], json.dumps(text)[1:-1]}
        escaped.add(json.dumps(text, ensure_ascii=False)[1:-1])
        forms |= {text, *escaped, *(form.replace("/", "\\/") for form in escaped)}
        for encoding in ("utf-8", "gbk"):
            try:
                forms |= {
                    quote(text, encoding=encoding),
                    quote(text, safe="", encoding=encoding),
                    quote_plus(text, encoding=encoding),
                }
            except UnicodeEncodeError:
                continue  # not a GBK character: no gateway sends it so
    return {form for form in forms if len(form) >= MIN_SECRET_LENGTH}


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
HIGH = "high"  # the priority class of high runs, and the name of its share's bucket
BULK = "bulk"  # the class of every other priority


def shares(channel: Rate | None) -> dict[str, Rate] | None:
    """A paced channel split in two shares that add up to it: ``high`` gets
    ``REMINDERS_HIGH_RATE_SHARE`` of the rate, ``bulk`` the rest, and the burst is split
    likewise (each at least one). A send fits its class's share, or takes the other's
    idle slots (``Limit.lender``), so neither class waits behind the other's backlog and
    neither leaves the channel idle while it has work.

    None where nothing is split: an unlimited channel, a share of 0, or a burst of 1,
    which cannot be split without letting two sends go at one moment.
    """
    share = conf.HIGH_RATE_SHARE
    if channel is None or channel.per_second == math.inf or share == 0 or channel.burst < 2:
        return None
    high_burst = min(channel.burst - 1, max(1, round(channel.burst * share)))
    return {
        HIGH: Rate(channel.per_second * share, high_burst),
        BULK: Rate(channel.per_second * (1 - share), channel.burst - high_burst),
    }


@dataclass(frozen=True)
class Limit:
    """A named bucket shared by every process (``wecom:channel``) and its pace; a send
    spends ``cost`` slots of it (a message split into n parts is n messages).

    ``lender``: another bucket whose slots the send may spend instead (at the same
    cost), when that gets it out sooner and no further ahead than
    ``REMINDERS_RATE_BORROW_SECONDS``: the other class's share of the channel. Slots
    are only borrowed that near, so the lender's own sends never wait longer than that
    behind borrowed ones.
    """

    name: str
    rate: Rate
    cost: int = 1
    lender: Limit | None = None


@dataclass(frozen=True)
class Message:
    """One message to one recipient, as the ledger recorded it.

    ``sent_parts``: of a text a sender splits into parts (``senders.parts``), the
    provider's message ids of the parts an earlier attempt delivered, in order; the
    sender sends only the parts after them, and answers with every part's id."""

    recipient: str
    msgtype: str
    body: dict[str, Any]
    idempotency_key: str
    sent_parts: tuple[str, ...] = ()

    @classmethod
    def from_rendered(
        cls,
        recipient: str,
        rendered: str,
        idempotency_key: str,
        sent_parts: Sequence[str] = (),
    ) -> Message:
        data = json.loads(rendered)
        msgtype = data["msgtype"]
        return cls(recipient, msgtype, data[msgtype], idempotency_key, tuple(sent_parts))

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
    # The message types the provider takes; None: any (the provider decides).
    msgtypes: ClassVar[frozenset[str] | None] = None
    # Whether it carries WeCom's ``template_card`` of ``card_type`` ``button_interaction``
    # (a card with buttons, ``messages.cards``): only a WeCom app does.
    carries_cards: ClassVar[bool] = False
    # How long after its sending a delivered message can be taken back (``recall``);
    # None: never (WeCom's app: 24 hours; a group robot: never).
    recall_window: ClassVar[timedelta | None] = None
    # Whether each message spends the corp's daily quota of app messages (WeCom: seats x
    # 200 person-messages a Beijing day; a group robot's do not): what ``ops`` counts.
    spends_app_quota: ClassVar[bool] = False

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

    def deduplicates(self, message: Message) -> bool:
        """Whether the provider drops a re-send of this very message inside
        ``duplicate_check_seconds``: the channel's ``supports_duplicate_check``, unless the
        channel sends this message without its duplicate check (WeCom: a type with no
        field for the occurrence's stamp). What the engine asks, message by message."""
        return self.supports_duplicate_check

    def resends(self, message: Message) -> bool:
        """``resends_in_doubt`` for this message: its provider drops a repeat of it
        (``deduplicates``), or the channel accepts a possible duplicate."""
        return self.deduplicates(message) or self.retry_in_doubt

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
        A paced channel split in shares (``shares``) is paced by them instead: the send
        fits the share of its priority's class, ``high`` or bulk (``normal``, ``low``),
        or borrows the other class's idle slots. ``None``: an unknown priority, counted
        as ``high``.
        """
        rate = self.channel_rate()
        channel = f"{self.rate_scope}:channel"
        split = shares(rate)
        if split is None:
            limits = [Limit(channel, rate or UNLIMITED)]
        else:
            own, other = (HIGH, BULK) if priority in (None, HIGH) else (BULK, HIGH)
            lender = Limit(f"{channel}:{other}", split[other])
            limits = [
                Limit(channel, UNLIMITED),
                Limit(f"{channel}:{own}", split[own], lender=lender),
            ]
        if self.recipient_rate is not None:
            limits.append(Limit(f"{self.rate_scope}:to:{message.recipient}", self.recipient_rate))
        return limits

    def accepts(self, msgtype: str) -> bool:
        """Whether this channel carries messages of ``msgtype``: what a builder asks
        before it writes a ``textcard`` (a WeCom group robot takes none)."""
        return self.msgtypes is None or msgtype in self.msgtypes

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

    def recall(self, message_id: str) -> None:
        """Take back a message this channel delivered, by the id the provider gave it
        (``SendResult.message_id``); a ``SendError`` when the provider refuses (too late,
        unknown, taken back already). Only a channel with a ``recall_window`` can."""
        raise PermanentSendError(f"Channel {self.alias!r} cannot recall a message.", code="recall")

    def update_card(self, recipient: str, response_code: str, replace_name: str) -> None:
        """Turn the buttons of a card delivered to ``recipient`` into one that cannot be
        clicked, reading ``replace_name`` (WeCom's ``update_template_card``), with the
        ``response_code`` the provider gave for it; a ``SendError`` when it refuses.
        Only a channel that ``carries_cards`` can."""
        raise PermanentSendError(f"Channel {self.alias!r} cannot update a card.", code="card")

    def replace_card(self, recipient: str, response_code: str, card: dict[str, Any]) -> None:
        """Replace a card delivered to ``recipient`` by ``card``, a whole card of the
        same ``task_id`` (WeCom's ``update_template_card`` with a ``template_card``), with
        the ``response_code`` the provider gave for it; a ``SendError`` when it refuses.
        Only a channel that ``carries_cards`` can."""
        raise PermanentSendError(f"Channel {self.alias!r} cannot update a card.", code="card")

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
