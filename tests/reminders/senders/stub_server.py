"""A real HTTP server in a thread that answers canned replies per path, for sender tests.

``StubServer.on(path, *answers)`` queues answers for a path (the last one repeats);
an answer is a ``Canned`` reply or a function of the ``Request`` that returns one.
Every request is kept in ``requests``, raw body bytes and client port included, so a
test can compare what was sent byte for byte and see connections being reused.
``wecom()`` installs a small WeCom: gettoken issues numbered tokens, message/send
accepts only a live one, and ``expire_tokens()`` makes the server forget them.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    body: bytes
    headers: dict[str, str]
    client_port: int

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True)
class Canned:
    """A reply: JSON (or raw bytes), a status, a delay, or a connection dropped unanswered."""

    json: Any = None
    status: int = 200
    raw: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    drop: bool = False


Answer = Canned | Callable[[Request], Canned]


def ok(**fields: Any) -> Canned:
    return Canned({"errcode": 0, "errmsg": "ok", **fields})


def error(errcode: int, errmsg: str = "error") -> Canned:
    return Canned({"errcode": errcode, "errmsg": errmsg})


class StubServer:
    def __init__(self) -> None:
        self.requests: list[Request] = []
        self._routes: dict[str, list[Answer]] = {}
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        # The small WeCom of ``wecom()``.
        self.tokens_issued = 0
        self.live_tokens: set[str] = set()
        self.token_lifetime = 7200
        self.gettoken_delay = 0.0

    @property
    def url(self) -> str:
        assert self._httpd is not None
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> str:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, like WeCom

            def do_GET(self) -> None:
                stub._handle(self)

            do_POST = do_GET

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        return self.url

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def on(self, path: str, *answers: Answer) -> None:
        with self._lock:
            self._routes[path] = list(answers)

    def calls(self, path: str) -> list[Request]:
        with self._lock:
            return [request for request in self.requests if request.path == path]

    def _answer(self, request: Request) -> Canned:
        with self._lock:
            self.requests.append(request)
            queue = self._routes.get(request.path)
            if not queue:
                return Canned({"errcode": 404, "errmsg": "no such path"}, status=404)
            answer = queue.pop(0) if len(queue) > 1 else queue[0]
        return answer(request) if callable(answer) else answer

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(handler.path)
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        request = Request(
            handler.command,
            parts.path,
            {key: values[0] for key, values in parse_qs(parts.query).items()},
            body,
            dict(handler.headers.items()),
            handler.client_address[1],
        )
        canned = self._answer(request)
        if canned.delay:
            time.sleep(canned.delay)
        if canned.drop:
            # The request arrived (and may have been "delivered"); the reply never leaves.
            handler.close_connection = True
            return
        payload = canned.raw if canned.raw is not None else json.dumps(canned.json).encode()
        try:
            handler.send_response(canned.status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(payload)))
            for name, value in canned.headers.items():
                handler.send_header(name, value)
            handler.end_headers()
            handler.wfile.write(payload)
        except OSError:
            pass  # the client gave up (a timeout test): nobody is listening

    # -- a small WeCom ----------------------------------------------------------------

    def wecom(self, secret: str) -> None:
        """gettoken and message/send that check credentials and tokens like WeCom."""

        def gettoken(request: Request) -> Canned:
            if request.query.get("corpsecret") != secret:
                return error(40001, "invalid credential")
            if self.gettoken_delay:
                time.sleep(self.gettoken_delay)
            with self._lock:
                self.tokens_issued += 1
                token = f"TOKEN-{self.tokens_issued:04d}-" + "x" * 40
                self.live_tokens.add(token)
            return ok(access_token=token, expires_in=self.token_lifetime)

        def send(request: Request) -> Canned:
            token = request.query.get("access_token")
            if not token:
                return error(41001, "access_token missing")
            if token not in self.live_tokens:
                return error(42001, f"access_token expired, hint: [{token[:3]}]")
            return ok(msgid=f"msg-{len(self.calls('/cgi-bin/message/send'))}")

        self.on("/cgi-bin/gettoken", gettoken)
        self.on("/cgi-bin/message/send", send)

    def expire_tokens(self) -> None:
        with self._lock:
            self.live_tokens.clear()
