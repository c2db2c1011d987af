"""How many rows of a table the statements of a block of code read, as PostgreSQL's own
plans count them: each SELECT is run under ``EXPLAIN (ANALYZE, FORMAT JSON)`` first, in
the same transaction, then as it was. The rows a scan returned plus those it read and
threw away (a filter, an index's recheck), times its loops. A test of a query's plan
states how much it may read, whatever plan the statistics of the moment lead to.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.db import connection


def require_postgresql() -> None:
    if connection.vendor != "postgresql":
        pytest.skip(
            f"{connection.vendor}: plans are read from PostgreSQL's EXPLAIN ANALYZE, in the "
            "PostgreSQL run of the suite"
        )


def analyze(*tables: str) -> None:
    """Refresh the planner's statistics of ``tables`` now (then the test changes them)."""
    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f"ANALYZE {connection.ops.quote_name(table)}")


@dataclass
class Reads:
    table: str
    statements: list[tuple[str, int]] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(rows for _, rows in self.statements)

    def __str__(self) -> str:
        return "\n".join(f"{rows:>7} {sql[:160]}" for sql, rows in self.statements)


@contextmanager
def rows_read(table: str) -> Iterator[Reads]:
    """The SELECTs run inside the block, each with the rows of ``table`` it read."""
    found = Reads(table)

    def explain(
        execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        if not many and sql.lstrip().upper().startswith("SELECT") and table in sql:
            raw = context["cursor"].cursor
            raw.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", params)
            plan = raw.fetchone()[0]
            plan = json.loads(plan) if isinstance(plan, str) else plan
            found.statements.append((sql, _read(plan[0]["Plan"], table)))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(explain):
        yield found


def _read(node: dict[str, Any], table: str) -> int:
    own = 0
    if node.get("Relation Name") == table:
        touched = (
            node.get("Actual Rows", 0)
            + node.get("Rows Removed by Filter", 0)
            + node.get("Rows Removed by Index Recheck", 0)
        )
        own = touched * max(1, node.get("Actual Loops", 1))
    return own + sum(_read(child, table) for child in node.get("Plans", []))
