"""What a sandbox is started with; ``POST /sandbox/reset`` goes back to it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from reminders.callback.crypto import Credentials
from reminders.callback.exceptions import BadEncodingAESKey

from .limits import Window

# Development credentials, used when the settings name none: `make run` starts the
# sandbox and the sender with the same ones.
DEV_CORP_ID = "ww-sandbox-corp"
DEV_CORP_SECRET = "sandbox-secret"  # noqa: S105 - a fixed dev value, never a real secret
DEV_AGENT_ID = 1000002
DEV_ROBOT_KEY = "sandbox-robot"
# The callback's, with which it signs and encrypts a click as WeCom does with those set in
# its admin console: a CRM in development sets the same two (docs/how-to/add-to-crm.md).
DEV_CALLBACK_TOKEN = "sandbox-callback-token"  # noqa: S105 - a fixed dev value
DEV_CALLBACK_AES_KEY = "sandboxCallbackKeyForLocalDevelopment000000"

USER_LIMITS = (Window(30, 60.0), Window(1000, 3600.0))
ROBOT_LIMIT = Window(20, 60.0)

TEXT_LIMIT = 2048
MARKDOWN_LIMIT = 2048
TEXTCARD_TITLE_LIMIT = 128
TEXTCARD_DESCRIPTION_LIMIT = 512
ROBOT_TEXT_LIMIT = 2048
ROBOT_MARKDOWN_LIMIT = 4096
MAX_TOUSER = 1000
MAX_DUPLICATE_CHECK_INTERVAL = 4 * 3600
DEFAULT_DUPLICATE_CHECK_INTERVAL = 1800
RECALL_WINDOW = 24 * 3600

# message/update_template_card (更新模版卡片消息): a response code updates a card once,
# within 72 hours of its issue; at most 1,000 userids, 100 partyids and 100 tagids.
RESPONSE_CODE_TTL = 72 * 3600
MAX_UPDATE_USERIDS = 1000
MAX_UPDATE_PARTYIDS = 100
MAX_UPDATE_TAGIDS = 100

# WeCom waits 5 seconds for the answer to a callback it posts.
CALLBACK_TIMEOUT = 5.0

# A template card of card_type button_interaction, as WeCom documents it (发送应用消息,
# 模板卡片消息, 按钮交互型): task_id at most 128 bytes of 0-9a-zA-Z_-@, unique within
# the app; 1 to 6 buttons, each key at most 1,024 bytes and unique; at most 6
# horizontal lines. The texts' lengths are what WeCom recommends, in 字 (a half-width
# character counts half): the sandbox refuses a longer one, a reading stricter than
# WeCom's documentation, which does not say what it does with one.
CARD_TYPES = ("button_interaction",)
CARD_TASK_ID_BYTES = 128
CARD_MAX_BUTTONS = 6
CARD_KEY_BYTES = 1024
CARD_MAX_LINES = 6
CARD_TEXT_LIMITS = {
    "source.desc": 20,
    "main_title.title": 36,
    "main_title.desc": 44,
    "sub_title_text": 160,
    "horizontal_content_list.keyname": 5,
    "horizontal_content_list.value": 30,
    "button_list.text": 10,
}

OVERFLOW_CHOICES = ("truncate", "reject")


@dataclass(frozen=True)
class CallbackTarget:
    """Where the sandbox posts WeCom's callback when a card's button is clicked: the
    app's callback URL and the token and EncodingAESKey set for it in WeCom's admin
    console. The receive id is the sandbox's corp id. ``timeout`` is how long it waits
    for the answer (WeCom's 5 seconds unless a test wants less).

    Neither the token nor the key is ever shown: not in the repr, the page or
    ``/sandbox/control``.
    """

    url: str
    token: str = field(repr=False)
    encoding_aes_key: str = field(repr=False)
    timeout: float = CALLBACK_TIMEOUT

    def __post_init__(self) -> None:
        parts = urlsplit(self.url) if isinstance(self.url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"the callback URL must be an http(s) URL, got {self.url!r}")
        if not isinstance(self.token, str) or not self.token:
            raise ValueError("the callback needs its token (WECOM_CALLBACK_TOKEN)")
        if not isinstance(self.encoding_aes_key, str):
            raise ValueError("the callback needs its EncodingAESKey (WECOM_CALLBACK_AES_KEY)")
        if isinstance(self.timeout, bool) or not isinstance(self.timeout, int | float):
            raise ValueError(f"the callback timeout must be seconds, got {self.timeout!r}")
        if not 0 < self.timeout <= 60:
            raise ValueError(f"the callback timeout must be within 0..60 s, got {self.timeout!r}")
        self.credentials("check")

    def credentials(self, receive_id: str) -> Credentials:
        """The callback's credentials for ``receive_id`` (the corp id); a bad
        EncodingAESKey is a ``ValueError`` (a bad switch or option)."""
        try:
            return Credentials(
                token=self.token, encoding_aes_key=self.encoding_aes_key, receive_id=receive_id
            )
        except BadEncodingAESKey as exc:
            raise ValueError(f"the callback's EncodingAESKey: {exc}") from None

    def describe(self) -> dict[str, object]:
        """What may be shown of it: the URL and the timeout, never the token or key."""
        return {"url": self.url, "timeout": self.timeout}


@dataclass(frozen=True)
class FaultRates:
    """Faults that strike sends at random, as a provider's do: the chance (0 to 1) that a
    send is answered HTTP 5xx (``http_error``) or busy, errcode -1 (``busy``), and that
    its reply, whatever it was, is lost after the send took effect (``lost_reply``) or
    comes ``slow_delay`` seconds late (``slow_reply``).

    The draws come from a generator seeded with ``seed``, four per send whatever they
    decide: the same seed and the same order of sends meet the same faults.
    """

    http_error: float = 0.0
    busy: float = 0.0
    lost_reply: float = 0.0
    slow_reply: float = 0.0
    slow_delay: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("http_error", "busy", "lost_reply", "slow_reply"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"the {name} rate must be a number, got {value!r}")
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"the {name} rate must be within 0..1, got {value!r}")
        if not self.slow_delay >= 0:
            raise ValueError(f"slow_delay must be seconds >= 0, got {self.slow_delay!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"the seed must be an integer, got {self.seed!r}")

    @property
    def active(self) -> bool:
        return any((self.http_error, self.busy, self.lost_reply, self.slow_reply))


@dataclass(frozen=True)
class SandboxConfig:
    """One WeCom app (corp id, secret, agent id), its robots, and the limits to enforce.

    ``fault_rates`` are the random faults it starts (and is reset) with.

    ``callback`` is where a click on a card's button is posted (None: clicks are
    refused until one is set).

    ``overflow`` decides what happens to a text message over 2,048 bytes and a textcard
    title or description over its limit: ``"truncate"`` delivers it cut to the limit and
    marks the ledger entry ``truncated`` (what WeCom documents), ``"reject"`` answers
    45002. Markdown over 2,048 bytes is always 45002.
    """

    corp_id: str = DEV_CORP_ID
    corp_secret: str = field(default=DEV_CORP_SECRET, repr=False)
    agent_id: int = DEV_AGENT_ID
    robot_keys: tuple[str, ...] = field(default=(), repr=False)
    token_ttl: float = 7200.0
    rate_limit: float | None = None
    rate_burst: float | None = None
    user_limits: tuple[Window, ...] = USER_LIMITS
    robot_limit: Window | None = ROBOT_LIMIT
    overflow: str = "truncate"
    invalid_users: frozenset[str] = frozenset()
    ledger_limit: int = 100_000
    fault_rates: FaultRates = FaultRates()
    callback: CallbackTarget | None = None

    def __post_init__(self) -> None:
        if not self.corp_id or not self.corp_secret:
            raise ValueError("corp_id and corp_secret must not be empty")
        if self.token_ttl <= 0:
            raise ValueError("token_ttl must be positive")
        if self.rate_limit is not None and self.rate_limit <= 0:
            raise ValueError("rate_limit must be positive (None for no limit)")
        if self.rate_burst is not None and self.rate_burst < 1:
            raise ValueError("rate_burst must be at least 1")
        if self.overflow not in OVERFLOW_CHOICES:
            raise ValueError(f"overflow must be one of {OVERFLOW_CHOICES}")
        if self.ledger_limit < 1:
            raise ValueError("ledger_limit must be at least 1")

    @classmethod
    def build(
        cls,
        *,
        robot_keys: Iterable[str] = (),
        user_limits: Iterable[Window | str] | None = USER_LIMITS,
        robot_limit: Window | str | None = ROBOT_LIMIT,
        invalid_users: Iterable[str] = (),
        agent_id: int | str = DEV_AGENT_ID,
        **options: object,
    ) -> SandboxConfig:
        """Accepts lists and ``"30/60"`` strings where the fields want tuples and windows."""
        return cls(
            robot_keys=tuple(robot_keys),
            user_limits=tuple(
                Window.parse(w) if isinstance(w, str) else w for w in (user_limits or ())
            ),
            robot_limit=Window.parse(robot_limit) if isinstance(robot_limit, str) else robot_limit,
            invalid_users=frozenset(invalid_users),
            agent_id=int(agent_id),
            **options,  # type: ignore[arg-type]
        )

    @property
    def burst(self) -> float:
        if self.rate_limit is None:
            return 0.0
        return self.rate_burst if self.rate_burst is not None else max(1.0, self.rate_limit)


def mask(key: str) -> str:
    """A robot key as the ledger and the page show it: enough to tell robots apart."""
    return f"{key[:4]}…" if len(key) > 4 else "…"
