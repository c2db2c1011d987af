"""After a click: the card's buttons become "Done by alice" (``engine.cards``), once, by a
job a scheduler queued; and "I'll take it" tells the inquiry's owner.

The cards go out for real through the engine on a memory channel that holds WeCom's
rules (a response code once, within 72 hours, for the card's recipient), and the clicks
come in signed and encrypted through the callback URL."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any, ClassVar
from zoneinfo import ZoneInfo

import pytest
from django.test import Client
from django.utils import timezone

from reminders import api
from reminders.engine import cards
from reminders.models import RunAction, ScheduledTask, SendLog, TaskRun
from reminders.models.acting import card_id
from reminders.senders.memory import MemorySender
from tests.crm.models import Inquiry
from tests.reminders.callback.test_view import callback_settings, event_xml, post
from tests.support.jobs import queued, run_queued, tick

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("callback_settings", "cards_channel")]
__all__ = ["callback_settings"]

CHANNEL = "memory_cards"


@pytest.fixture
def cards_channel(settings: Any) -> None:
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        CHANNEL: {"BACKEND": "reminders.senders.memory.MemorySender", "OPTIONS": {"cards": True}},
    }


def delivered(kind: str = "follow_up", recipient: str = "alice", **schedule: Any) -> TaskRun:
    """A task's card, sent now through the engine on the cards channel."""
    schedule.setdefault("at", timezone.now())
    task = api.schedule(kind, recipient, channel=CHANNEL, **schedule)
    assert tick() == 1
    run = TaskRun.objects.get(task=task, status=TaskRun.Status.SENT)
    assert SendLog.objects.get(run=run).reply_detail["response_code"]  # as WeCom answers
    return run


def click(client: Client, run: TaskRun, key: str = "done", *, code: str | None = None) -> None:
    code = MemorySender.click_code(card_id(run)) if code is None else code
    xml = event_xml(run, EventKey=key, ResponseCode=code, CreateTime=str(int(time.time())))
    assert post(client, xml).content == b"success"


def update_cards(now: datetime | None = None) -> list[int]:
    """One scheduler's claim of cards to update (at ``now``), and its job run."""
    claimed = cards.claim(now)
    run_queued()
    return claimed


def test_done__the_card_says_done_by_whom_once_a_job_updated_it(client: Client) -> None:
    run = delivered()
    click(client, run)
    action = RunAction.objects.get(run=run)
    assert action.card_state == RunAction.CardState.PENDING
    assert MemorySender.card_updates == []  # never within WeCom's request
    assert update_cards() == [action.pk]
    assert MemorySender.card_updates == [("alice", card_id(run), "Done by alice")]
    action.refresh_from_db()
    assert (action.card_state, action.card_detail) == ("updated", "Done by alice")
    # Nothing more to do: the next tick queues no job.
    assert update_cards() == [] and len(MemorySender.card_updates) == 1


def test_words__in_the_tasks_language_and_a_long_member_id_is_cut(client: Client) -> None:
    member = "a-very-long-member-id-of-the-crm"
    run = delivered(recipient=member, payload={"lang": "zh-hans"})
    click(client, run)
    update_cards()
    [(_, _, words)] = MemorySender.card_updates
    assert words.endswith("已处理") and "…" in words and words.startswith("a-very")


def test_snooze__the_card_says_when_it_comes_again(client: Client) -> None:
    run = delivered(tz="Asia/Shanghai")
    click(client, run, "snooze_1h")
    update_cards()
    later = RunAction.objects.get(run=run).follow_up
    assert later is not None
    shanghai = later.due_at.astimezone(ZoneInfo("Asia/Shanghai"))
    assert MemorySender.card_updates[0][2] == f"Again at {shanghai:%H:%M}"


def test_a_crms_own_button__updates_no_card(client: Client) -> None:
    run = delivered()
    click(client, run, "call_back")
    action = RunAction.objects.get(run=run)
    assert action.card_state == ""
    assert update_cards() == [] and MemorySender.card_updates == []


def test_a_response_code_wecom_refuses__fails_for_good_saying_why(client: Client) -> None:
    run = delivered()
    click(client, run, code="not-one-wecom-gave")
    update_cards()
    action = RunAction.objects.get(run=run)
    assert action.card_state == "failed" and "response_code" in action.card_detail
    assert update_cards() == []  # never tried again


def test_one_cards_failure__never_stops_the_others(client: Client) -> None:
    bad, good = delivered(recipient="alice"), delivered(recipient="bob")
    click(client, bad, code="spent")
    click(client, good)
    update_cards()
    states = dict(RunAction.objects.values_list("run_id", "card_state"))
    assert states == {bad.pk: "failed", good.pk: "updated"}


def test_a_failure_that_may_pass__is_tried_again_after_the_lease(
    client: Client, settings: Any
) -> None:
    run = delivered()
    click(client, run)
    # The channel is now a WeCom app nobody answers: connection refused, which may pass.
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        CHANNEL: {
            "BACKEND": "reminders.senders.wecom.WeComSender",
            "OPTIONS": {
                "api_base": "http://127.0.0.1:9",
                "corp_id": "c",
                "corp_secret": "s",
                "agent_id": 1,
            },
        },
    }
    assert len(update_cards()) == 1
    assert RunAction.objects.get(run=run).card_state == "pending"
    assert cards.claim() == []  # inside the lease, no second job
    assert len(cards.claim(timezone.now() + cards.LEASE + timedelta(seconds=1))) == 1


def test_a_job_that_died__is_taken_over_after_the_lease_never_before(client: Client) -> None:
    run = delivered()
    click(client, run)
    assert len(cards.claim()) == 1
    queued_jobs = len(queued())
    assert cards.claim() == [] and len(queued()) == queued_jobs  # its job never ran
    assert len(cards.claim(timezone.now() + cards.LEASE + timedelta(seconds=1))) == 1
    run_queued()
    assert RunAction.objects.get(run=run).card_state == "updated"
    assert len(MemorySender.card_updates) == 1


# --- Two jobs at once ------------------------------------------------------------------


class HeldBack(MemorySender):
    """As strict as WeCom (``MemorySender``), with each ``update_template_card`` held up
    while ``meanwhile`` runs, the next of them: on its way to WeCom (``before``) or on
    its way back, WeCom having acted on it. ``calls``: the code of every call made."""

    meanwhile: ClassVar[list[Callable[[], object]]] = []
    before: ClassVar[bool] = False
    calls: ClassVar[list[str]] = []

    def update_card(self, recipient: str, response_code: str, replace_name: str) -> None:
        self.calls.append(response_code)
        if self.before:
            self._meanwhile()
        try:
            super().update_card(recipient, response_code, replace_name)
        finally:
            if not self.before:
                self._meanwhile()

    def _meanwhile(self) -> None:
        if self.meanwhile:
            self.meanwhile.pop(0)()


@pytest.fixture
def held_back(settings: Any) -> Iterator[type[HeldBack]]:
    """The cards channel, its card updates held back (``HeldBack``)."""
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        CHANNEL: {"BACKEND": f"{__name__}.HeldBack", "OPTIONS": {"cards": True}},
    }
    yield HeldBack
    HeldBack.meanwhile.clear()
    HeldBack.calls.clear()
    HeldBack.before = False


def claim_job() -> Callable[[], int]:
    """A scheduler's claim of cards to update, now; its job, to run when the test says."""
    before = len(queued())
    assert cards.claim()
    job = queued()[before]
    return lambda: cards.update(*job["args"], **job["kwargs"])


def another_scheduler(time_machine: Any, *, runs_its_job: bool) -> Callable[[], object]:
    """A lease later, another scheduler claims what the first job's lease no longer
    holds; its job runs at once, or not."""

    def act() -> object:
        time_machine.move_to(timezone.now() + cards.LEASE + timedelta(seconds=1))
        job = claim_job()
        return job() if runs_its_job else jobs.append(job)

    jobs: list[Callable[[], int]] = []
    act.jobs = jobs  # type: ignore[attr-defined]
    return act


def test_two_jobs_at_once__the_card_updated_is_recorded_updated(
    client: Client, held_back: type[HeldBack], time_machine: Any
) -> None:
    run = delivered()
    click(client, run)
    first = claim_job()
    # WeCom updates the card; its answer comes back after the lease, by when another
    # job took the card on, and WeCom refused that one the code it had spent.
    held_back.meanwhile.append(another_scheduler(time_machine, runs_its_job=True))
    first()
    assert len(held_back.calls) == 2
    assert MemorySender.card_updates == [("alice", card_id(run), "Done by alice")]
    action = RunAction.objects.get(run=run)
    assert (action.card_state, action.card_detail) == ("updated", "Done by alice")


def test_two_jobs_at_once__a_refusal_never_replaces_the_update(
    client: Client, held_back: type[HeldBack], time_machine: Any
) -> None:
    run = delivered()
    click(client, run)
    first = claim_job()
    # The first job's call reaches WeCom after the lease, when another job, holding the
    # card now, has updated it: WeCom refuses the first the spent code.
    held_back.before = True
    held_back.meanwhile.append(another_scheduler(time_machine, runs_its_job=True))
    first()
    assert len(held_back.calls) == 2
    assert MemorySender.card_updates == [("alice", card_id(run), "Done by alice")]
    action = RunAction.objects.get(run=run)
    assert (action.card_state, action.card_detail) == ("updated", "Done by alice")


def test_a_job_that_lost_its_lease__calls_wecom_for_none_of_its_other_cards(
    client: Client, held_back: type[HeldBack], time_machine: Any
) -> None:
    alice, bob = delivered(recipient="alice"), delivered(recipient="bob")
    click(client, alice)
    click(client, bob)
    first = claim_job()
    # Alice's card takes the first job past its lease: another scheduler claims both.
    other = another_scheduler(time_machine, runs_its_job=False)
    held_back.meanwhile.append(other)
    first()
    assert held_back.calls == [RunAction.objects.get(run=alice).response_code]
    assert RunAction.objects.get(run=bob).card_state == "pending"  # the other job's now
    [second] = other.jobs  # type: ignore[attr-defined]
    second()
    assert len(held_back.calls) == 2
    states = dict(RunAction.objects.values_list("run_id", "card_state"))
    assert states == {alice.pk: "updated", bob.pk: "updated"}
    assert sorted(who for who, _, _ in MemorySender.card_updates) == ["alice", "bob"]


def test_after_72_hours__the_card_is_left_as_it_is(client: Client) -> None:
    run = delivered()
    click(client, run)
    assert update_cards(timezone.now() + cards.CODE_LIFETIME + timedelta(seconds=1)) == []
    action = RunAction.objects.get(run=run)
    assert action.card_state == "expired" and "72 hours" in action.card_detail
    assert MemorySender.card_updates == []


# --- I'll take it ---------------------------------------------------------------------


def escalated_inquiry(after: int = 1, **payload: Any) -> tuple[ScheduledTask, ScheduledTask]:
    """An inquiry alert to alice due now, escalated to bob ``after`` minutes later."""
    inquiry = Inquiry.objects.create(subject="500 units, price?")
    first, escalation = api.schedule_inquiry_timeout(
        "alice",
        arrived_at=timezone.now() - timedelta(minutes=31),
        minutes=30,
        about=inquiry,
        escalate_to="bob",
        escalate_after_minutes=after,
        payload={"customer": "ACME", **payload},
    )
    ScheduledTask.objects.filter(pk__in=[first.pk, escalation.pk]).update(channel=CHANNEL)
    return first, escalation


def test_take_on_an_escalation__tells_the_member_it_came_from(client: Client) -> None:
    _, escalation = escalated_inquiry()
    assert tick() == 2
    run = TaskRun.objects.get(task=escalation, status=TaskRun.Status.SENT)
    click(client, run, "take")
    notice = ScheduledTask.objects.get(kind="inquiry_taken")
    assert (notice.recipient, notice.payload["taken_by"]) == ("alice", "bob")
    assert RunAction.objects.get(run=run).card_state == "pending"
    # The notice goes out as a message of its own: "bob" took ACME's inquiry on.
    MemorySender.outbox.clear()
    assert tick() == 1
    [message] = MemorySender.outbox
    assert message.recipient == "alice"
    assert "bob" in message.rendered and "ACME" in message.rendered
    update_cards()
    assert MemorySender.card_updates == [("bob", card_id(run), "Taken by bob")]


def test_take__a_second_click_tells_nobody_again(client: Client) -> None:
    _, escalation = escalated_inquiry()
    tick()
    run = TaskRun.objects.get(task=escalation, status=TaskRun.Status.SENT)
    click(client, run, "take")
    click(client, run, "take")
    assert ScheduledTask.objects.filter(kind="inquiry_taken").count() == 1


def test_take_by_the_owner_itself__tells_nobody(client: Client) -> None:
    first, escalation = escalated_inquiry(after=30)
    tick()
    run = TaskRun.objects.get(task=first, status=TaskRun.Status.SENT)
    # The planner made the escalation's run already (due in 30 minutes): it is cancelled.
    assert TaskRun.objects.get(task=escalation).status == TaskRun.Status.SCHEDULED
    click(client, run, "take")
    escalation.refresh_from_db()
    assert escalation.status == ScheduledTask.Status.CANCELLED
    assert TaskRun.objects.get(task=escalation).status == TaskRun.Status.CANCELLED
    assert not ScheduledTask.objects.filter(kind="inquiry_taken").exists()


def test_take__the_payloads_owner_is_told(client: Client) -> None:
    first, _ = escalated_inquiry(after=30, owner="carol")
    tick()
    run = TaskRun.objects.get(task=first, status=TaskRun.Status.SENT)
    click(client, run, "take")
    assert ScheduledTask.objects.get(kind="inquiry_taken").recipient == "carol"


def test_take__an_owner_who_is_no_member_id_still_takes_it(client: Client) -> None:
    first, escalation = escalated_inquiry(after=30, owner="not a member id!")
    tick()
    run = TaskRun.objects.get(task=first, status=TaskRun.Status.SENT)
    click(client, run, "take")
    assert RunAction.objects.get(run=run).action == "take"
    escalation.refresh_from_db()
    assert escalation.status == ScheduledTask.Status.CANCELLED
    assert not ScheduledTask.objects.filter(kind="inquiry_taken").exists()


def test_admin__the_runs_page_says_what_became_of_its_card(
    client: Client, admin_client: Client
) -> None:
    updated, refused = delivered(recipient="alice"), delivered(recipient="bob")
    click(client, updated)
    click(client, refused, code="spent")
    page = f"/admin/reminders/taskrun/{updated.pk}/change/"
    assert "to update" in admin_client.get(page).content.decode()
    update_cards()
    assert "updated: Done by alice" in admin_client.get(page).content.decode()
    other = admin_client.get(f"/admin/reminders/taskrun/{refused.pk}/change/").content.decode()
    assert "update failed: " in other and "response_code" in other
