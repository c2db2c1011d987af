"""The runs of a task's past that the ``compensate`` rule makes up
(``reminders.engine.planning``): occurrences whose run ended for good unsent or was
skipped as missed, and that no make-up covers yet (``lost_occurrences``).

Invariants: a batch of tasks planned together reads its tasks' history in one statement
(``History.read``), not one a task, and each task gets from it exactly the rows its own
statement would give, for any window from as far back as its kind looks
(``compensate_max_age_seconds``); a window reaching further back, or a task not read,
is read on its own. The batch's rows are read in the plan's transaction before any of
its tasks is planned, which writes no run until all are: what a task's own statement
would have read then.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import cast

from django.db.models import Q, QuerySet

from .. import kinds
from ..exceptions import UnknownKind
from ..models import ScheduledTask, TaskRun
from ..models.choices import LOST_STATUSES, MAKEUP_SUFFIX, MISSED_CODES

# What ``lost_occurrences`` reads of a run: its occurrence, whether it is a make-up, its
# ledger key and its status.
_HISTORY = ("occurrence", "is_compensation", "ledger_key", "status")
HistoryRow = tuple[datetime, bool, str, str]


def _history(
    runs: QuerySet[TaskRun], since: datetime, before: datetime | None = None
) -> QuerySet[TaskRun, HistoryRow]:
    """Of ``runs``, those from ``since`` (and before ``before``) that
    ``lost_occurrences`` weighs: make-ups, and runs that ended for good unsent or were
    skipped as missed."""
    lost = Q(status__in=LOST_STATUSES) | Q(
        status=TaskRun.Status.SKIPPED, error_code__in=MISSED_CODES
    )
    if before is not None:
        runs = runs.filter(occurrence__lt=before)
    return (
        runs.filter(occurrence__gte=since, is_manual=False)
        .filter(Q(is_compensation=True) | lost)
        .values_list(*_HISTORY)
    )


class History:
    """The runs ``lost_occurrences`` weighs, of a batch of tasks, read in one statement
    (``read``) instead of one a task: a 09:00 wave of daily reports under ``compensate``
    cost the plan a statement a report. What it holds was read before the batch was
    planned, in the plan's transaction, as each task's own statement was."""

    def __init__(self, rows: dict[int, list[HistoryRow]], since: dict[int, datetime]) -> None:
        self._rows = rows
        self._since = since

    @classmethod
    def read(cls, tasks: Sequence[ScheduledTask], now: datetime) -> History:
        """The history of ``tasks`` whose kind makes up what was missed, from as far
        back as each may look at ``now`` or later (``compensate_max_age_seconds``)."""
        since: dict[int, datetime] = {}
        for task in tasks:
            try:
                policy = kinds.policy(task.kind)
            except UnknownKind:
                continue  # its plan fails on its own (``check_plannable``)
            if policy.missed == "compensate" and task.pk is not None:
                since[task.pk] = now - timedelta(seconds=policy.compensate_max_age_seconds)
        rows: dict[int, list[HistoryRow]] = {pk: [] for pk in since}
        if since:
            found = _history(TaskRun.objects.filter(task_id__in=list(since)), min(since.values()))
            for task_id, *row in found.values_list("task_id", *_HISTORY):
                rows[task_id].append(cast("HistoryRow", tuple(row)))
        return cls(rows, since)

    def of(self, task: ScheduledTask, since: datetime) -> list[HistoryRow] | None:
        """``task``'s rows from ``since``; None when they were not read (or not from
        that far back): the caller reads them itself."""
        if task.pk not in self._rows or since < self._since[task.pk]:
            return None
        return [row for row in self._rows[task.pk] if row[0] >= since]


def lost_occurrences(
    task: ScheduledTask, since: datetime, before: datetime, *, history: History | None = None
) -> list[datetime]:
    """Occurrences in [``since``, ``before``) that no message went out for and no
    make-up covers yet (none under their key but a cancelled one): their run ended
    for good without sending (``failed``, ``expired``: by status name) or was
    skipped as missed (downtime, a pause, an error). A make-up run's own failure is
    not made up again, nor a run made on request's: it is no occurrence. Reads the
    task's runs, unless ``history`` holds them."""
    if task.pk is None:
        return []
    found = history.of(task, since) if history is not None else None
    if found is None:
        found = list(_history(task.runs.all(), since, before))
    rows = [row for row in found if row[0] < before]
    # A make-up covers its occurrence unless it was cancelled before it went (a
    # schedule change): the occurrence is then owed again.
    covered = {key for _, makeup, key, status in rows if makeup and status != "cancelled"}
    return sorted(
        o
        for o, makeup, _, _ in rows
        if not makeup and f"{task.ledger_key(o)}{MAKEUP_SUFFIX}" not in covered
    )
