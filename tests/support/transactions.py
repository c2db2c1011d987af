"""Counting the transactions a piece of code commits, as the database sees them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.db import connection


@dataclass
class Transactions:
    """What ran, grouped by transaction: a statement outside any ``atomic`` block is a
    transaction of its own (autocommit), and an outermost block is one whatever runs in
    it. Needs a test whose transactions are real (``transaction=True``)."""

    groups: list[list[str]] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.groups)

    def _wrapper(
        self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        if sql.split(None, 1)[0].upper() == "BEGIN":
            pass  # SQLite's BEGIN IMMEDIATE, sent as the block opens: the block counts
        elif not connection.in_atomic_block:
            self.groups.append([sql])
        else:
            outermost = connection.atomic_blocks[0]
            if getattr(outermost, "_counted", None) is not self:
                outermost._counted = self
                self.groups.append([])
            self.groups[-1].append(sql)
        return execute(sql, params, many, context)

    def __str__(self) -> str:
        return "\n".join(" | ".join(sql[:60] for sql in group) for group in self.groups)


@contextmanager
def transactions() -> Iterator[Transactions]:
    counted = Transactions()
    assert not connection.in_atomic_block, "count transactions in a transaction=True test"
    with connection.execute_wrapper(counted._wrapper):
        yield counted
