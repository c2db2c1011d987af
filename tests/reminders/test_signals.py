"""The engine's signals: after commit, to every receiver, a receiver's error kept from
the engine."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.db import transaction

from reminders import signals
from reminders.models import TaskRun
from tests.support.jobs import tick

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def failing_receiver():
    def explode(sender: Any, **kwargs: Any) -> None:
        raise RuntimeError("the alert channel is down")

    signals.run_sent.connect(explode, weak=False)
    yield explode
    signals.run_sent.disconnect(explode)


def test_a_receiver_that_raises_stops_neither_the_send_nor_the_other_receivers(
    make_task, outbox, received, failing_receiver, caplog
):
    tasks = [make_task() for _ in range(3)]
    with caplog.at_level(logging.ERROR, logger="reminders.signals"):
        assert tick() == 3
    assert len(outbox) == 3
    assert set(TaskRun.objects.values_list("status", flat=True)) == {"sent"}
    # The receiver connected before the failing one, and any after it, heard every run.
    assert sorted(pk for name, pk, _ in received if name == "run_sent") == sorted(
        run.pk for run in TaskRun.objects.filter(task__in=tasks)
    )
    failures = [r for r in caplog.records if r.name == "reminders.signals"]
    assert len(failures) == 3
    assert "explode" in failures[0].getMessage()
    assert failures[0].exc_info is not None


def test_nothing_is_sent_for_a_transaction_rolled_back(received, make_task):
    task = make_task()
    with pytest.raises(RuntimeError), transaction.atomic():
        signals.after_commit(signals.task_error, type(task), task=task, code="x", message="y")
        raise RuntimeError("roll back")
    assert received == []
    with transaction.atomic():
        signals.after_commit(signals.task_error, type(task), task=task, code="x", message="y")
        assert received == []  # not before the commit
    assert received == [("task_error", task.pk, task.status)]
