"""The HTTP side: a threading HTTP/1.1 server with keep-alive, and ``WeComSandbox``.

The standard library's ``http.server`` is enough (see ``benchmarks/sandbox_capacity.py``)
once each response goes out in one write with ``TCP_NODELAY`` and nothing is logged per
request by default. Request lines carry the access token and the corp secret in their
query strings, so whatever is logged is the path without its query.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import signal
import socket
import threading
from collections.abc import Callable, Iterable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType, TracebackType
from typing import Any
from urllib.parse import parse_qsl

from django.conf import settings
from django.utils import translation
from django.utils.translation import trans_real

from . import clicks, controls, page
from .config import (
    CALLBACK_TIMEOUT,
    DEV_AGENT_ID,
    DEV_CORP_ID,
    DEV_CORP_SECRET,
    ROBOT_LIMIT,
    USER_LIMITS,
    CallbackTarget,
    FaultRates,
    SandboxConfig,
)
from .ledger import DELIVERED, LedgerEntry
from .limits import Window
from .replies import Reply, encode, error_body
from .state import SandboxState

logger = logging.getLogger("wecom_sandbox")

MAX_BODY = 1 << 20
MAX_LINE = 65536
MAX_HEADERS = 100
STOP_TIMEOUT = 5.0


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "wecom-sandbox"
    server: SandboxHTTPServer
    fields: dict[str, str]
    raw_requestline: bytes

    def setup(self) -> None:
        super().setup()
        # A reply is one write, but the client's next request must not wait on an ACK.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def parse_request(self) -> bool:
        """The request line and headers, without ``email.parser``.

        The standard parser builds an ``email.message.Message`` per request, which costs
        more than everything else the sandbox does; these headers are a plain dict with
        lower-case names, in ``self.fields``.
        """
        self.command = ""
        self.close_connection = True
        self.requestline = requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        words = requestline.split()
        if len(words) != 3:
            self.request_version = "HTTP/0.9"
            self.send_error(HTTPStatus.BAD_REQUEST, "Bad request line")
            return False
        command, path, version = words
        self.request_version = version
        if version not in ("HTTP/1.1", "HTTP/1.0"):
            self.send_error(HTTPStatus.HTTP_VERSION_NOT_SUPPORTED)
            return False
        fields: dict[str, str] = {}
        for _ in range(MAX_HEADERS):
            line = self.rfile.readline(MAX_LINE + 1)
            if len(line) > MAX_LINE:
                self.send_error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE)
                return False
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.decode("iso-8859-1").partition(":")
            fields[name.strip().lower()] = value.strip()
        else:
            self.send_error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "Too many headers")
            return False
        self.command, self.path, self.fields = command, path, fields
        connection = fields.get("connection", "").lower()
        self.close_connection = connection == "close" or (
            version == "HTTP/1.0" and connection != "keep-alive"
        )
        if fields.get("expect", "").lower() == "100-continue":
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        return True

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        path, _, query_string = self.path.partition("?")
        query = _query(query_string)
        body = self._body() if method == "POST" else b""
        if body is None:
            return
        route = ROUTES.get(path)
        if route is None:
            reply = Reply(error_body(404, f"no such endpoint: {path}"), status=404)
        elif path in PAGES:
            with _in_language(self.fields.get("accept-language", "")):
                reply = route(self.server, method, query, body)
        else:
            reply = route(self.server, method, query, body)
        self._write(reply, path)

    def _body(self) -> bytes | None:
        if self.fields.get("transfer-encoding"):
            self._write(Reply(b"send a Content-Length", status=411, content_type="text/plain"))
            self.close_connection = True
            return None
        try:
            length = int(self.fields.get("content-length") or 0)
        except ValueError:
            length = -1
        if length < 0:
            self._write(Reply(b"bad Content-Length", status=400, content_type="text/plain"))
            self.close_connection = True
            return None
        if length > MAX_BODY:
            self._write(Reply(b"body too large", status=413, content_type="text/plain"))
            self.close_connection = True
            return None
        return self.rfile.read(length) if length else b""

    def _write(self, reply: Reply, path: str = "") -> None:
        if reply.delay:
            self.server.stopping.wait(reply.delay)
        if reply.lose:
            # The request was handled and recorded; the caller never hears of it.
            self.close_connection = True
            self._log(path, "no reply (lost)")
            return
        head = _head(reply.status, reply.content_type)
        if reply.location:
            head += b"Location: %s\r\n" % reply.location.encode("latin-1")
        if self.close_connection:
            head += b"Connection: close\r\n"
        self.wfile.write(b"%sContent-Length: %d\r\n\r\n%s" % (head, len(reply.body), reply.body))
        self._log(path, str(reply.status))

    def _log(self, path: str, outcome: str) -> None:
        if self.server.verbose:
            logger.info("%s %s -> %s", self.command, path, outcome)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Never: the default logs the request line, query string (secret) included."""

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s: " + format, self.client_address[0], *args)


@functools.lru_cache(maxsize=64)
def _head(status: int, content_type: str) -> bytes:
    phrase = HTTPStatus(status).phrase
    return (
        f"HTTP/1.1 {status} {phrase}\r\nServer: wecom-sandbox\r\nContent-Type: {content_type}\r\n"
    ).encode("latin-1")


class SandboxHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(
        self, address: tuple[str, int], state: SandboxState, *, verbose: bool = False
    ) -> None:
        self.state = state
        self.verbose = verbose
        self.stopping = threading.Event()
        self.active: dict[socket.socket, threading.Thread] = {}
        self.active_lock = threading.Lock()
        super().__init__(address, Handler)

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else host
        return f"http://{f'[{host}]' if ':' in host else host}:{port}"

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        with self.active_lock:
            self.active[request] = threading.current_thread()
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self.active_lock:
                self.active.pop(request, None)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up mid-request is not the sandbox's error.
        logger.debug("connection from %s ended with an error", client_address, exc_info=True)

    def close_connections(self) -> None:
        """End every kept-alive connection so that its thread returns, and wait for them."""
        self.stopping.set()
        with self.active_lock:
            active = list(self.active.items())
        for request, _thread in active:
            with contextlib.suppress(OSError):
                request.shutdown(socket.SHUT_RDWR)
        for _request, thread in active:
            thread.join(STOP_TIMEOUT)


# Routes -------------------------------------------------------------------------------

Route = Callable[[SandboxHTTPServer, str, dict[str, str], bytes], Reply]


def _api(post_only: bool, call: Callable[[SandboxState, dict[str, str], bytes], Reply]) -> Route:
    def route(server: SandboxHTTPServer, method: str, query: dict[str, str], body: bytes) -> Reply:
        if post_only and method != "POST":
            return server.state.not_post()
        return call(server.state, query, body)

    return route


# What a person reads: in their browser's language (``Accept-Language``) where the project
# declares it (``settings.LANGUAGES``), else ``LANGUAGE_CODE``. WeCom's API answers stay as
# WeCom gives them, whatever was asked.
PAGES = ("/", "/sandbox/", "/sandbox/click")


def _in_language(accept: str) -> contextlib.AbstractContextManager[None]:
    if not settings.configured:
        return contextlib.nullcontext()
    for code, _quality in trans_real.parse_accept_lang_header(accept):
        if code == "*":
            break
        try:
            return translation.override(translation.get_supported_language_variant(code))
        except LookupError:
            continue
    return translation.override(settings.LANGUAGE_CODE)


def _page(server: SandboxHTTPServer, method: str, query: dict[str, str], body: bytes) -> Reply:
    state = server.state
    entries = state.entries(max(0, state.last_id() - 200))[::-1]
    refresh = _int(query.get("refresh"), 2)
    html = page.render(server.base_url, state.describe(), state.counters(), entries, refresh)
    return Reply(html, content_type="text/html; charset=utf-8")


def _root(server: SandboxHTTPServer, method: str, query: dict[str, str], body: bytes) -> Reply:
    return _page(server, method, query, body)


def _messages(server: SandboxHTTPServer, method: str, query: dict[str, str], body: bytes) -> Reply:
    state = server.state
    since_id = _int(query.get("since_id"), 0)
    limit = min(_int(query.get("limit"), 1000), 10_000)
    entries = state.entries(since_id, limit, query.get("status") or None)
    last_id = entries[-1].id if entries else max(since_id, 0)
    return Reply(
        encode(
            {
                "messages": [e.as_dict() for e in entries],
                "last_id": last_id,
                "newest_id": state.last_id(),
            }
        )
    )


def _stats(server: SandboxHTTPServer, method: str, query: dict[str, str], body: bytes) -> Reply:
    return Reply(encode(server.state.counters()))


def _control(server: SandboxHTTPServer, method: str, query: dict[str, str], body: bytes) -> Reply:
    if method != "POST":
        return Reply(encode(server.state.describe()))
    try:
        switches = json.loads(body or b"{}")
        if not isinstance(switches, dict):
            raise ValueError("send a JSON object of switches")
        return Reply(encode(controls.apply(server.state, switches)))
    except ValueError as exc:
        return Reply(encode({"error": str(exc)}), status=400)


def _reset(server: SandboxHTTPServer, method: str, query: dict[str, str], body: bytes) -> Reply:
    if method != "POST":
        return Reply(encode({"error": "POST to reset"}), status=405)
    server.state.reset()
    return Reply(encode(server.state.describe()))


def _click(server: SandboxHTTPServer, method: str, query: dict[str, str], body: bytes) -> Reply:
    """A click on a card's button: JSON ``{"entry", "key", "user"}`` answered with the
    click as JSON, or the page's form (the same fields) answered 303 back to the page."""
    if method != "POST":
        return Reply(encode({"error": "POST a click", "reason": "bad_request"}), status=405)
    form = not body.lstrip().startswith(b"{")
    try:
        entry_id, key, user = _click_fields(body, form)
        click = click_now(server.state, entry_id, key, user)
    except clicks.ClickRefused as exc:
        if form:
            return Reply(
                page.refused(exc.status, exc.error),
                status=exc.status,
                content_type="text/html; charset=utf-8",
            )
        return Reply(encode(exc.as_dict()), status=exc.status)
    if form:
        return Reply(b"", status=303, location=f"/sandbox/#entry-{click.entry}")
    return Reply(encode(click.as_dict()))


def _click_fields(body: bytes, form: bool) -> tuple[int, str, str | None]:
    def bad(error: str) -> clicks.ClickRefused:
        return clicks.ClickRefused(400, "bad_request", error)

    try:
        text = body.decode()
        fields: Any = dict(parse_qsl(text, keep_blank_values=True)) if form else json.loads(text)
    except (UnicodeDecodeError, ValueError):
        raise bad("send JSON {entry, key, user} or a form of those fields") from None
    if not isinstance(fields, dict):
        raise bad("send a JSON object {entry, key, user}")
    entry, key, user = fields.get("entry"), fields.get("key"), fields.get("user") or None
    if isinstance(entry, str) and entry.isdigit():
        entry = int(entry)
    if isinstance(entry, bool) or not isinstance(entry, int):
        raise bad(f"entry must be a ledger entry's id, got {entry!r}")
    if not isinstance(key, str) or not key:
        raise bad(f"key must be a button's key, got {key!r}")
    if user is not None and not isinstance(user, str):
        raise bad(f"user must be a member id, got {user!r}")
    return entry, key, user


def click_now(state: SandboxState, entry_id: int, key: str, user: str | None) -> clicks.Click:
    """Make the click: checked and given its code under the lock, posted without it."""
    plan = state.prepare_click(entry_id, key, user)
    click = clicks.post(plan)
    state.record_click(click)
    return click


def _query(query_string: str) -> dict[str, str]:
    """The query's parameters; a token has no escapes, so most skip ``parse_qsl``."""
    if "%" in query_string or "+" in query_string:
        return dict(parse_qsl(query_string, keep_blank_values=True))
    pairs = (part.partition("=") for part in query_string.split("&") if part)
    return {name: value for name, _, value in pairs}


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value not in (None, "") else default
    except ValueError:
        return default


ROUTES: dict[str, Route] = {
    "/cgi-bin/gettoken": _api(False, lambda state, query, body: state.gettoken(query)),
    "/cgi-bin/message/send": _api(True, SandboxState.message_send),
    "/cgi-bin/webhook/send": _api(True, SandboxState.webhook_send),
    "/cgi-bin/message/recall": _api(True, SandboxState.message_recall),
    "/cgi-bin/message/update_template_card": _api(True, SandboxState.message_update_template_card),
    "/cgi-bin/message/get_statistics": _api(True, SandboxState.message_get_statistics),
    "/": _root,
    "/sandbox": _page,
    "/sandbox/": _page,
    "/sandbox/messages": _messages,
    "/sandbox/stats": _stats,
    "/sandbox/control": _control,
    "/sandbox/reset": _reset,
    "/sandbox/click": _click,
}


# The Python API -----------------------------------------------------------------------


class WeComSandbox:
    """A WeCom server-API double on a real socket, for tests and for `make run`.

    ``start()`` serves from a background thread and returns the base URL to use as
    ``WECOM_API_BASE``; ``control()`` sets the fault switches; ``ledger()`` and
    ``delivered()`` say what happened; ``click()`` clicks a card's button, posting
    WeCom's callback to ``callback_url`` (with ``callback_token`` and
    ``callback_aes_key``). Usable as a context manager.
    """

    def __init__(
        self,
        *,
        corp_id: str = DEV_CORP_ID,
        corp_secret: str = DEV_CORP_SECRET,
        agent_id: int | str = DEV_AGENT_ID,
        robot_keys: Iterable[str] = (),
        token_ttl: float = 7200.0,
        rate_limit: float | None = None,
        rate_burst: float | None = None,
        user_limits: Iterable[Window | str] | None = USER_LIMITS,
        robot_limit: Window | str | None = ROBOT_LIMIT,
        overflow: str = "truncate",
        invalid_users: Iterable[str] = (),
        ledger_limit: int = 100_000,
        fault_rates: FaultRates | None = None,
        callback_url: str | None = None,
        callback_token: str | None = None,
        callback_aes_key: str | None = None,
        callback_timeout: float = CALLBACK_TIMEOUT,
        verbose: bool = False,
    ) -> None:
        callback = None
        if callback_url:
            callback = CallbackTarget(
                url=callback_url,
                token=callback_token or "",
                encoding_aes_key=callback_aes_key or "",
                timeout=callback_timeout,
            )
        elif callback_token or callback_aes_key:
            raise ValueError("a callback token or EncodingAESKey needs a callback URL")
        self.config = SandboxConfig.build(
            corp_id=corp_id,
            corp_secret=corp_secret,
            agent_id=agent_id,
            robot_keys=robot_keys,
            token_ttl=float(token_ttl),
            rate_limit=rate_limit,
            rate_burst=rate_burst,
            user_limits=user_limits,
            robot_limit=robot_limit,
            overflow=overflow,
            invalid_users=invalid_users,
            ledger_limit=ledger_limit,
            fault_rates=fault_rates or FaultRates(),
            callback=callback,
        )
        self.state = SandboxState(self.config)
        self.verbose = verbose
        self._server: SandboxHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        where = self._server.base_url if self._server else "stopped"
        return f"<WeComSandbox {self.config.corp_id} agent {self.config.agent_id} {where}>"

    # Lifecycle -------------------------------------------------------------------------

    def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Listen on ``host:port`` (0: any free port) and serve in a background thread."""
        if self._server is not None:
            raise RuntimeError("the sandbox is already running")
        self._server = SandboxHTTPServer((host, port), self.state, verbose=self.verbose)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name=f"wecom-sandbox-{self._server.server_address[1]}",
            daemon=True,
        )
        self._thread.start()
        return self._server.base_url

    def stop(self) -> None:
        """Stop accepting, end kept-alive connections and slow replies, close the socket."""
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        server.shutdown()
        thread.join(STOP_TIMEOUT)
        server.close_connections()
        server.server_close()
        self._server = self._thread = None

    def serve_until_signalled(
        self, host: str, port: int, on_ready: Callable[[str], None] | None = None
    ) -> None:
        """Serve in the foreground until SIGTERM or SIGINT, then stop cleanly."""
        stop = threading.Event()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            stop.set()

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            base_url = self.start(host, port)
            if on_ready is not None:
                on_ready(base_url)
            # A timed wait, so the signal handler runs promptly whatever the platform.
            while not stop.wait(0.5):
                pass
        finally:
            self.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("the sandbox is not running")
        return self._server.base_url

    @property
    def running(self) -> bool:
        return self._server is not None

    def __enter__(self) -> WeComSandbox:
        if self._server is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # Switches and state ----------------------------------------------------------------

    def control(self, **switches: Any) -> dict[str, Any]:
        """Set fault switches, e.g. ``control(busy=2, lost_replies=1, delay=0.5, slow=1)``.

        Counts act on the next sends (``message/send`` and ``webhook/send``):
        ``busy`` (-1), ``http_errors`` (with ``http_status``, default 500),
        ``lost_replies`` (delivered, then the connection closes unanswered),
        ``errcodes`` (a list answered in order), ``config_error`` (N times 60020),
        ``gettoken_errcodes`` (for ``gettoken``); ``delay`` seconds before each reply,
        for the next ``slow`` replies only if given. Random faults (``FaultRates``), each
        send meeting each with its chance: ``busy_rate``, ``http_error_rate``,
        ``lost_reply_rate``, ``slow_reply_rate`` (0 to 1) with ``slow_reply_delay``
        seconds, drawn from a generator that ``seed`` re-seeds. ``expire_tokens`` (42001 from now),
        ``invalidate_tokens`` (40014), ``invalid_users`` / ``valid_users`` (lists),
        ``advance`` (move the sandbox clock forward, seconds); and the settings
        ``rate_limit``, ``rate_burst``, ``token_ttl``, ``user_limits``, ``robot_limit``,
        ``overflow``, ``callback`` (``{"url", "token", "encoding_aes_key"}`` and
        optionally ``"timeout"``, or None). Returns the resulting settings and pending faults.
        """
        return controls.apply(self.state, switches)

    def click(self, entry_id: int, key: str, user: str | None = None) -> dict[str, Any]:
        """Click button ``key`` of the card of ledger entry ``entry_id`` as ``user`` (by
        default its first member recipient): the sandbox posts WeCom's
        ``template_card_event`` to the callback and answers what ``POST /sandbox/click``
        answers. ``ClickRefused`` when the click cannot be made."""
        return click_now(self.state, entry_id, key, user).as_dict()

    def reset(self) -> None:
        """Back to the configuration it was built with: no tokens, faults or ledger."""
        self.state.reset()

    def advance(self, seconds: float) -> None:
        """Move the sandbox clock forward: tokens expire, limits and duplicate checks lapse."""
        controls.apply(self.state, {"advance": seconds})

    def ledger(self, since_id: int = 0, status: str | None = None) -> list[LedgerEntry]:
        return self.state.entries(since_id, status=status)

    def delivered(self, to: str | None = None) -> list[LedgerEntry]:
        """Entries someone received (lost replies included), optionally for one user."""
        entries = self.state.entries(status=DELIVERED)
        return [e for e in entries if to is None or to in e.delivered_to]

    def stats(self) -> dict[str, int]:
        return self.state.counters()
