"""What the sandbox did with every send it was asked for; not thread-safe on its own."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

DELIVERED = "delivered"
SUPPRESSED = "suppressed"
REJECTED = "rejected"


@dataclass(frozen=True)
class LedgerEntry:
    """One send request and its outcome.

    ``status`` is ``delivered`` (someone received it, even if the reply was then lost),
    ``suppressed`` (accepted with errcode 0 but not delivered again: the duplicate check)
    or ``rejected`` (``errcode``, or ``http_status`` for an injected 5xx, says why).
    ``content`` is what the recipient saw: for a textcard its title, a blank line and
    its description; ``truncated`` when the sandbox cut it to WeCom's limit.

    After the send: ``recalled`` once ``message/recall`` took it back. For a button
    card, ``card_update`` is its latest ``message/update_template_card`` (None until
    one): ``at`` (wall time), ``response_code`` and ``source`` (``send`` or ``click``:
    which issued it), either ``replace_name`` (the buttons became one disabled button
    of that text) or ``template_card`` (the card it became) with its ``content``, and
    ``userids``, ``partyids``, ``tagids``, ``atall`` and ``invaliduser`` as asked and
    answered. ``updated_for`` is everyone whose card has been updated so far (members,
    ``party:<id>``, ``tag:<id>``). ``clicks`` are the clicks the sandbox posted to the
    callback (``wecom_sandbox.clicks.Click.as_dict``), oldest first.
    """

    id: int
    at: float
    endpoint: str
    status: str
    errcode: int | None
    errmsg: str
    msgid: str = ""
    msgtype: str = ""
    touser: tuple[str, ...] = ()
    delivered_to: tuple[str, ...] = ()
    suppressed_to: tuple[str, ...] = ()
    invaliduser: tuple[str, ...] = ()
    content: str = ""
    truncated: bool = False
    duplicate_of: int | None = None
    robot: str = ""
    mentioned_list: tuple[str, ...] = ()
    http_status: int = 200
    reply_lost: bool = False
    reply_delay: float = 0.0
    recalled: bool = False
    card_update: dict[str, Any] | None = field(default=None, hash=False)
    updated_for: tuple[str, ...] = ()
    clicks: tuple[dict[str, Any], ...] = field(default=(), hash=False)
    request: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def delivered(self) -> bool:
        return self.status == DELIVERED

    def as_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        for name, value in data.items():
            if isinstance(value, tuple):
                data[name] = list(value)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LedgerEntry:
        names = {f.name for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {
            k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k in names
        }
        return cls(**values)


class Ledger:
    """Entries in id order, the oldest dropped beyond ``limit``; ids never repeat."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.entries: list[LedgerEntry] = []
        self.next_id = 1

    def add(self, **values: Any) -> LedgerEntry:
        entry = LedgerEntry(id=self.next_id, **values)
        self.next_id += 1
        self.entries.append(entry)
        if len(self.entries) > self.limit:
            # Trim in chunks so that a full ledger does not shift the list every send.
            del self.entries[: max(1, self.limit // 10)]
        return entry

    def since(self, since_id: int = 0, limit: int | None = None) -> list[LedgerEntry]:
        if not self.entries:
            return []
        start = max(0, since_id - self.entries[0].id + 1)
        stop = None if limit is None else start + limit
        return self.entries[start:stop]

    def find(self, entry_id: int) -> int | None:
        """The position of entry ``entry_id`` in ``entries``, if it is still kept."""
        if not self.entries:
            return None
        index = entry_id - self.entries[0].id
        return index if 0 <= index < len(self.entries) else None

    def replace(self, entry_id: int, **changes: Any) -> None:
        index = self.find(entry_id)
        if index is not None:
            self.entries[index] = dataclasses.replace(self.entries[index], **changes)

    def clear(self) -> None:
        self.entries.clear()
