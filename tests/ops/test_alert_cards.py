"""Ops act on alerts from WeCom: an alert reaches each named member as a card with
buttons (``ops.alert_cards.WeComCards``); a click comes back signed and encrypted
through reminders' callback URL and acts as the member's Django user, with that user's
permissions (``ops.card_clicks``); the card is then replaced, by the engine's card job,
with one saying what was done.

The cards go out through a memory channel that holds WeCom's rules (a card's task_id
once per app, a response code once, within 72 hours, for the card's recipient), and the
runs fail and are retried for real through the engine."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Group
from django.db import connection
from django.test import Client

from ops.alert_cards import HANDLED, MUTE, RETRY
from ops.models import (
    Alert,
    AlertAction,
    AlertCard,
    AlertDelivery,
    AlertEvent,
    AlertMute,
    WeComMember,
)
from ops.roles import OPERATOR, VIEWER, sync_roles
from reminders.engine import actions, wake
from reminders.engine import cards as card_job
from reminders.exceptions import PermanentSendError
from reminders.models import ScheduledTask, TaskRun
from reminders.senders.memory import MemorySender
from tests.ops.conftest import Clock
from tests.reminders.callback.test_view import callback_settings, event_xml, post
from tests.support.jobs import run_queued, tick

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("callback_settings", "ops_cards")]
__all__ = ["callback_settings"]

CHANNEL = "ops_cards"
ADMIN = "https://crm.example/admin/"
FAILED = PermanentSendError("invalid user", code="81013")


@pytest.fixture
def ops_cards(settings: Any, django_user_model: Any) -> None:
    """Alert cards to alice (an operator, linked by ops' own link), bob (a viewer,
    whose username is his member id) and carol (nobody's member id)."""
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        CHANNEL: {"BACKEND": "reminders.senders.memory.MemorySender", "OPTIONS": {"cards": True}},
    }
    settings.OPS_ALERT_CHANNELS = {
        "on_call": {
            "BACKEND": "ops.alert_cards.WeComCards",
            "OPTIONS": {"channel": CHANNEL, "recipients": ["alice", "bob", "carol"]},
        }
    }
    settings.OPS_ADMIN_URL = ADMIN
    sync_roles()
    alice = django_user_model.objects.create_user("alice.wang", is_staff=True)
    alice.groups.add(Group.objects.get(name=OPERATOR))
    WeComMember.objects.create(user=alice, member="Alice")
    bob = django_user_model.objects.create_user("bob", is_staff=True)
    bob.groups.add(Group.objects.get(name=VIEWER))


def failed_wave(make_task: Callable[..., ScheduledTask], count: int = 3) -> list[TaskRun]:
    """``count`` follow-ups that failed for good, each told to ops."""
    tasks = [make_task(channel="memory") for _ in range(count)]
    MemorySender.script[:] = [FAILED] * count
    tick()
    runs = list(TaskRun.objects.filter(task__in=tasks, status=TaskRun.Status.FAILED))
    assert len(runs) == count
    return runs


def alert_cards(clock: Clock) -> dict[str, dict[str, Any]]:
    """The alert step run once: the cards it sent, by member."""
    clock.step()
    return {m.recipient: m.body for m in MemorySender.outbox if m.msgtype == "template_card"}


def click(client: Client, card: dict[str, Any], member: str, key: str, **values: str) -> Any:
    """``member`` clicks ``key`` on ``card``, as WeCom posts it (a response code of its
    own, a fresh nonce)."""
    code = MemorySender.click_code(card["task_id"])
    xml = event_xml(
        None,
        FromUserName=member,
        EventKey=key,
        TaskId=card["task_id"],
        ResponseCode=code,
        CreateTime=str(int(time.time())),
        **values,
    )
    return post(client, xml)


def update_cards(now: datetime | None = None) -> list[int]:
    """One scheduler's claim of cards to update, and its jobs run."""
    claimed = card_job.claim(now)
    run_queued()
    return claimed


def replaced(member: str) -> dict[str, Any]:
    [card] = [card for to, _id, card in MemorySender.card_replacements if to == member]
    return card


def keys(card: dict[str, Any]) -> list[str]:
    return [button.get("key") or button["url"] for button in card["button_list"]]


# -- the card -------------------------------------------------------------------------


def test_an_alert__reaches_each_member_as_a_card_saying_what_happened(make_task, clock) -> None:
    runs = failed_wave(make_task)
    cards = alert_cards(clock)
    assert sorted(cards) == ["alice", "bob", "carol"]
    card = cards["alice"]
    assert card["main_title"]["title"].startswith("[reminders]")
    assert "invalid user" in card["sub_title_text"]
    facts = {line["keyname"]: line["value"] for line in card["horizontal_content_list"]}
    assert facts["Kind"] == "Follow-up reminder" and facts["Channel"] == "memory"
    assert facts["Count"] == "3"
    ids = ",".join(str(run.pk) for run in sorted(runs, key=lambda run: run.pk))
    assert keys(card) == [
        RETRY,
        HANDLED,
        MUTE,
        f"{ADMIN}reminders/taskrun/?id__in={ids.replace(',', '%2C')}",
    ]
    assert [button["text"] for button in card["button_list"]][:1] == ["Retry 3 failed"]
    # One card per member, each its own task_id, recorded with the code WeCom gave.
    sent = AlertCard.objects.order_by("member")
    assert [c.member for c in sent] == ["alice", "bob", "carol"]
    assert len({c.task_id for c in sent}) == 3 and all(c.response_code for c in sent)
    assert AlertDelivery.objects.get().status == AlertDelivery.Status.SENT


def test_a_delivery_tried_again__sends_only_the_cards_that_did_not_go(make_task, clock) -> None:
    failed_wave(make_task)
    MemorySender.script[:] = [None, PermanentSendError("busy", code="45009")]  # bob's fails
    clock.step()
    delivery = AlertDelivery.objects.get()
    assert delivery.status == AlertDelivery.Status.RETRYING and "bob" in delivery.error
    assert sorted(m.recipient for m in MemorySender.outbox if m.msgtype == "template_card") == [
        "alice",
        "carol",
    ]
    clock.step(60)
    sent = [m.recipient for m in MemorySender.outbox if m.msgtype == "template_card"]
    assert sorted(sent) == ["alice", "bob", "carol"]  # nobody twice
    assert AlertDelivery.objects.get().status == AlertDelivery.Status.SENT


# -- acting -------------------------------------------------------------------------


def test_retry__puts_the_runs_back_and_the_card_says_how_many_and_by_whom(
    client, make_task, clock
) -> None:
    runs = failed_wave(make_task)
    actions.cancel(runs[0].task)  # its rules refuse a run whose task is cancelled
    cards = alert_cards(clock)
    assert click(client, cards["alice"], "alice", RETRY).content == b"success"

    statuses = dict(TaskRun.objects.filter(pk__in=[r.pk for r in runs]).values_list("pk", "status"))
    assert statuses == {runs[0].pk: "failed", runs[1].pk: "retrying", runs[2].pk: "retrying"}
    action = AlertAction.objects.get()
    assert (action.outcome, action.username, action.user.username) == (
        "acted",
        "alice.wang",
        "alice.wang",
    )
    assert action.detail == "2 retried by alice.wang, 1 refused: its task is cancelled"
    assert action.source == "WeCom callback: corp wwcorp0001, app 1000002"
    assert tick() == 2  # the runs go
    assert TaskRun.objects.filter(status="sent").count() == 2
    # The card, replaced by a scheduler's job: what was done, and the admin's link only.
    assert update_cards() == [action.pk]
    card = replaced("alice")
    assert card["task_id"] == cards["alice"]["task_id"]
    assert card["sub_title_text"] == action.detail
    assert [button.get("type") for button in card["button_list"]] == [1]
    action.refresh_from_db()
    assert (action.card_state, action.card_detail) == ("updated", action.detail)
    # As the admin's own actions are: in the alert's history.
    entry = LogEntry.objects.get()
    assert entry.user.username == "alice.wang" and entry.object_id == str(action.alert_id)
    assert "WeCom member alice" in entry.change_message


def test_a_second_click_and_another_operator_s__change_nothing_and_say_who_acted(
    client, make_task, clock, django_user_model
) -> None:
    runs = failed_wave(make_task)
    carol = django_user_model.objects.create_user("carol", is_staff=True)
    carol.groups.add(Group.objects.get(name=OPERATOR))
    cards = alert_cards(clock)
    click(client, cards["alice"], "alice", MUTE)
    click(client, cards["alice"], "alice", RETRY)  # the same card again
    click(client, cards["carol"], "carol", HANDLED)  # another operator
    assert TaskRun.objects.filter(pk__in=[r.pk for r in runs], status="failed").count() == 3
    assert not TaskRun.objects.filter(handled_at__isnull=False).exists()
    assert Alert.objects.get().handled_at is None
    outcomes = list(AlertAction.objects.order_by("pk").values_list("member", "outcome", "detail"))
    muted = outcomes[0][2]
    assert muted.startswith("Muted until") and muted.endswith("by alice.wang")
    assert outcomes == [
        ("alice", "acted", muted),
        ("alice", "already", f"Already done: {muted}"),
        ("carol", "already", f"Already done: {muted}"),
    ]
    update_cards()
    assert replaced("carol")["sub_title_text"] == f"Already done: {muted}"


@pytest.mark.parametrize(
    ("member", "why"),
    [
        ("carol", "WeCom member carol is no active user's"),
        ("bob", "bob lacks the permission reminders.retry_taskrun"),
    ],
)
def test_a_member_who_may_not__is_declined_nothing_changes_and_the_card_says_why(
    client, make_task, clock, member, why
) -> None:
    runs = failed_wave(make_task)
    cards = alert_cards(clock)
    assert click(client, cards[member], member, RETRY).content == b"success"
    assert TaskRun.objects.filter(pk__in=[r.pk for r in runs], status="failed").count() == 3
    action = AlertAction.objects.get()
    assert action.outcome == "declined" and action.acted_on is None
    assert action.detail.startswith(f"Not done: {why}")
    assert not LogEntry.objects.exists()
    update_cards()
    assert replaced(member)["sub_title_text"].startswith(f"Not done: {why}")
    # The alert is still to act on: an operator's click acts.
    click(client, cards["alice"], "alice", RETRY)
    assert AlertAction.objects.get(outcome="acted").member == "alice"


def test_an_inactive_user__is_declined(client, make_task, clock, django_user_model) -> None:
    failed_wave(make_task)
    django_user_model.objects.filter(username="alice.wang").update(is_active=False)
    cards = alert_cards(clock)
    click(client, cards["alice"], "alice", HANDLED)
    assert AlertAction.objects.get().outcome == "declined"
    assert Alert.objects.get().handled_at is None


def test_the_crm_s_mapping__a_member_id_field_of_the_user_finds_the_user(
    client, make_task, clock, django_user_model
) -> None:
    """Without ops' own link, the CRM's user-to-member mapping: bob's username."""
    failed_wave(make_task)
    django_user_model.objects.get(username="bob").groups.add(Group.objects.get(name=OPERATOR))
    cards = alert_cards(clock)
    click(client, cards["bob"], "BOB", HANDLED)  # WeCom's ids, whatever their case
    action = AlertAction.objects.get()
    assert (action.outcome, action.username) == ("acted", "bob")


def test_a_replayed_click__is_refused_and_changes_nothing(client, make_task, clock) -> None:
    failed_wave(make_task)
    cards = alert_cards(clock)
    code = MemorySender.click_code(cards["bob"]["task_id"])
    xml = event_xml(
        None, FromUserName="bob", EventKey=RETRY, TaskId=cards["bob"]["task_id"], ResponseCode=code
    )
    assert post(client, xml, nonce="same-nonce").content == b"success"
    again = post(client, xml, nonce="same-nonce")
    assert (again.status_code, again.content) == (403, b"replayed")
    assert AlertAction.objects.count() == 1


def test_a_click_on_another_member_s_card__403_and_nothing_kept(client, make_task, clock) -> None:
    failed_wave(make_task)
    cards = alert_cards(clock)
    answer = click(client, cards["bob"], "alice", RETRY)
    assert (answer.status_code, answer.content) == (403, b"not the member the card went to")
    assert not AlertAction.objects.exists()
    # Nothing kept, the nonce neither: the same request is judged again, not a replay.


def test_a_card_we_never_sent__404(client) -> None:
    xml = event_xml(None, FromUserName="alice", EventKey=RETRY, TaskId="ops-a999-0123456789")
    answer = post(client, xml)
    assert (answer.status_code, answer.content) == (404, b"unknown card")


def test_handled__marks_the_alert_and_its_runs_handled_by_the_user(
    client, make_task, clock
) -> None:
    runs = failed_wave(make_task)
    cards = alert_cards(clock)
    click(client, cards["alice"], "alice", HANDLED)
    alert = Alert.objects.get()
    assert alert.handled_by == "alice.wang" and alert.handled_at is not None
    handled = TaskRun.objects.filter(pk__in=[r.pk for r in runs]).values_list(
        "handled_by", flat=True
    )
    assert set(handled) == {"alice.wang"}
    assert AlertAction.objects.get().detail == "Handled by alice.wang (3 runs marked handled)"


def test_mute__holds_the_group_for_an_hour_then_its_events_go_together(
    client, make_task, clock
) -> None:
    failed_wave(make_task)
    cards = alert_cards(clock)
    click(client, cards["alice"], "alice", MUTE)
    mute = AlertMute.objects.get()
    assert mute.by == "alice.wang"
    failed_wave(make_task, 2)
    clock.step(3000)  # past the group's window, inside the mute
    assert Alert.objects.count() == 1
    clock.step(700)  # the mute over
    second = Alert.objects.order_by("seq").last()
    assert second is not None and second.seq == 2 and second.event_count == 2


def test_a_click_without_a_response_code__acts_and_leaves_the_card_as_it_is(
    client, make_task, clock
) -> None:
    failed_wave(make_task)
    cards = alert_cards(clock)
    xml = event_xml(
        None,
        FromUserName="alice",
        EventKey=HANDLED,
        TaskId=cards["alice"]["task_id"],
        ResponseCode="",
    )
    assert post(client, xml).content == b"success"
    action = AlertAction.objects.get()
    assert (action.outcome, action.card_state) == ("acted", "")
    assert update_cards() == []


# -- a group's later alerts -------------------------------------------------------------


def test_a_later_alert_of_the_group__updates_each_card_nobody_clicked_to_count_both(
    client, make_task, clock
) -> None:
    first = failed_wave(make_task)
    cards = alert_cards(clock)
    click(client, cards["bob"], "bob", RETRY)  # declined: bob's card says so
    later = failed_wave(make_task, 2)
    sent = len(MemorySender.outbox)
    clock.step(600)  # the group's window over: its next alert
    second = Alert.objects.get(seq=2)
    assert second.continues == Alert.objects.get(seq=1)
    # Alice's and carol's cards now count both alerts, and retry all five runs.
    for member in ("alice", "carol"):
        card = replaced(member)
        assert card["task_id"] == cards[member]["task_id"]
        facts = {line["keyname"]: line["value"] for line in card["horizontal_content_list"]}
        assert facts["Count"] == "5"
        assert card["main_title"]["title"].startswith("[reminders] 5 runs")
        assert card["button_list"][0]["text"] == "Retry 5 failed"
    # Bob clicked his: his code went to that click, so a new card reaches him.
    [new] = MemorySender.outbox[sent:]
    assert new.recipient == "bob" and new.body["task_id"] != cards["bob"]["task_id"]
    assert new.body["button_list"][0]["text"] == "Retry 5 failed"
    # A click on the first card acts on the whole chain.
    click(client, cards["alice"], "alice", RETRY)
    retried = TaskRun.objects.filter(pk__in=[r.pk for r in first + later], status="retrying")
    assert retried.count() == 5
    assert AlertAction.objects.get(outcome="acted").acted_on == second
    # ... and the chain is acted on: bob's new card changes nothing.
    assert click(client, new.body, "bob", HANDLED).content == b"success"
    assert AlertAction.objects.order_by("pk").last().outcome == "already"


def test_a_card_updated_once__the_next_alert_brings_a_new_card(make_task, clock) -> None:
    """WeCom's send gives one response code: a card's count is updated once."""
    failed_wave(make_task)
    cards = alert_cards(clock)
    failed_wave(make_task, 2)
    clock.step(600)
    sent = len(MemorySender.outbox)
    failed_wave(make_task, 1)
    clock.step(600)
    third = [m.body for m in MemorySender.outbox[sent:] if m.msgtype == "template_card"]
    assert len(third) == 3 and not {c["task_id"] for c in third} & {
        c["task_id"] for c in cards.values()
    }
    facts = {line["keyname"]: line["value"] for line in third[0]["horizontal_content_list"]}
    assert facts["Count"] == "6"  # the chain, three alerts
    assert len(MemorySender.card_replacements) == 3  # each first card updated once


def test_after_an_action__the_next_alert_starts_afresh_with_new_cards(
    client, make_task, clock
) -> None:
    failed_wave(make_task)
    cards = alert_cards(clock)
    click(client, cards["alice"], "alice", HANDLED)
    sent = len(MemorySender.outbox)
    failed_wave(make_task, 2)
    clock.step(600)
    assert Alert.objects.get(seq=2).continues is None
    fresh = [m.body for m in MemorySender.outbox[sent:] if m.msgtype == "template_card"]
    assert len(fresh) == 3
    facts = {line["keyname"]: line["value"] for line in fresh[0]["horizontal_content_list"]}
    assert facts["Count"] == "2"
    assert not MemorySender.card_replacements


def test_past_72_hours__the_next_alert_brings_new_cards(make_task, clock) -> None:
    failed_wave(make_task)
    alert_cards(clock)
    clock.step(72 * 3600)
    sent = len(MemorySender.outbox)
    failed_wave(make_task, 2)
    clock.step(1)
    assert Alert.objects.get(seq=2).continues is None
    assert len([m for m in MemorySender.outbox[sent:] if m.msgtype == "template_card"]) == 3
    assert not MemorySender.card_replacements


def test_an_alert_that_names_no_run__has_no_retry_and_links_to_itself(clock) -> None:
    AlertEvent.objects.record(
        "heartbeat_stale", occurred_at=clock.now, code="stale", message="Scheduler vm:1 stopped."
    )
    card = alert_cards(clock)["alice"]
    alert = Alert.objects.get()
    assert keys(card) == [HANDLED, MUTE, f"{ADMIN}ops/alert/{alert.pk}/change/"]
    facts = {line["keyname"] for line in card["horizontal_content_list"]}
    assert facts == {"Count", "Since"}  # no kind, no channel
    assert card["sub_title_text"] == "Scheduler vm:1 stopped."


def test_in_chinese__the_card_s_words_fit_wecom_s_lengths(
    client, make_task, clock, settings
) -> None:
    settings.OPS_ALERT_LANGUAGE = "zh-hans"
    failed_wave(make_task)
    cards = alert_cards(clock)  # a card WeCom would refuse raises, and is not sent
    card = cards["alice"]
    assert [button["text"] for button in card["button_list"]] == [
        "重试失败的 3 条",
        "标记已处理",
        "静默 1 小时",
        "在后台打开",
    ]
    click(client, card, "alice", RETRY)
    update_cards()
    assert replaced("alice")["sub_title_text"] == "alice.wang 重试了 3 条"


def member_id_from_email(user: Any) -> str:
    """A CRM's resolver (``REMINDERS_RECIPIENT_RESOLVER``): the member id is the
    e-mail's local part."""
    return str(user.email).partition("@")[0]


def test_the_crm_s_resolver__finds_the_staff_user_it_gives_the_member_id(
    client, make_task, clock, django_user_model, settings
) -> None:
    settings.REMINDERS_RECIPIENT_RESOLVER = f"{__name__}.member_id_from_email"
    failed_wave(make_task)
    carol = django_user_model.objects.create_user("c.li", email="Carol@crm.example", is_staff=True)
    carol.groups.add(Group.objects.get(name=OPERATOR))
    cards = alert_cards(clock)
    click(client, cards["carol"], "carol", HANDLED)
    action = AlertAction.objects.get()
    assert (action.outcome, action.username) == ("acted", "c.li")


def test_a_member_id_two_users_have__is_declined(
    client, make_task, clock, django_user_model, settings
) -> None:
    settings.REMINDERS_RECIPIENT_RESOLVER = f"{__name__}.member_id_from_email"
    failed_wave(make_task)
    for name in ("c.li", "c.liu"):
        user = django_user_model.objects.create_user(
            name, email=f"carol@{name}.example", is_staff=True
        )
        user.groups.add(Group.objects.get(name=OPERATOR))
    cards = alert_cards(clock)
    click(client, cards["carol"], "carol", HANDLED)
    action = AlertAction.objects.get()
    assert action.outcome == "declined"
    assert action.detail == "Not done: WeCom member carol is 2 users'."


def test_an_update_wecom_refuses__the_member_gets_a_new_card_and_the_code_is_not_tried_again(
    make_task, clock
) -> None:
    failed_wave(make_task)
    cards = alert_cards(clock)
    # Alice's send code is no longer good (spent by an update whose record was lost).
    AlertCard.objects.filter(member="alice").update(response_code="spent-already")
    sent = len(MemorySender.outbox)
    failed_wave(make_task, 2)
    clock.step(600)
    new = [m for m in MemorySender.outbox[sent:] if m.msgtype == "template_card"]
    assert [m.recipient for m in new] == ["alice"]
    assert new[0].body["task_id"] != cards["alice"]["task_id"]
    assert new[0].body["button_list"][0]["text"] == "Retry 5 failed"
    first = AlertCard.objects.get(member="alice", task_id=cards["alice"]["task_id"])
    assert first.code_spent_at is not None and first.shows is None
    assert sorted(to for to, _id, _card in MemorySender.card_replacements) == ["bob", "carol"]
    clock.step(600)  # a step later nothing is sent again to anyone
    assert len([m for m in MemorySender.outbox[sent:] if m.msgtype == "template_card"]) == 1


@pytest.mark.django_db(transaction=True)
def test_every_click_kept__wakes_the_schedulers_its_card_waits_for_no_tick(
    client, make_task, clock
) -> None:
    """A listening scheduler looks for cards to update only when woken (or every few
    seconds): an owner's clicks notify as a run's do, a second click's card too."""
    if connection.vendor != "postgresql":
        pytest.skip("only PostgreSQL notifies: elsewhere every tick looks for cards")
    failed_wave(make_task)
    cards = alert_cards(clock)
    sleeper = wake.Sleeper()
    try:
        assert sleeper.wait(0) is True  # listening from now on
        assert sleeper.wait(0.2) is False
        click(client, cards["alice"], "alice", MUTE)
        assert sleeper.wait(5) is True
        click(client, cards["bob"], "bob", RETRY)  # declined: the card says why
        assert sleeper.wait(5) is True
        click(client, cards["alice"], "alice", RETRY)  # already done: the card says so
        assert sleeper.wait(5) is True
    finally:
        sleeper.close()
