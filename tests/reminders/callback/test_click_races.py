"""Races on real transactions (PostgreSQL and MariaDB). Two clicks: "I'll take it" on
two alerts of one inquiry at once. The first is held inside its transaction, its take
recorded but not committed, while the second comes: one takes the inquiry on, the other
is held, whatever the order. A click and a recall of its card at once: the click waits
for the recall, and brings nothing back."""

from __future__ import annotations

import time

import pytest
from django.utils import timezone

from reminders import api
from reminders.callback.events import TemplateCardEvent
from reminders.engine import planning
from reminders.engine import recall as recalling
from reminders.intake import clicks
from reminders.models import RunAction, ScheduledTask, SendLog, TaskRun
from reminders.models.acting import SNOOZE, card_id
from tests.crm.models import Inquiry
from tests.reminders.callback.test_card_updates import cards_channel, delivered
from tests.reminders.callback.test_view import callback_settings
from tests.support.locks import Paused, Worker, require_row_locks, statement

pytestmark = pytest.mark.django_db(transaction=True)
__all__ = ["callback_settings", "cards_channel"]


def sent(task: ScheduledTask) -> TaskRun:
    run = planning.new_run(task, timezone.now().replace(microsecond=0))
    run.status, run.finished_at = TaskRun.Status.SENT, timezone.now()
    run.save()
    return run


def take(run: TaskRun, member: str, nonce: str, key: str = "take") -> clicks.Applied:
    return press(card_id(run), member, key, nonce)


def press(task_id: str, member: str, key: str, nonce: str) -> clicks.Applied:
    """``member`` clicks ``key`` on the card ``task_id``, as the callback applies it."""
    event = TemplateCardEvent(
        to_user_name="wwcorp0001",
        from_user_name=member,
        create_time=int(time.time()),
        agent_id=1000002,
        event_key=key,
        task_id=task_id,
        card_type="button_interaction",
        response_code="",
    )
    return clicks.apply(event, nonce=nonce, timestamp=int(time.time()))


def test_take__on_two_alerts_of_one_inquiry_at_once_one_takes_it_the_other_is_held() -> None:
    require_row_locks()
    first, escalation = api.schedule_inquiry_timeout(
        "alice",
        arrived_at=timezone.now(),
        minutes=30,
        about=Inquiry.objects.create(subject="500 units, price?"),
        escalate_to="bob",
        escalate_after_minutes=30,
    )
    original, escalated = sent(first), sent(escalation)
    alice = Paused(lambda: take(original, "alice", "1"), after=statement("INSERT", "runaction"))
    alice.hold()

    bob = Worker(lambda: take(escalated, "bob", "2"))
    bob.start()
    assert bob.blocked_or_done() == "blocked"  # on the inquiry's lock alice holds
    alice.resume()

    assert alice.outcome().outcome == clicks.Outcome.ACTED
    assert bob.outcome().outcome == clicks.Outcome.ACTED
    held = dict(RunAction.objects.values_list("member", "held_by"))
    assert held == {"alice": "", "bob": "alice"}


# The callback takes the channel's clicks: its follow-ups go as cards with buttons.
@pytest.mark.usefixtures("callback_settings", "cards_channel")
def test_snooze__clicked_while_its_card_is_recalled_waits_and_brings_nothing_back() -> None:
    require_row_locks()
    run = delivered(recipient="alice")
    log = SendLog.objects.get(run=run)
    # The recall has marked the row and looked for what the card would still cause
    # (nothing yet), and has not committed, when the click comes.
    ops = Paused(
        lambda: recalling.recall(log, by="ops", reason="wrong customer"),
        after=statement("SELECT", "reminders_runaction"),
    )
    ops.hold()

    alice = Worker(lambda: take(run, "alice", "1", key=SNOOZE))
    alice.start()
    assert alice.blocked_or_done() == "blocked"  # on the send log's row the recall marked
    ops.resume()

    assert ops.outcome().recalled_at is not None
    assert alice.outcome().outcome == clicks.Outcome.RECALLED
    assert not RunAction.objects.exists()
    assert list(TaskRun.objects.filter(task_id=run.task_id).values_list("status", flat=True)) == [
        TaskRun.Status.SENT
    ]
