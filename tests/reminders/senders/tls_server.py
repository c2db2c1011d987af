"""A TLS server in a thread that breaks TLS on purpose, for the sender's network tests.

``TlsServer(mode, cert)``: ``"break-reply"`` completes the handshake, reads the whole
request, then answers with a TLS record that cannot be decrypted (the client's read
fails with ``SSLError`` after its request arrived); ``"plain"`` answers the handshake
with plain HTTP (it fails before any byte of the request is sent). ``requests`` counts
the requests that arrived. ``certificate(directory)`` makes a self-signed certificate
for 127.0.0.1 with the ``openssl`` command.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path

# A TLS 1.2/1.3 application-data record of 32 bytes that no key decrypts.
BAD_RECORD = b"\x17\x03\x03\x00\x20" + b"\x01" * 32


def certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate and key for 127.0.0.1, valid two days."""
    if shutil.which("openssl") is None:
        raise RuntimeError("the openssl command is needed to make a test certificate")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
            "-addext", "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


class TlsServer:
    def __init__(self, mode: str, cert: Path, key: Path) -> None:
        self.mode = mode
        self.requests = 0
        self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._context.load_cert_chain(cert, key)
        self._socket = socket.create_server(("127.0.0.1", 0))
        self._socket.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self._socket.getsockname()[1]}"

    def __enter__(self) -> TlsServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self._socket.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._socket.accept()
            except TimeoutError:
                continue
            # OSError: the client gave up on a connection it found broken.
            with conn, contextlib.suppress(OSError):
                conn.settimeout(5)
                self._answer(conn)

    def _answer(self, conn: socket.socket) -> None:
        if self.mode == "plain":
            conn.recv(4096)  # the ClientHello
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            return
        with self._context.wrap_socket(conn, server_side=True) as tls:
            self._break_reply(tls)

    def _break_reply(self, tls: ssl.SSLSocket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = tls.recv(4096)
            if not chunk:
                return
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(
            (int(line.split(b":")[1]) for line in head.split(b"\r\n")
             if line.lower().startswith(b"content-length:")),
            0,
        )  # fmt: skip
        while len(body) < length:
            body += tls.recv(4096)
        self.requests += 1
        # Past TLS, on the bare socket: a record the client cannot decrypt, then a pause
        # so that it reads the record before it sees the connection close.
        with socket.socket(fileno=os.dup(tls.fileno())) as raw:
            raw.sendall(BAD_RECORD)
            time.sleep(0.5)
