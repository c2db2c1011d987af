"""WeCom's behaviour, without HTTP: tokens, validation, limits, faults and the ledger.

Every public method takes the lock, so the HTTP handler threads may call them at once.
Each endpoint method returns a ``Reply`` that the handler writes, delays or loses.

Behaviour where WeCom's documentation leaves a choice (see also ``SandboxConfig``):

* ``gettoken`` answers the same token while it is valid, with the seconds it has left
  as ``expires_in``; a new one only after it expired or was expired by a fault switch.
* The duplicate check compares the request body byte for byte, per recipient: a
  re-send that is not byte-identical is a new message and is delivered again. A
  suppressed duplicate answers errcode 0 with the msgid of the first delivery.
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
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from . import codes
from .config import (
    DEFAULT_DUPLICATE_CHECK_INTERVAL,
    MARKDOWN_LIMIT,
    MAX_DUPLICATE_CHECK_INTERVAL,
    MAX_TOUSER,
    RECALL_WINDOW,
    ROBOT_MARKDOWN_LIMIT,
    ROBOT_TEXT_LIMIT,
    TEXT_LIMIT,
    TEXTCARD_DESCRIPTION_LIMIT,
    TEXTCARD_TITLE_LIMIT,
    FaultRates,
    SandboxConfig,
    mask,
)
from .ledger import DELIVERED, REJECTED, SUPPRESSED, Ledger, LedgerEntry
from .limits import TokenBucket, WindowLimit

MESSAGE_SEND = "message/send"
WEBHOOK_SEND = "webhook/send"
MESSAGE_RECALL = "message/recall"
GETTOKEN = "gettoken"

APP_MSGTYPES = ("text", "markdown", "textcard")
ROBOT_MSGTYPES = ("text", "markdown", "image", "news", "file", "template_card")
OK_REPLY = {"errcode": codes.OK, "errmsg": "ok"}


@dataclass(frozen=True)
class Reply:
    """What the handler sends back: a JSON body, or nothing at all when ``lose``."""

    body: bytes
    status: int = 200
    content_type: str = "application/json; charset=utf-8"
    lose: bool = False
    delay: float = 0.0


@dataclass
class Faults:
    """The switches; counts are "the next N sends", ``slow=None`` means every reply;
    ``rates`` strike at random."""

    busy: int = 0
    http_errors: int = 0
    http_status: int = 500
    lost_replies: int = 0
    errcodes: list[int] = field(default_factory=list)
    gettoken_errcodes: list[int] = field(default_factory=list)
    delay: float = 0.0
    slow: int | None = None
    rates: FaultRates = field(default_factory=FaultRates)


@dataclass(frozen=True)
class Chance:
    """What the random faults decided for one send."""

    http_error: bool = False
    busy: bool = False
    lost_reply: bool = False
    slow_reply: bool = False


class Rejected(Exception):
    """Raised inside request handling to answer with an errcode."""

    def __init__(self, errcode: int, detail: str = "", **extra: Any) -> None:
        super().__init__(errcode)
        self.errcode = errcode
        self.errmsg = codes.message(errcode, detail)
        self.extra = extra


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def encode(data: dict[str, Any]) -> bytes:
    return _ENCODER.encode(data).encode()


def error_body(errcode: int, errmsg: str | None = None, **extra: Any) -> bytes:
    return encode({"errcode": errcode, "errmsg": errmsg or codes.message(errcode), **extra})


def cut(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes without splitting a character."""
    return text.encode()[:limit].decode(errors="ignore")


def nbytes(text: str) -> int:
    return len(text.encode())


@dataclass(frozen=True)
class Sent:
    """An earlier delivery: until when its duplicate check holds, its msgid and entry."""

    until: float
    msgid: str
    entry_id: int
    at: float


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
                body = self._parse(raw)
                msgid = body.get("msgid")
                sent = self.msgids.get(msgid) if isinstance(msgid, str) else None
                if sent is None or self.now() - sent.at > RECALL_WINDOW:
                    raise Rejected(codes.INVALID_PARAMETER, "invalid msgid")
            except Rejected as exc:
                self.stats[f"{MESSAGE_RECALL} errcode {exc.errcode}"] += 1
                return Reply(error_body(exc.errcode, exc.errmsg))
            self.ledger.replace(sent.entry_id, recalled=True)
            return Reply(error_body(codes.OK))

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
        self.sent_sweep_at = 50_000
        self.msgids: dict[str, Sent] = {}
        self.stats: Counter[str] = Counter()
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
            chance = self._chance()
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

    def _chance(self) -> Chance:
        """Four draws per send while any rate is set, whatever they decide, so that a
        seed gives the same faults to the same order of sends; none otherwise."""
        rates = self.faults.rates
        if not rates.active:
            return Chance()
        draws = [self.random.random() for _ in range(4)]
        return Chance(
            http_error=draws[0] < rates.http_error,
            busy=draws[1] < rates.busy,
            lost_reply=draws[2] < rates.lost_reply,
            slow_reply=draws[3] < rates.slow_reply,
        )

    def _counted(self, name: str) -> bool:
        """Whether the count of fault ``name`` strikes this send; spends one if so."""
        left: int = getattr(self.faults, name)
        if left > 0:
            setattr(self.faults, name, left - 1)
        return left > 0

    def _injected(self, endpoint: str, chance: Chance) -> tuple[Reply | None, LedgerEntry | None]:
        faults = self.faults
        if self._counted("http_errors") or chance.http_error:
            status = faults.http_status
            text = f"{status} injected by the sandbox"
            reply = Reply(text.encode(), status=status, content_type="text/plain; charset=utf-8")
            return reply, self._record(endpoint, REJECTED, None, text, http_status=status)
        if self._counted("busy") or chance.busy:
            return self._injected_errcode(endpoint, codes.BUSY)
        if faults.errcodes:
            return self._injected_errcode(endpoint, faults.errcodes.pop(0))
        return None, None

    def _injected_errcode(self, endpoint: str, errcode: int) -> tuple[Reply, LedgerEntry]:
        errmsg = codes.message(errcode)
        return Reply(error_body(errcode, errmsg)), self._record(endpoint, REJECTED, errcode, errmsg)

    def _deliver_reply(self, reply: Reply, entry: LedgerEntry | None, chance: Chance) -> Reply:
        faults = self.faults
        lose = self._counted("lost_replies") or chance.lost_reply
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
        request = self._app_request(raw)
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
            self.stats["delivered"] += 1
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
        return Reply(encode(reply)), entry

    def _app_request(self, raw: bytes) -> AppRequest:
        """The request body checked as WeCom checks it, in WeCom's order of errcodes."""
        body = self._parse(raw)
        self._check_agent(body.get("agentid"))
        msgtype = body.get("msgtype")
        if msgtype not in APP_MSGTYPES:
            raise Rejected(codes.INVALID_MSGTYPE)
        content, truncated = self._app_content(msgtype, body.get(msgtype))
        interval = self._duplicate_interval(body)
        users = _ids(body.get("touser"))
        parties, tags = _ids(body.get("toparty")), _ids(body.get("totag"))
        if len(users) > MAX_TOUSER:
            raise Rejected(codes.INVALID_PARAMETER, f"touser exceed max count {MAX_TOUSER}")
        if not (users or parties or tags):
            raise Rejected(codes.INVALID_PARAMETER, "touser, toparty and totag are all empty")
        invalid = tuple(u for u in users if u in self.invalid_users)
        valid = [u for u in users if u not in self.invalid_users]
        valid += [f"party:{p}" for p in parties] + [f"tag:{t}" for t in tags]
        if not valid:
            raise Rejected(codes.ALL_RECIPIENTS_INVALID, invaliduser="|".join(invalid))
        return AppRequest(body, msgtype, content, truncated, interval, tuple(users), invalid, valid)

    def _robot_send(self, query: dict[str, str], raw: bytes) -> tuple[Reply, LedgerEntry]:
        key = query.get("key", "")
        if key not in self.config.robot_keys:
            raise Rejected(codes.INVALID_WEBHOOK_KEY)
        body = self._parse(raw)
        msgtype = body.get("msgtype")
        if msgtype not in ROBOT_MSGTYPES:
            raise Rejected(codes.INVALID_MSGTYPE)
        payload = body.get(msgtype)
        if not isinstance(payload, dict) or not payload:
            raise Rejected(codes.EMPTY_CONTENT)
        content = f"[{msgtype}]"
        mentioned: tuple[str, ...] = ()
        if msgtype in ("text", "markdown"):
            text = payload.get("content")
            if not isinstance(text, str) or not text:
                raise Rejected(codes.EMPTY_CONTENT)
            content = text
            limit = ROBOT_TEXT_LIMIT if msgtype == "text" else ROBOT_MARKDOWN_LIMIT
            if nbytes(content) > limit:
                raise Rejected(
                    codes.INVALID_PARAMETER, f"{msgtype}.content exceed max length {limit}"
                )
        if msgtype == "text":
            mentioned = tuple(str(m) for m in payload.get("mentioned_list") or ())
            mentioned += tuple(str(m) for m in payload.get("mentioned_mobile_list") or ())
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
            msgtype=msgtype,
            robot=mask(key),
            content=content,
            mentioned_list=mentioned,
            request=body,
        )
        self.stats["delivered"] += 1
        return Reply(error_body(codes.OK)), entry

    def _parse(self, raw: bytes) -> dict[str, Any]:
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise Rejected(codes.DATA_FORMAT_ERROR) from None
        if not isinstance(body, dict):
            raise Rejected(codes.DATA_FORMAT_ERROR)
        return body

    def _check_agent(self, agentid: Any) -> None:
        if agentid is None or agentid == "":
            raise Rejected(codes.MISSING_AGENTID)
        # WeCom reads a numeric string as the number; anything else cannot match.
        if isinstance(agentid, bool) or str(agentid) != str(self.config.agent_id):
            raise Rejected(codes.INVALID_AGENTID)

    def _app_content(self, msgtype: str, payload: Any) -> tuple[str, bool]:
        if not isinstance(payload, dict):
            raise Rejected(codes.EMPTY_CONTENT)
        if msgtype == "textcard":
            return self._textcard(payload)
        content = payload.get("content")
        if not isinstance(content, str) or not content:
            raise Rejected(codes.EMPTY_CONTENT)
        limit = TEXT_LIMIT if msgtype == "text" else MARKDOWN_LIMIT
        if nbytes(content) <= limit:
            return content, False
        if msgtype == "text" and self.config.overflow == "truncate":
            return cut(content, limit), True
        raise Rejected(codes.CONTENT_TOO_LARGE, f"{msgtype}.content exceed max length {limit}")

    def _textcard(self, payload: dict[str, Any]) -> tuple[str, bool]:
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
            if self.config.overflow != "truncate":
                raise Rejected(
                    codes.CONTENT_TOO_LARGE, f"textcard.{name} exceed max length {limit}"
                )
            truncated = True
            if name == "title":
                title = cut(title, limit)
            else:
                description = cut(description, limit)
        return f"{title}\n\n{description}", truncated

    def _duplicate_interval(self, body: dict[str, Any]) -> int:
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
            values["touser"] = tuple(_ids(request.get("touser")))
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


def _ids(value: Any) -> list[str]:
    """``"a|b"`` (or a list, which WeCom does not take but a careless caller might) as ids."""
    if isinstance(value, str):
        return [part for part in value.split("|") if part]
    return []
