"""WeCom's behaviour, without HTTP: tokens, limits, duplicate checks, faults and the
ledger, over request bodies checked as WeCom checks them (``wecom_sandbox.validation``),
with the fault switches (``wecom_sandbox.faults``) and the replies
(``wecom_sandbox.replies``) in modules of their own.

Every public method takes the lock, so the HTTP handler threads may call them at once.
Each endpoint method returns a ``Reply`` that the handler writes, delays or loses.

Behaviour where WeCom's documentation leaves a choice (see also ``SandboxConfig``):

* ``gettoken`` answers the same token while it is valid, with the seconds it has left
  as ``expires_in``; a new one only after it expired or was expired by a fault switch.
* The duplicate check compares the request body byte for byte, per recipient: a
  re-send that is not byte-identical is a new message and is delivered again. A
  suppressed duplicate answers errcode 0 with the msgid of the first delivery.
* A template card's ``task_id`` is taken once per app (until a reset): a card with one
  delivered before is refused with 42014, checked right after the body, before limits
  and the duplicate check. A delivered button card's reply carries a
  ``response_code``, as WeCom's does, and so does every click's event; each updates
  the card once, within 72 hours (``wecom_sandbox.response_codes``, and
  ``wecom_sandbox.updates`` for ``message/update_template_card``'s errcodes).
* ``message/recall`` takes back an app message delivered less than 24 hours before
  (exactly 24 hours is still in time), once: a msgid never issued (a robot message
  has none), older, already recalled or no longer in the ledger is refused with 40058
  (invalid parameter; WeCom does not document the errcode) and nothing changes. A
  suppressed duplicate's msgid is its delivery's. Each part of a text split in parts
  is a message of its own, with its own msgid.
* An update covers the members named (those the card was delivered to, or who clicked
  it; others are ``invaliduser``), the departments and tags it was sent to, or with
  ``atall`` everyone. The latest update stands for everyone updated so far
  (``LedgerEntry.updated_for``): after ``replace_name`` their buttons cannot be
  clicked; after a whole ``template_card``, the new card's buttons can.
* A click (``prepare_click``) is refused, nothing changed, unless a callback is
  configured and the entry is a delivered, unrecalled button card whose buttons the
  clicking member can still click, and the key is one of its buttons that call back;
  the member defaults to the card's first member recipient and must be one of its
  recipients (any member, for a card sent to a department or tag). The HTTP call to
  the callback is made without the lock (``wecom_sandbox.clicks``).
* ``message/get_statistics`` counts, per day, what the app delivered: each member a
  message reached is one (WeCom's count is 发消息成功人次, successful person-times), a
  department or tag one each (the sandbox knows no members behind them); each part of
  a split text is a message; a suppressed duplicate, a rejected send and a robot's
  message are none; a recalled one still counts (it was sent). Days are the sandbox
  clock's (``wall``, moved by ``advance``) in Beijing time, as WeCom's are. The
  counts are kept apart from the ledger, so a trimmed ledger loses none; a reset
  clears them. ``time_type`` 0 is today, 1 yesterday (missing: 0); anything else is
  40058. The reply lists the sandbox's one app, with a count of 0 on a quiet day.
* Over a per-member limit the whole request is refused with 45009 and nothing is
  delivered (the documentation says such messages are dropped; answering 45009 is the
  visible reading), and that member is blocked for the window's length.
* Fault switches act on ``message/send`` and ``webhook/send`` only (and
  ``gettoken_errcodes`` on ``gettoken``), in this order: HTTP errors, busy (-1),
  queued errcodes; lost and slow replies then apply to whatever the reply was.
  Counted faults ("the next N sends") and random ones (``FaultRates``: each send meets
  each fault with its probability) combine: a send meets a fault if either says so.
  Random draws come from one generator seeded with the rates' ``seed``; re-seeding
  (the ``seed`` switch, or a reset) starts the same sequence again.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
import secrets
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, replace
from datetime import date, datetime
from typing import Any
from zoneinfo import ZoneInfo

from . import codes
from .cards import callback_buttons
from .clicks import Click, ClickPlan, ClickRefused
from .config import RECALL_WINDOW, SandboxConfig, mask
from .faults import Chance, Faults, draw
from .ledger import DELIVERED, REJECTED, SUPPRESSED, Ledger, LedgerEntry
from .limits import TokenBucket, WindowLimit
from .replies import OK_REPLY, Rejected, Reply, encode, error_body
from .response_codes import CLICK, SEND, ResponseCodes
from .updates import UpdateRequest, update_request
from .validation import (
    APP_MSGTYPES,
    ROBOT_MSGTYPES,
    AppRequest,
    app_request,
    cut,
    ids,
    nbytes,
    parse,
    robot_request,
)

# Importable from here as they were before the request checks, the replies and the
# faults had modules of their own.
__all__ = [
    "APP_MSGTYPES",
    "GETTOKEN",
    "MESSAGE_GET_STATISTICS",
    "MESSAGE_RECALL",
    "MESSAGE_SEND",
    "MESSAGE_UPDATE_TEMPLATE_CARD",
    "OK_REPLY",
    "ROBOT_MSGTYPES",
    "WEBHOOK_SEND",
    "AppRequest",
    "Chance",
    "Faults",
    "Rejected",
    "Reply",
    "SandboxState",
    "Sent",
    "cut",
    "encode",
    "error_body",
    "nbytes",
]

MESSAGE_SEND = "message/send"
WEBHOOK_SEND = "webhook/send"
MESSAGE_RECALL = "message/recall"
MESSAGE_UPDATE_TEMPLATE_CARD = "message/update_template_card"
MESSAGE_GET_STATISTICS = "message/get_statistics"
GETTOKEN = "gettoken"
# WeCom's days, for message/get_statistics: Beijing time.
WECOM_TIME_ZONE = ZoneInfo("Asia/Shanghai")
# The name message/get_statistics gives the sandbox's app.
APP_NAME = "WeCom sandbox"


@dataclass(frozen=True)
class Sent:
    """An earlier delivery: until when its duplicate check holds, its msgid and entry."""

    until: float
    msgid: str
    entry_id: int
    at: float


class SandboxState:
    """The app, its robots and everything that happened to them since the last reset."""

    def __init__(self, config: SandboxConfig) -> None:
        self.initial = config
        self.lock = threading.Lock()
        self._reset(config)

    # Clock ---------------------------------------------------------------------------

    def now(self) -> float:
        """The sandbox clock: monotonic, moved forward by ``advance``."""
        return time.monotonic() + self.offset

    def wall(self) -> float:
        return time.time() + self.offset

    # Endpoints -----------------------------------------------------------------------

    def gettoken(self, query: dict[str, str]) -> Reply:
        with self.lock:
            self.stats[f"{GETTOKEN} calls"] += 1
            try:
                if self.faults.gettoken_errcodes:
                    raise Rejected(self.faults.gettoken_errcodes.pop(0))
                token, expires_in = self._gettoken(query)
            except Rejected as exc:
                self.stats[f"{GETTOKEN} errcode {exc.errcode}"] += 1
                return Reply(error_body(exc.errcode, exc.errmsg))
            return Reply(
                encode(
                    {
                        "errcode": 0,
                        "errmsg": "ok",
                        "access_token": token,
                        "expires_in": expires_in,
                    }
                )
            )

    def message_send(self, query: dict[str, str], raw: bytes) -> Reply:
        return self._send(MESSAGE_SEND, query, raw)

    def webhook_send(self, query: dict[str, str], raw: bytes) -> Reply:
        return self._send(WEBHOOK_SEND, query, raw)

    def message_recall(self, query: dict[str, str], raw: bytes) -> Reply:
        with self.lock:
            self.stats[f"{MESSAGE_RECALL} calls"] += 1
            try:
                self._check_token(query.get("access_token"))
                body = parse(raw)
                msgid = body.get("msgid")
                sent = self.msgids.get(msgid) if isinstance(msgid, str) else None
                entry = self._entry(sent.entry_id) if sent is not None else None
                if sent is None or entry is None:
                    raise Rejected(codes.INVALID_PARAMETER, "invalid msgid")
                if self.now() - sent.at > RECALL_WINDOW:
                    raise Rejected(codes.INVALID_PARAMETER, "msgid sent more than 24 hours ago")
                if entry.recalled:
                    raise Rejected(codes.INVALID_PARAMETER, "msgid has been recalled")
            except Rejected as exc:
                self.stats[f"{MESSAGE_RECALL} errcode {exc.errcode}"] += 1
                return Reply(error_body(exc.errcode, exc.errmsg))
            self.ledger.replace(sent.entry_id, recalled=True)
            self.stats["recalled"] += 1
            return Reply(error_body(codes.OK))

    def message_update_template_card(self, query: dict[str, str], raw: bytes) -> Reply:
        endpoint = MESSAGE_UPDATE_TEMPLATE_CARD
        with self.lock:
            self.stats[f"{endpoint} calls"] += 1
            try:
                self._check_token(query.get("access_token"))
                request = update_request(raw, self.config)
                issued = self.codes.check(request.response_code, self.now())
                entry = self._entry(issued.entry_id)
                if entry is None:  # the card left the ledger: as good as unknown
                    raise Rejected(codes.INVALID_PARAMETER, "invalid response_code")
                if entry.recalled:
                    raise Rejected(codes.INVALID_PARAMETER, "the card's message was recalled")
                if request.card is not None and request.task_id != _task_id(entry):
                    raise Rejected(
                        codes.INVALID_PARAMETER, "template_card.task_id must be the updated card's"
                    )
                targets, invalid = self._update_targets(entry, request)
            except Rejected as exc:
                self.stats[f"{endpoint} errcode {exc.errcode}"] += 1
                return Reply(error_body(exc.errcode, exc.errmsg, **exc.extra))
            self.codes.spend(request.response_code)
            update: dict[str, Any] = {
                "at": self.wall(),
                "response_code": request.response_code,
                "source": issued.source,
            }
            if request.replace_name is not None:
                update["replace_name"] = request.replace_name
            else:
                update["template_card"] = request.card
                update["content"] = request.content
            update |= {
                "userids": list(request.userids),
                "partyids": list(request.partyids),
                "tagids": list(request.tagids),
                "atall": request.atall,
                "invaliduser": list(invalid),
            }
            updated_for = tuple(dict.fromkeys((*entry.updated_for, *targets)))
            self.ledger.replace(entry.id, card_update=update, updated_for=updated_for)
            self.stats["cards updated"] += 1
            return Reply(encode({**OK_REPLY, "invaliduser": list(invalid)}))

    def message_get_statistics(self, query: dict[str, str], raw: bytes) -> Reply:
        endpoint = MESSAGE_GET_STATISTICS
        with self.lock:
            self.stats[f"{endpoint} calls"] += 1
            try:
                self._check_token(query.get("access_token"))
                time_type = parse(raw).get("time_type", 0) if raw.strip() else 0
                if isinstance(time_type, bool) or time_type not in (0, 1):
                    raise Rejected(codes.INVALID_PARAMETER, "time_type must be 0 or 1")
            except Rejected as exc:
                self.stats[f"{endpoint} errcode {exc.errcode}"] += 1
                return Reply(error_body(exc.errcode, exc.errmsg))
            day = date.fromordinal(self.day().toordinal() - time_type)
            app = {
                "agentid": self.config.agent_id,
                "app_name": APP_NAME,
                "count": self.daily[day.isoformat()],
            }
            return Reply(encode({**OK_REPLY, "statistics": [app]}))

    def day(self) -> date:
        """Today on the sandbox clock, in Beijing time (WeCom's day)."""
        return datetime.fromtimestamp(self.wall(), WECOM_TIME_ZONE).date()

    def daily_counts(self) -> dict[str, int]:
        """What ``message/get_statistics`` counts, per Beijing day (ISO dates)."""
        with self.lock:
            return dict(sorted(self.daily.items()))

    # Clicks --------------------------------------------------------------------------

    def prepare_click(self, entry_id: int, key: str, user: str | None = None) -> ClickPlan:
        """A click on button ``key`` of entry ``entry_id`` by ``user`` that may be made,
        with a fresh response code; ``ClickRefused`` (nothing changed) otherwise."""
        with self.lock:
            callback = self.config.callback
            if callback is None:
                raise ClickRefused(
                    409,
                    "no_callback",
                    "no callback URL is configured: start the sandbox with --callback-url "
                    "(or set the callback switch) to click",
                )
            entry, member, card = self._clickable(entry_id, key, user)
            now = self.now()
            code = self.codes.issue(entry.id, now, CLICK)
            self.codes.sweep(now, self.ledger.entries[0].id)
            self.stats["clicks"] += 1
            return ClickPlan(
                entry=entry.id,
                key=key,
                user=member,
                task_id=str(card.get("task_id")),
                response_code=code,
                corp_id=self.config.corp_id,
                agent_id=self.config.agent_id,
                at=self.wall(),
                callback=callback,
            )

    def _clickable(
        self, entry_id: int, key: str, user: str | None
    ) -> tuple[LedgerEntry, str, dict[str, Any]]:
        """The entry, the clicking member and the card as that member sees it, when button
        ``key`` may be clicked; ``ClickRefused`` saying why otherwise. Under the lock."""
        entry = self._entry(entry_id)
        if entry is None:
            raise ClickRefused(404, "unknown_entry", f"no entry {entry_id} in the ledger")
        if entry.endpoint != MESSAGE_SEND or not _task_id(entry):
            what = entry.msgtype or entry.endpoint
            raise ClickRefused(
                400, "not_a_card", f"entry {entry_id} is a {what} message, not a button card"
            )
        if not entry.delivered:
            also = f", a duplicate of entry {entry.duplicate_of}" if entry.duplicate_of else ""
            raise ClickRefused(
                409,
                "not_delivered",
                f"entry {entry_id} was {entry.status}{also}: nobody received this card",
            )
        if entry.recalled:
            raise ClickRefused(409, "recalled", f"entry {entry_id} was recalled")
        member = user or next((u for u in entry.delivered_to if ":" not in u), "")
        if not member:
            raise ClickRefused(
                400,
                "no_user",
                f"entry {entry_id} went to departments or tags only: say which member clicks",
            )
        if member not in entry.delivered_to and not _via_group(entry.delivered_to):
            raise ClickRefused(
                400,
                "not_recipient",
                f"{member!r} is not a recipient of entry {entry_id} "
                f"({'|'.join(entry.delivered_to)})",
            )
        card = self._card_for(entry, member)
        if card is None:
            replaced = (entry.card_update or {}).get("replace_name", "")
            raise ClickRefused(
                409,
                "updated",
                f"the buttons of entry {entry_id} were replaced by an update "
                f"({replaced!r}) for {member}: nothing left to click",
            )
        buttons = callback_buttons(card)
        if key not in buttons:
            raise ClickRefused(
                400,
                "unknown_key",
                f"{key!r} is not a button of entry {entry_id} that calls back "
                f"(its keys: {', '.join(map(repr, buttons)) or 'none'})",
            )
        return entry, member, card

    def record_click(self, click: Click) -> None:
        """The click and what the callback answered, on its card's ledger entry."""
        with self.lock:
            if not click.ok:
                self.stats["callback failures"] += 1
            entry = self._entry(click.entry)
            if entry is not None:
                self.ledger.replace(entry.id, clicks=(*entry.clicks, click.as_dict()))

    def not_post(self) -> Reply:
        return Reply(error_body(codes.REQUIRE_POST))

    # Control -------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        with self.lock:
            return self._describe()

    def reset(self) -> None:
        with self.lock:
            self._reset(self.initial)

    def entries(
        self, since_id: int = 0, limit: int | None = None, status: str | None = None
    ) -> list[LedgerEntry]:
        with self.lock:
            found = self.ledger.since(since_id, None if status else limit)
        if status:
            found = [e for e in found if e.status == status][:limit]
        return found

    def entry(self, entry_id: int) -> LedgerEntry | None:
        with self.lock:
            return self._entry(entry_id)

    def last_id(self) -> int:
        with self.lock:
            return self.ledger.next_id - 1

    def counters(self) -> dict[str, int]:
        with self.lock:
            return dict(sorted(self.stats.items()))

    # Internals: state ----------------------------------------------------------------

    def _reset(self, config: SandboxConfig) -> None:
        ledger = getattr(self, "ledger", None)
        self.config = config
        self.offset = 0.0
        self.faults = Faults(rates=config.fault_rates)
        self.random = random.Random(config.fault_rates.seed)  # noqa: S311 - not crypto
        self.invalid_users = set(config.invalid_users)
        self.tokens: dict[str, float] = {}
        self.current_token = ""
        self.bucket = self._bucket(config)
        self.user_limits: dict[str, WindowLimit] = {}
        self.robot_limits: dict[str, WindowLimit] = {}
        self.sent: dict[tuple[str, bytes], Sent] = {}
        self.task_ids: dict[str, Sent] = {}
        self.sent_sweep_at = 50_000
        self.msgids: dict[str, Sent] = {}
        self.codes = ResponseCodes()
        self.stats: Counter[str] = Counter()
        # Members (and departments, tags) reached per Beijing day: message/get_statistics.
        self.daily: Counter[str] = Counter()
        # Unique across resets and sandboxes; a random prefix, then a cheap counter.
        self.msgid_prefix = secrets.token_urlsafe(12)
        self.msgid_counter = itertools.count(1)
        # Ids go on from where they were, so that a poller's ``since_id`` stays valid.
        next_id = ledger.next_id if ledger is not None else 1
        self.ledger = Ledger(config.ledger_limit)
        self.ledger.next_id = next_id

    @staticmethod
    def _bucket(config: SandboxConfig) -> TokenBucket | None:
        if config.rate_limit is None:
            return None
        return TokenBucket(rate=config.rate_limit, burst=config.burst)

    def _describe(self) -> dict[str, Any]:
        config = self.config
        return {
            "corp_id": config.corp_id,
            "agent_id": config.agent_id,
            "robots": [mask(key) for key in config.robot_keys],
            "token_ttl": config.token_ttl,
            "rate_limit": config.rate_limit,
            "rate_burst": config.burst if config.rate_limit else None,
            "user_limits": [str(w) for w in config.user_limits],
            "robot_limit": str(config.robot_limit) if config.robot_limit else None,
            "overflow": config.overflow,
            "invalid_users": sorted(self.invalid_users),
            "callback": config.callback.describe() if config.callback else None,
            "clock_offset": self.offset,
            "faults": asdict(self.faults),
            "last_id": self.ledger.next_id - 1,
        }

    # Internals: tokens ---------------------------------------------------------------

    def _gettoken(self, query: dict[str, str]) -> tuple[str, int]:
        corp_id, secret = query.get("corpid"), query.get("corpsecret")
        if not corp_id:
            raise Rejected(codes.MISSING_CORPID)
        if not secret:
            raise Rejected(codes.MISSING_SECRET)
        if not secrets.compare_digest(corp_id.encode(), self.config.corp_id.encode()):
            raise Rejected(codes.INVALID_CORPID)
        if not secrets.compare_digest(secret.encode(), self.config.corp_secret.encode()):
            raise Rejected(codes.INVALID_SECRET)
        now = self.now()
        expires = self.tokens.get(self.current_token, 0.0)
        if expires <= now:
            self.current_token = secrets.token_urlsafe(96)
            expires = self.tokens[self.current_token] = now + self.config.token_ttl
            self.stats["tokens issued"] += 1
        # Rounded first: (now + ttl) - now is not always exactly ttl in floating point.
        return self.current_token, max(1, math.ceil(round(expires - now, 3)))

    def _check_token(self, token: str | None) -> None:
        if not token:
            raise Rejected(codes.MISSING_TOKEN)
        expires = self.tokens.get(token)
        if expires is None:
            raise Rejected(codes.INVALID_TOKEN)
        if expires <= self.now():
            raise Rejected(codes.TOKEN_EXPIRED)

    # Internals: sends ----------------------------------------------------------------

    def _send(self, endpoint: str, query: dict[str, str], raw: bytes) -> Reply:
        with self.lock:
            self.stats[f"{endpoint} calls"] += 1
            chance = draw(self.faults.rates, self.random)
            reply, entry = self._injected(endpoint, chance)
            if reply is None:
                try:
                    if endpoint == MESSAGE_SEND:
                        reply, entry = self._app_send(query, raw)
                    else:
                        reply, entry = self._robot_send(query, raw)
                except Rejected as exc:
                    reply = Reply(error_body(exc.errcode, exc.errmsg, **exc.extra))
                    entry = self._reject(endpoint, exc.errcode, exc.errmsg, raw, **exc.extra)
            return self._deliver_reply(reply, entry, chance)

    def _injected(self, endpoint: str, chance: Chance) -> tuple[Reply | None, LedgerEntry | None]:
        faults = self.faults
        if faults.counted("http_errors") or chance.http_error:
            status = faults.http_status
            text = f"{status} injected by the sandbox"
            reply = Reply(text.encode(), status=status, content_type="text/plain; charset=utf-8")
            return reply, self._record(endpoint, REJECTED, None, text, http_status=status)
        if faults.counted("busy") or chance.busy:
            return self._injected_errcode(endpoint, codes.BUSY)
        if faults.errcodes:
            return self._injected_errcode(endpoint, faults.errcodes.pop(0))
        return None, None

    def _injected_errcode(self, endpoint: str, errcode: int) -> tuple[Reply, LedgerEntry]:
        errmsg = codes.message(errcode)
        return Reply(error_body(errcode, errmsg)), self._record(endpoint, REJECTED, errcode, errmsg)

    def _deliver_reply(self, reply: Reply, entry: LedgerEntry | None, chance: Chance) -> Reply:
        faults = self.faults
        lose = faults.counted("lost_replies") or chance.lost_reply
        if lose:
            self.stats["lost replies"] += 1
        delay = 0.0
        if faults.delay > 0 and (faults.slow is None or faults.slow > 0):
            delay = faults.delay
            if faults.slow is not None:
                faults.slow -= 1
        if chance.slow_reply:
            delay = max(delay, faults.rates.slow_delay)
            self.stats["slow replies"] += 1
        if entry is not None and (lose or delay):
            self.ledger.replace(entry.id, reply_lost=lose, reply_delay=delay)
        return replace(reply, lose=lose, delay=delay) if lose or delay else reply

    def _app_send(self, query: dict[str, str], raw: bytes) -> tuple[Reply, LedgerEntry]:
        self._check_token(query.get("access_token"))
        request = app_request(raw, self.config, self.invalid_users)
        if request.task_id and request.task_id in self.task_ids:
            raise Rejected(codes.TASK_ID_INVALID, f"task_id {request.task_id} has existed")
        now = self.now()
        if self.bucket is not None and not self.bucket.admit(now):
            raise Rejected(codes.FREQUENCY_LIMIT, "sandbox rate limit")
        digest = hashlib.sha256(raw).digest() if request.interval else b""
        earlier = {}
        for user in request.valid:
            sent = self._earlier(user, digest, now)
            if sent is not None:
                earlier[user] = sent
        fresh = [u for u in request.valid if u not in earlier]
        self._admit_members(fresh, now)
        common = {
            "msgtype": request.msgtype,
            "touser": request.users,
            "invaliduser": request.invalid,
            "content": request.content,
            "truncated": request.truncated,
            "request": request.body,
            "suppressed_to": tuple(earlier),
            "duplicate_of": next(iter(earlier.values())).entry_id if earlier else None,
        }
        if fresh:
            msgid = f"{self.msgid_prefix}{next(self.msgid_counter):x}"
            entry = self._record(
                MESSAGE_SEND,
                DELIVERED,
                codes.OK,
                "ok",
                msgid=msgid,
                delivered_to=tuple(fresh),
                **common,
            )
            sent = Sent(until=now + request.interval, msgid=msgid, entry_id=entry.id, at=now)
            self._remember(fresh, digest, sent)
            if request.task_id:
                self.task_ids[request.task_id] = sent
            self.stats["delivered"] += 1
            self.daily[self.day().isoformat()] += len(fresh)
        else:
            msgid = next(iter(earlier.values())).msgid
            entry = self._record(MESSAGE_SEND, SUPPRESSED, codes.OK, "ok", msgid=msgid, **common)
            self.stats["suppressed duplicates"] += 1
        reply = {
            **OK_REPLY,
            "invaliduser": "|".join(request.invalid),
            "invalidparty": "",
            "invalidtag": "",
            "unlicenseduser": "",
            "msgid": msgid,
        }
        if request.task_id and fresh:
            reply["response_code"] = self.codes.issue(entry.id, now, SEND)
            self.codes.sweep(now, self.ledger.entries[0].id)
        return Reply(encode(reply)), entry

    def _robot_send(self, query: dict[str, str], raw: bytes) -> tuple[Reply, LedgerEntry]:
        key = query.get("key", "")
        if key not in self.config.robot_keys:
            raise Rejected(codes.INVALID_WEBHOOK_KEY)
        request = robot_request(raw)
        robot_limit = self.config.robot_limit
        if robot_limit is not None:
            limiter = self.robot_limits.setdefault(key, WindowLimit((robot_limit,)))
            if not limiter.admit(self.now()):
                raise Rejected(codes.FREQUENCY_LIMIT, "robot send limit")
        entry = self._record(
            WEBHOOK_SEND,
            DELIVERED,
            codes.OK,
            "ok",
            msgtype=request.msgtype,
            robot=mask(key),
            content=request.content,
            mentioned_list=request.mentioned,
            request=request.body,
        )
        self.stats["delivered"] += 1
        return Reply(error_body(codes.OK)), entry

    def _entry(self, entry_id: int) -> LedgerEntry | None:
        index = self.ledger.find(entry_id)
        return None if index is None else self.ledger.entries[index]

    def _update_targets(
        self, entry: LedgerEntry, request: UpdateRequest
    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Whom an update covers, and the members named who are not the card's
        recipients; 40058 for a department or tag the card was not sent to, 81013 when
        it covers nobody."""
        recipients = entry.delivered_to
        if request.atall:
            return recipients, ()
        clickers = {str(click["user"]) for click in entry.clicks}
        members = [u for u in request.userids if u in recipients or u in clickers]
        invalid = tuple(u for u in request.userids if u not in members)
        groups = [f"party:{p}" for p in request.partyids] + [f"tag:{t}" for t in request.tagids]
        strangers = [g for g in groups if g not in recipients]
        if strangers:
            raise Rejected(
                codes.INVALID_PARAMETER, f"the card was not sent to {', '.join(strangers)}"
            )
        targets = (*members, *groups)
        if not targets:
            raise Rejected(codes.ALL_RECIPIENTS_INVALID, invaliduser=list(invalid))
        return targets, invalid

    def _card_for(self, entry: LedgerEntry, member: str) -> dict[str, Any] | None:
        """The card ``member`` sees of ``entry``: the one sent, the one an update put in
        its place, or None when an update replaced its buttons."""
        update = entry.card_update
        covered = member in entry.updated_for or (
            member not in entry.delivered_to and _via_group(entry.updated_for)
        )
        if update is None or not covered:
            card = (entry.request or {}).get("template_card")
            return card if isinstance(card, dict) else None
        card = update.get("template_card")
        return card if isinstance(card, dict) else None

    def _earlier(self, user: str, digest: bytes, now: float) -> Sent | None:
        if not digest:
            return None
        sent = self.sent.get((user, digest))
        return sent if sent is not None and sent.until > now else None

    def _remember(self, users: list[str], digest: bytes, sent: Sent) -> None:
        self.msgids[sent.msgid] = sent
        if len(self.msgids) > 2 * self.config.ledger_limit:
            # Only what the ledger still holds can be recalled.
            oldest = self.ledger.entries[0].id
            self.msgids = {m: s for m, s in self.msgids.items() if s.entry_id >= oldest}
        if not digest:
            return
        for user in users:
            self.sent[(user, digest)] = sent
        if len(self.sent) > self.sent_sweep_at:
            now = self.now()
            self.sent = {k: s for k, s in self.sent.items() if s.until > now}
            # Sweep again when it doubles, not at every send once many checks are live.
            self.sent_sweep_at = max(50_000, 2 * len(self.sent))

    def _admit_members(self, users: list[str], now: float) -> None:
        """All of ``users`` within their limits, counted; or 45009 and none counted."""
        windows = self.config.user_limits
        if not windows:
            return
        limiters = [self.user_limits.setdefault(u, WindowLimit(windows)) for u in users]
        for user, limiter in zip(users, limiters, strict=True):
            if not limiter.allows(now):
                raise Rejected(codes.FREQUENCY_LIMIT, f"member {user} over its send limit")
        for limiter in limiters:
            limiter.count(now)

    def _reject(
        self, endpoint: str, errcode: int, errmsg: str, raw: bytes, **extra: Any
    ) -> LedgerEntry:
        try:
            request = json.loads(raw) if raw else None
        except (ValueError, UnicodeDecodeError):
            request = None
        if not isinstance(request, dict):
            request = None
        values: dict[str, Any] = {"request": request}
        if request is not None:
            values["msgtype"] = str(request.get("msgtype") or "")
            values["touser"] = tuple(ids(request.get("touser")))
        if extra.get("invaliduser"):
            values["invaliduser"] = tuple(str(extra["invaliduser"]).split("|"))
        self.stats[f"{endpoint} errcode {errcode}"] += 1
        return self._record(endpoint, REJECTED, errcode, errmsg, **values)

    def _record(
        self, endpoint: str, status: str, errcode: int | None, errmsg: str, **values: Any
    ) -> LedgerEntry:
        return self.ledger.add(
            at=self.wall(),
            endpoint=endpoint,
            status=status,
            errcode=errcode,
            errmsg=errmsg,
            **values,
        )


def _task_id(entry: LedgerEntry) -> str:
    """The task_id of the template card ``entry`` sent; "" for anything else."""
    card = (entry.request or {}).get("template_card")
    task_id = card.get("task_id") if isinstance(card, dict) else None
    return task_id if entry.msgtype == "template_card" and isinstance(task_id, str) else ""


def _via_group(recipients: tuple[str, ...]) -> bool:
    """Whether some of ``recipients`` are departments or tags (members unknown here)."""
    return any(r.startswith(("party:", "tag:")) for r in recipients)
