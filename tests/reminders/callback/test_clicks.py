"""What a click does (``intake.clicks``): who may click a card, what "I'll take it" holds
for the whole inquiry, and what a snooze that cannot happen says on its card; and what a
recall (``engine.recall``) ends of what a click set going.

The cards go out for real through the engine on a memory channel that holds WeCom's
rules, and the clicks come in signed and encrypted through the callback URL."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.test import Client, TestCase
from django.urls import reverse
from django.utils import timezone

from reminders import api, preferences, signals
from reminders.engine import actions, announce
from reminders.engine import recall as recalling
from reminders.models import CallbackNonce, RunAction, ScheduledTask, SendLog, TaskRun
from reminders.models.acting import card_id
from reminders.senders.memory import MemorySender
from tests.crm.models import Inquiry
from tests.reminders.callback.test_card_updates import (
    cards_channel,
    delivered,
    escalated_inquiry,
    update_cards,
)
from tests.reminders.callback.test_view import callback_settings, event_xml, post
from tests.support.jobs import tick

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("callback_settings", "cards_channel")]
__all__ = ["callback_settings", "cards_channel"]


def click_as(client: Client, run: TaskRun, member: str, key: str = "done", **sealed: Any) -> Any:
    """A click on ``run``'s card by ``member``, as WeCom posts it; the response."""
    code = MemorySender.click_code(card_id(run))
    xml = event_xml(
        run, FromUserName=member, EventKey=key, ResponseCode=code, CreateTime=str(int(time.time()))
    )
    return post(client, xml, **sealed)


# --- Who may click: the member the card went to ------------------------------------------


def test_click__by_the_member_the_card_went_to_acts_though_the_task_now_names_another(
    client: Client,
) -> None:
    run = delivered(recipient="alice", key="followup:7")
    # The CRM hands the follow-up to carol: alice's card is still alice's.
    ScheduledTask.objects.filter(pk=run.task_id).update(recipient="carol")

    assert click_as(client, run, "carol").status_code == 403
    assert click_as(client, run, "alice").content == b"success"

    assert RunAction.objects.get(run=run).member == "alice"
    update_cards()
    assert MemorySender.card_updates == [("alice", card_id(run), "Done by alice")]


def test_click__member_ids_are_compared_as_wecom_does_whatever_their_case(client: Client) -> None:
    run = delivered(recipient="Alice.Wang")

    assert click_as(client, run, "alice.wang").content == b"success"

    assert RunAction.objects.get(run=run).action == "done"


def test_a_refused_click__wecoms_retry_of_the_same_request_is_no_replay(client: Client) -> None:
    run = delivered(recipient="alice")
    # The reply to the send was lost: the run is in doubt when its card is clicked, and
    # the click is refused (404) as one on no sent run of ours.
    TaskRun.objects.filter(pk=run.pk).update(status=TaskRun.Status.UNKNOWN)
    request = {"nonce": "73107310", "timestamp": str(int(time.time()))}
    assert click_as(client, run, "alice", **request).status_code == 404
    assert not CallbackNonce.objects.exists()

    # WeCom got no success and sends the same request again, once a retry of the run
    # found it delivered.
    TaskRun.objects.filter(pk=run.pk).update(status=TaskRun.Status.SENT)
    assert click_as(client, run, "alice", **request).content == b"success"
    assert RunAction.objects.get(run=run).member == "alice"
    # A replay of the request that acted is one.
    assert click_as(client, run, "alice", **request).status_code == 403


def test_card_update__goes_to_the_member_the_card_went_to(client: Client) -> None:
    run = delivered(recipient="alice")
    assert click_as(client, run, "alice").content == b"success"
    ScheduledTask.objects.filter(pk=run.task_id).update(recipient="carol")
    assert SendLog.objects.get(run=run).recipient == "alice"

    update_cards()

    assert RunAction.objects.get(run=run).card_state == "updated"
    assert MemorySender.card_updates == [("alice", card_id(run), "Done by alice")]


def test_click__on_a_run_sent_before_now__still_checks_the_ledgers_recipient(
    client: Client,
) -> None:
    run = delivered(recipient="alice")
    SendLog.objects.filter(run=run).update(recipient="bob")  # as the ledger recorded it

    assert click_as(client, run, "alice").status_code == 403
    assert click_as(client, run, "BOB").content == b"success"


# --- A recall ends what the message would still cause -------------------------------------


def test_recall__cancels_the_reminder_a_snooze_of_its_card_made(client: Client) -> None:
    run = delivered(recipient="alice")
    assert click_as(client, run, "alice", "snooze_1h").content == b"success"
    later = RunAction.objects.get(run=run).follow_up
    assert later is not None

    log = recalling.recall(SendLog.objects.get(run=run), by="ops", reason="wrong customer")

    later.refresh_from_db()
    assert later.status == TaskRun.Status.CANCELLED
    assert "recalled" in later.error_message
    # An hour later, nothing comes back.
    MemorySender.outbox.clear()
    assert tick(now=timezone.now() + timedelta(minutes=61)) == 0
    assert MemorySender.outbox == []
    # The send log says what the recall cancelled with it.
    assert "the reminder its snooze made" in log.recall_cancelled
    assert "the reminder its snooze made" in SendLog.objects.get(pk=log.pk).recall_cancelled


def test_recall__cancels_its_cards_pending_update(client: Client) -> None:
    run = delivered(recipient="alice")
    assert click_as(client, run, "alice").content == b"success"

    log = recalling.recall(SendLog.objects.get(run=run), by="ops", reason="wrong customer")

    action = RunAction.objects.get(run=run)
    assert action.card_state == RunAction.CardState.FAILED
    assert "recalled" in action.card_detail
    assert update_cards() == [] and MemorySender.card_updates == []
    assert "its card's update" in log.recall_cancelled


def test_recall__of_a_card_nobody_clicked_cancels_nothing_and_says_nothing(client: Client) -> None:
    run = delivered(recipient="alice")

    log = recalling.recall(SendLog.objects.get(run=run), by="ops", reason="wrong customer")

    assert log.recall_cancelled == ""
    assert recalling.still_to_come(log) == []


def test_recall__a_snooze_already_sent_is_a_message_of_its_own_and_stays(client: Client) -> None:
    run = delivered(recipient="alice")
    assert click_as(client, run, "alice", "snooze_1h").content == b"success"
    assert tick(now=timezone.now() + timedelta(minutes=61)) == 1
    later = RunAction.objects.get(run=run).follow_up
    assert later is not None

    log = recalling.recall(SendLog.objects.get(run=run), by="ops", reason="wrong customer")

    later.refresh_from_db()
    assert later.status == TaskRun.Status.SENT
    assert "snooze" not in log.recall_cancelled


def test_click__on_a_card_recalled_already_does_nothing_and_is_refused(client: Client) -> None:
    run = delivered(recipient="alice")
    # A click made before the recall, with the response code WeCom gave it then...
    code = MemorySender.click_code(card_id(run))
    xml = event_xml(
        run, FromUserName="alice", EventKey="snooze_1h", ResponseCode=code, CreateTime="1"
    )
    log = recalling.recall(SendLog.objects.get(run=run), by="ops", reason="wrong customer")
    assert log.recalled_at is not None

    # ... that reaches us after it: WeCom's retry, its first answer lost.
    response = post(client, xml)

    assert response.status_code == 410
    assert not RunAction.objects.exists()
    assert not CallbackNonce.objects.exists()
    # Nothing comes back an hour later.
    MemorySender.outbox.clear()
    assert tick(now=timezone.now() + timedelta(minutes=61)) == 0
    assert MemorySender.outbox == []


def test_recall_page__says_what_the_recall_will_cancel_and_the_send_log_what_it_did(
    client: Client, admin_client: Client
) -> None:
    run = delivered(recipient="alice", tz="Asia/Shanghai")
    assert click_as(client, run, "alice", "snooze_1h").content == b"success"
    later = RunAction.objects.get(run=run).follow_up
    assert later is not None
    due = later.due_at.astimezone(ZoneInfo("Asia/Shanghai"))
    log = SendLog.objects.get(run=run)
    page = reverse("admin:reminders_sendlog_recall", args=[log.pk])

    shown = admin_client.get(page).content.decode()

    assert f"the reminder its snooze made, due {due:%Y-%m-%d %H:%M}" in shown
    assert "its card&#x27;s update" in shown
    assert "Recalling it also cancels" in shown

    admin_client.post(page, {"post": "yes", "reason": "wrong customer"})
    row = admin_client.get(reverse("admin:reminders_sendlog_change", args=[log.pk]))
    assert "the reminder its snooze made" in row.content.decode()
    later.refresh_from_db()
    assert later.status == TaskRun.Status.CANCELLED


# --- "I'll take it" holds the whole inquiry ------------------------------------------------


def sent_runs(first: ScheduledTask, escalation: ScheduledTask) -> tuple[TaskRun, TaskRun]:
    """The inquiry's alert to alice and its escalation to bob, both sent now."""
    assert tick() == 2
    return (
        TaskRun.objects.get(task=first, status=TaskRun.Status.SENT),
        TaskRun.objects.get(task=escalation, status=TaskRun.Status.SENT),
    )


@pytest.mark.parametrize("later", ["take", "done"])
def test_take__no_other_alert_of_the_inquiry_can_then_be_taken_or_done(
    client: Client, later: str
) -> None:
    original, escalated = sent_runs(*escalated_inquiry())
    told: list[tuple[int, str, str]] = []

    def receiver(sender: type, run: TaskRun, action: str, member: str, **kwargs: Any) -> None:
        told.append((run.pk, action, member))

    assert click_as(client, escalated, "bob", "take").content == b"success"
    assert click_as(client, original, "alice", later).content == b"success"  # WeCom's answer

    refused = RunAction.objects.get(run=original)
    assert (refused.action, refused.member, refused.held_by) == (later, "alice", "bob")
    assert RunAction.objects.get(run=escalated).held_by == ""
    # Bob's take told alice, the owner, once; her click did nothing: the CRM hears of bob's.
    assert ScheduledTask.objects.filter(kind="inquiry_taken").count() == 1
    signals.run_acted.connect(receiver)
    try:
        with TestCase.captureOnCommitCallbacks(execute=True):
            announce.announce()
    finally:
        signals.run_acted.disconnect(receiver)
    assert told == [(escalated.pk, "take", "bob")]
    # Both cards say who has it.
    update_cards()
    assert sorted(MemorySender.card_updates) == [
        ("alice", card_id(original), "Taken by bob"),
        ("bob", card_id(escalated), "Taken by bob"),
    ]


@pytest.mark.parametrize("page", ["list", "run"])
def test_admin__a_held_click_reads_held_with_who_had_it_and_nothing_done(
    client: Client, admin_client: Client, page: str
) -> None:
    original, escalated = sent_runs(*escalated_inquiry())
    click_as(client, escalated, "bob", "take")
    click_as(client, original, "alice", "done")
    url = (
        reverse("admin:reminders_taskrun_changelist")
        if page == "list"
        else reverse("admin:reminders_taskrun_change", args=[original.pk])
    )
    shown = admin_client.get(url).content.decode()
    assert "alice clicked done" in shown
    assert "held: bob had taken the inquiry on; nothing was done" in shown
    assert "done by alice" not in shown
    if page == "list":  # bob's own take, beside it, reads as what it did
        assert "taken on by bob" in shown


def test_take__a_snoozed_copy_of_the_alert_can_no_longer_be_taken(client: Client) -> None:
    first, escalation = escalated_inquiry(after=90)
    assert tick() == 1
    original = TaskRun.objects.get(task=first, status=TaskRun.Status.SENT)
    assert click_as(client, original, "alice", "snooze_1h").content == b"success"
    assert tick(now=timezone.now() + timedelta(minutes=61)) == 1  # the snoozed copy
    copy = TaskRun.objects.get(task=first, status=TaskRun.Status.SENT, is_manual=True)
    assert tick(now=timezone.now() + timedelta(minutes=91)) == 1  # the escalation
    escalated = TaskRun.objects.get(task=escalation, status=TaskRun.Status.SENT)

    assert click_as(client, escalated, "bob", "take").content == b"success"
    assert click_as(client, copy, "alice", "take").content == b"success"

    assert RunAction.objects.get(run=copy).held_by == "bob"


def test_done_on_a_follow_up__leaves_the_snooze_of_its_earlier_occurrence(client: Client) -> None:
    monday = delivered(recipient="alice", key="followup:7")
    tuesday, _ = actions.run_now(monday.task)  # the task's message again, another card
    assert tick() == 1
    assert click_as(client, monday, "alice", "snooze_1h").content == b"success"

    assert click_as(client, tuesday, "alice", "done").content == b"success"

    later = RunAction.objects.get(run=monday).follow_up
    assert later is not None and later.status == TaskRun.Status.SCHEDULED


@pytest.mark.parametrize("key", ["take", "done"])
def test_done_or_take_on_the_escalation__ends_the_originals_pending_snooze(
    client: Client, key: str
) -> None:
    original, escalated = sent_runs(*escalated_inquiry())
    assert click_as(client, original, "alice", "snooze_1h").content == b"success"
    later = RunAction.objects.get(run=original).follow_up
    assert later is not None and later.status == TaskRun.Status.SCHEDULED

    assert click_as(client, escalated, "bob", key).content == b"success"

    later.refresh_from_db()
    assert later.status == TaskRun.Status.CANCELLED
    tick()  # bob's take tells alice, the owner, now
    assert tick(now=timezone.now() + timedelta(minutes=61)) == 0


def test_schedule_inquiry_timeout__again_does_not_plan_an_escalation_a_click_cancelled(
    client: Client,
) -> None:
    first, escalation = escalated_inquiry(after=30)
    assert tick() == 1
    original = TaskRun.objects.get(task=first, status=TaskRun.Status.SENT)
    assert click_as(client, original, "alice", "take").content == b"success"
    escalation.refresh_from_db()
    assert escalation.status == ScheduledTask.Status.CANCELLED

    # The CRM schedules the inquiry's timeout again (its own retry, a field changed).
    again = schedule_again(first)

    assert [task.pk for task in again] == [first.pk, escalation.pk]
    escalation.refresh_from_db()
    assert escalation.status == ScheduledTask.Status.CANCELLED
    assert not TaskRun.objects.filter(task=escalation).exclude(status="cancelled").exists()

    # Unless it says so.
    schedule_again(first, reopen=True)
    escalation.refresh_from_db()
    assert escalation.status == ScheduledTask.Status.ACTIVE


def test_schedule_inquiry_timeout__again_after_a_cancel_for_plans_the_escalation_again() -> None:
    first, escalation = escalated_inquiry(after=30)
    api.cancel_for(Inquiry.objects.get(pk=first.object_id))

    schedule_again(first)

    escalation.refresh_from_db()
    assert escalation.status == ScheduledTask.Status.ACTIVE


def test_schedule_inquiry_timeout__an_escalation_added_after_a_take_is_planned(
    client: Client,
) -> None:
    inquiry = Inquiry.objects.create(subject="500 units, price?")
    arrived = timezone.now() - timedelta(minutes=31)
    [first] = api.schedule_inquiry_timeout(
        "alice", arrived, minutes=30, about=inquiry, payload={"customer": "ACME"}
    )
    ScheduledTask.objects.filter(pk=first.pk).update(channel="memory_cards")
    assert tick() == 1
    original = TaskRun.objects.get(task=first, status=TaskRun.Status.SENT)
    assert click_as(client, original, "alice", "take").content == b"success"

    again, escalation = schedule_again(first)

    assert again.pk == first.pk
    assert escalation.key == f"{first.key}:escalation"
    assert escalation.status == ScheduledTask.Status.ACTIVE


def schedule_again(first: ScheduledTask, **options: Any) -> list[ScheduledTask]:
    """``api.schedule_inquiry_timeout`` as ``escalated_inquiry`` called it, again."""
    return api.schedule_inquiry_timeout(
        "alice",
        arrived_at=timezone.now() - timedelta(minutes=31),
        minutes=30,
        about=Inquiry.objects.get(pk=first.object_id),
        escalate_to="bob",
        escalate_after_minutes=30,
        payload={"customer": "ACME"},
        **options,
    )


# --- A snooze says on its card when it comes again, or that it will not -------------------


def test_snooze__of_a_paused_task_makes_no_reminder_and_the_card_says_so(client: Client) -> None:
    run = delivered(recipient="alice")
    ScheduledTask.objects.filter(pk=run.task_id).update(status=ScheduledTask.Status.PAUSED)

    assert click_as(client, run, "alice", "snooze_1h").content == b"success"

    assert RunAction.objects.get(run=run).follow_up is None
    assert not TaskRun.objects.filter(task_id=run.task_id, is_manual=True).exists()
    update_cards()
    assert MemorySender.card_updates == [("alice", card_id(run), "Not possible: paused")]


def test_snooze__of_a_cancelled_task_makes_no_reminder_and_the_card_says_so(
    client: Client,
) -> None:
    run = delivered(recipient="alice", key="followup:8")
    assert api.cancel("followup:8")

    assert click_as(client, run, "alice", "snooze_1h").content == b"success"

    assert RunAction.objects.get(run=run).follow_up is None
    assert not TaskRun.objects.filter(task_id=run.task_id, is_manual=True).exists()
    update_cards()
    assert MemorySender.card_updates == [("alice", card_id(run), "Task cancelled")]


def test_snooze__into_quiet_hours_comes_at_their_end_and_the_card_says_when(
    client: Client,
) -> None:
    shanghai = ZoneInfo("Asia/Shanghai")
    run = delivered(recipient="alice", tz="Asia/Shanghai")
    now = timezone.now().astimezone(shanghai)
    start, end = now + timedelta(minutes=30), now + timedelta(hours=3)
    preferences.set_quiet_hours("alice", f"{start:%H:%M}-{end:%H:%M}", by="ops")

    assert click_as(client, run, "alice", "snooze_1h").content == b"success"

    later = RunAction.objects.get(run=run).follow_up
    assert later is not None
    due = later.due_at.astimezone(shanghai)
    assert end.replace(second=0, microsecond=0) <= due <= end + timedelta(minutes=11)
    update_cards()
    assert MemorySender.card_updates == [("alice", card_id(run), f"Again at {due:%H:%M}")]
    # It goes then, not an hour after the click.
    assert tick(now=now + timedelta(minutes=61)) == 0
    assert tick(now=later.due_at) == 1


def test_snooze__cancelled_before_its_card_was_updated_never_shows_a_time(
    client: Client,
) -> None:
    original, escalated = sent_runs(*escalated_inquiry())
    assert click_as(client, original, "alice", "snooze_1h").content == b"success"
    assert click_as(client, escalated, "bob", "done").content == b"success"

    update_cards()

    assert ("alice", card_id(original), "Reminder cancelled") in MemorySender.card_updates
