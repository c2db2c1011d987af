"""``SandboxClient``: the same controls as ``WeComSandbox``, for a sandbox in another process."""

from __future__ import annotations

from typing import Any

import requests

from .clicks import ClickRefused
from .ledger import DELIVERED, LedgerEntry


class SandboxClient:
    """Talks to ``/sandbox/*`` of a running sandbox (``manage.py wecom_sandbox``)."""

    def __init__(self, base_url: str, *, timeout: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.session = requests.Session()

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> SandboxClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def control(self, **switches: Any) -> dict[str, Any]:
        return self._post("/sandbox/control", switches)

    def reset(self) -> dict[str, Any]:
        return self._post("/sandbox/reset", {})

    def advance(self, seconds: float) -> dict[str, Any]:
        return self.control(advance=seconds)

    def ledger(self, since_id: int = 0, status: str | None = None) -> list[LedgerEntry]:
        """Every entry after ``since_id``, fetched page by page."""
        entries: list[LedgerEntry] = []
        while True:
            params: dict[str, Any] = {"since_id": since_id, "limit": 10_000}
            if status:
                params["status"] = status
            data = self._get("/sandbox/messages", params)
            entries += [LedgerEntry.from_dict(m) for m in data["messages"]]
            if data["last_id"] >= data["newest_id"] or not data["messages"]:
                return entries
            since_id = data["last_id"]

    def delivered(self, to: str | None = None) -> list[LedgerEntry]:
        return [e for e in self.ledger(status=DELIVERED) if to is None or to in e.delivered_to]

    def click(self, entry_id: int, key: str, user: str | None = None) -> dict[str, Any]:
        """``POST /sandbox/click``: the click made, as JSON; ``ClickRefused`` (with the
        sandbox's status, reason and error) when it cannot be made."""
        data: dict[str, Any] = {"entry": entry_id, "key": key}
        if user is not None:
            data["user"] = user
        response = self.session.post(
            self.base_url + "/sandbox/click", json=data, timeout=self.timeout
        )
        if response.status_code in (400, 404, 409):
            refusal = response.json()
            raise ClickRefused(response.status_code, refusal["reason"], refusal["error"])
        response.raise_for_status()
        click: dict[str, Any] = response.json()
        return click

    def stats(self) -> dict[str, int]:
        counters: dict[str, int] = self._get("/sandbox/stats", {})
        return counters

    def _get(self, path: str, params: dict[str, Any]) -> Any:
        response = self.session.get(self.base_url + path, params=params, timeout=self.timeout)
        response.raise_for_status()
        return response.json()

    def _post(self, path: str, data: dict[str, Any]) -> Any:
        response = self.session.post(self.base_url + path, json=data, timeout=self.timeout)
        if response.status_code == 400:
            raise ValueError(response.json().get("error"))
        response.raise_for_status()
        return response.json()
