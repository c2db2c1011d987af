"""The whole pipeline against a model: Hypothesis drives the real engine on the real
database, one random step after another, and after every step the product's promises
hold (``tests/support/invariants.py`` says which and why).

The steps: schedule one-shots and crons of every kind (a digest's, a throttled one, one
with quiet hours, one with a send-by, one keyed per day), many follow-ups at once;
change preferences and quiet hours; cancel, pause, resume or edit a task; click done,
snooze or take on a card, through the signed and encrypted callback; recall a message;
provider faults (busy, a 5xx, a lost reply, a worker dying mid-send); a worker dying
after taking its runs (a lease abandoned); the clock moved on, through windows, quiet
hours' ends and midnight, a scheduler ticking at every moment something falls due
(``tests/support/pipeline.py``). WeCom is ``FaithfulSender``: never more forgiving.

Each example runs in a savepoint of the test's transaction, rolled back when it ends,
on a clock of its own (time-machine, frozen between moves). Three machines run: one
that takes every kind of step, and two that take fewer (``FOCUSES``) and so go deeper.
``make test`` runs a fixed, derandomized budget; ``make soak`` runs
``MODEL_SOAK_EXAMPLES`` examples from a random seed that a failure names
(``MODEL_SEED`` replays it), with the blob that reproduces the shortest failing
sequence. The defects the engine has today are listed, with the rule they break, in
``invariants.KNOWN_DEFECTS``; the shortest sequence found for each is replayed as a test
of its own (``SEQUENCES``): it breaks its rule and no other until the defect is fixed,
and then nothing at all, so a fix fails it until the defect leaves the list.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

import pytest
from django.core.exceptions import ValidationError
from django.db import transaction
from django.test import Client
from hypothesis import HealthCheck, seed
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from reminders import api, preferences
from reminders.calendars import days as calendar_days
from reminders.engine import actions
from reminders.engine import recall as recalling
from reminders.exceptions import ActionRefused
from reminders.messages.digests import is_digest
from reminders.models import ScheduledTask, SendLog, TaskRun
from reminders.models.acting import card_id
from reminders.senders.memory import MemorySender
from tests.reminders.callback.test_view import callback_settings, event_xml, post
from tests.support.faithful import FAULTS, FaithfulSender
from tests.support.invariants import KNOWN_DEFECTS, World
from tests.support.pipeline import Pipeline

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("callback_settings")]
__all__ = ["callback_settings"]

SHANGHAI = ZoneInfo("Asia/Shanghai")
# A Thursday, ten to nine on the clock of Beijing.
START = datetime(2026, 12, 3, 8, 50, tzinfo=SHANGHAI)
CHANNEL = "faithful"
MEMBERS = ("alice", "bob", "carol")
KEYS = (None, "k1", "k2", "k3")
# Every policy a kind can have, one kind each: a digest and a throttle (follow-ups),
# quiet hours and one a day (daily reports), a throttle alone (weekly reports), a send-by
# and quiet hours (birthdays), and an alert that breaks quiet hours (inquiries).
KINDS_POLICIES = {
    "follow_up": {"digest_seconds": 900, "throttle_per_hour": 6},
    "daily_report": {"calendar": "", "quiet_hours": "21:00-08:30", "key_per": "day"},
    "weekly_report": {"calendar": "", "throttle_per_hour": 2, "key_per": "occurrence"},
    "birthday": {"quiet_hours": "22:00-08:00"},
    "inquiry_timeout": {},
}
KINDS = tuple(KINDS_POLICIES)
# Crons that fire daily, on weekdays, every four hours, and three times an hour for a
# morning (over a throttle of two an hour, but few ticks in a simulated day).
CRONS = ("0 9 * * *", "*/20 9-11 * * *", "30 8 * * 1-5", "0 */4 * * *", "15 22 * * *")
# The last open hour of a day (23:00-22:00 leaves 22:00-23:00), and hours that leave
# less than an hour open: refused, naming the field, nothing saved.
REFUSED_QUIET = ("00:00-23:59",)
QUIET = ("22:00-08:00", "12:00-14:00", "23:00-22:00", *REFUSED_QUIET, "")
SOAK = int(os.environ.get("MODEL_SOAK_EXAMPLES", "0") or 0)

# Links of every length WeCom takes in a digest's line, short ones often.
links = st.one_of(st.integers(0, 40), st.integers(0, 400)).map(
    lambda n: "https://crm.example/c/" + "x" * n
)
payloads = st.fixed_dictionaries(
    {},
    optional={
        "customer": st.sampled_from(["ACME", "Globex", "东方明珠集团"]),
        "subject": st.sampled_from(["Renewal", "Send the quote"]),
        "url": links,
    },
)
timings = st.one_of(
    st.integers(-120, 30 * 60).map(lambda minutes: ("at", minutes)),
    st.sampled_from(CRONS).map(lambda cron: ("cron", cron)),
)
advances = st.one_of(
    st.integers(1, 600),
    st.integers(600, 3 * 3600),
    st.sampled_from([6 * 3600, 12 * 3600, 24 * 3600]),
)


F = TypeVar("F", bound=Callable[..., None])


def focused(step: F) -> F:
    """A step taken only by machines whose ``focus`` names it (None: every step)."""
    name = step.__name__
    return precondition(lambda self: self.focus is None or name in self.focus)(step)


class PipelineMachine(RuleBasedStateMachine):
    """The engine, WeCom and a moved clock, under random steps."""

    focus: frozenset[str] | None = None

    def __init__(self) -> None:
        super().__init__()
        self.savepoint = transaction.savepoint()
        FaithfulSender.clear()
        calendar_days.forget()
        self.pipeline = Pipeline(START)
        self.world = World()
        self.client = Client()

    def teardown(self) -> None:
        self.pipeline.stop()
        transaction.savepoint_rollback(self.savepoint)
        FaithfulSender.clear()

    # -- the CRM ---------------------------------------------------------------------------

    @focused
    @rule(
        kind=st.sampled_from(KINDS),
        member=st.sampled_from(MEMBERS),
        when=timings,
        payload=payloads,
        key=st.sampled_from(KEYS),
    )
    def schedule(
        self, kind: str, member: str, when: tuple[str, Any], payload: dict, key: str | None
    ) -> None:
        """A task, or with a key the task that has it edited."""
        how, value = when
        timing = {"at": self.pipeline.now + timedelta(minutes=value)} if how == "at" else {}
        timing = timing or {"cron": value}
        api.schedule(kind, member, tz="Asia/Shanghai", payload=payload, key=key, **timing)

    @focused
    @rule(
        member=st.sampled_from(MEMBERS),
        count=st.integers(1, 30),
        minutes=st.integers(0, 60),
        link=links,
        titled=st.booleans(),
    )
    def schedule_many_follow_ups(
        self, member: str, count: int, minutes: int, link: str, titled: bool
    ) -> None:
        """A CRM's import: many follow-ups at once to one member, one digest's worth."""
        at = self.pipeline.now + timedelta(minutes=minutes)
        items = [
            {
                "kind": "follow_up",
                "recipient": member,
                "at": at,
                "tz": "Asia/Shanghai",
                "payload": {"url": f"{link}/{n}", **({"customer": f"C{n}"} if titled else {})},
            }
            for n in range(count)
        ]
        api.schedule_many(items)

    @focused
    @rule(member=st.sampled_from(MEMBERS), kind=st.sampled_from(KINDS), choice=st.integers(0, 2))
    def set_preference(self, member: str, kind: str, choice: int) -> None:
        """Opted out, in a digest, or each as it comes; a mandatory kind refuses out."""
        try:
            preferences.set(member, kind, opted_out=choice == 1, digest=choice == 2, by=member)
        except ValidationError as exc:
            assert choice == 1 and preferences.mandatory(kind), exc
            assert "kind" in exc.message_dict

    @focused
    @rule(member=st.sampled_from(MEMBERS), hours=st.sampled_from(QUIET), clear=st.booleans())
    def set_quiet_hours(self, member: str, hours: str, clear: bool) -> None:
        if clear:
            preferences.clear_quiet_hours(member, by=member)
        else:
            before = preferences.quiet_hours(member)
            try:
                preferences.set_quiet_hours(member, hours, by=member)
            except ValidationError as exc:
                assert hours in REFUSED_QUIET, exc
                assert "hours" in exc.message_dict
                assert preferences.quiet_hours(member) == before

    # -- ops -------------------------------------------------------------------------------

    @focused
    @rule(pick=st.integers(0, 10_000), verb=st.sampled_from(["pause", "resume", "cancel"]))
    def act_on_a_task(self, pick: int, verb: str) -> None:
        tasks = [task for task in ScheduledTask.objects.order_by("pk") if not is_digest(task)]
        if not tasks:
            return
        with transaction.atomic():
            task = ScheduledTask.objects.select_for_update().get(pk=tasks[pick % len(tasks)].pk)
            if verb == "resume":
                if actions.resume(task):
                    self.world.resumed(task)
                return
            self.world.stopped(task)
            if verb == "pause":
                actions.pause(task)
            elif task.status != ScheduledTask.Status.CANCELLED:
                actions.cancel(task)

    @focused
    @precondition(lambda self: bool(FaithfulSender.deliveries))
    @rule(pick=st.integers(0, 10_000))
    def recall(self, pick: int) -> None:
        logs = list(SendLog.objects.filter(status="sent", recalled_at=None).order_by("pk"))
        if not logs:
            return
        log = logs[pick % len(logs)]
        try:
            recalling.recall(log, by="ops", reason="sent by mistake")
        except ActionRefused:
            return
        self.world.recalled_runs.add(log.run_id)

    # -- the members -----------------------------------------------------------------------

    @focused
    @precondition(lambda self: any(m.msgtype == "template_card" for m in FaithfulSender.outbox))
    @rule(pick=st.integers(0, 10_000), button=st.sampled_from(["done", "snooze_1h", "take"]))
    def click(self, pick: int, button: str) -> None:
        """A click on a delivered card, through WeCom's signed, encrypted callback."""
        cards = list(
            SendLog.objects.filter(status="sent", body__contains="template_card")
            .exclude(run=None)
            .order_by("pk")
        )
        if not cards:
            return
        run = TaskRun.objects.select_related("task").get(pk=cards[pick % len(cards)].run_id)
        try:
            code = MemorySender.click_code(card_id(run))
        except LookupError:
            return  # recalled: nothing left to click
        xml = event_xml(run, EventKey=button, ResponseCode=code, CreateTime=str(int(time.time())))
        assert post(self.client, xml).content == b"success"

    # -- WeCom, the workers and the clock ----------------------------------------------------

    @focused
    @rule(faults=st.lists(st.sampled_from(FAULTS), min_size=1, max_size=3))
    def provider_faults(self, faults: list[str]) -> None:
        """The next sends meet these, in order."""
        FaithfulSender.faults.extend(faults)

    @focused
    @rule(reserved=st.booleans())
    def worker_dies(self, reserved: bool) -> None:
        """A worker takes what is due and dies before sending: its lease is abandoned."""
        self.pipeline.abandon(reserved=reserved)

    @focused
    @rule(seconds=advances)
    def advance(self, seconds: int) -> None:
        self.pipeline.advance(timedelta(seconds=seconds))

    @focused
    @rule(hour=st.sampled_from([0, 8]), minute=st.sampled_from([0, 1, 31]))
    def advance_to(self, hour: int, minute: int) -> None:
        """On to the next midnight, or past the end of quiet hours."""
        now = self.pipeline.now.astimezone(SHANGHAI)
        then = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
        if then <= now:
            then += timedelta(days=1)
        self.pipeline.advance(then - now)

    @invariant()
    def promises_hold(self) -> None:
        problems = self.world.breaches()
        assert not problems, "\n".join(f"{rule}: {words}" for rule, words in problems)


# The machines the test runs: every step, and two that take fewer kinds of steps and so
# go deeper into theirs (cards, clicks and recalls; digests, throttles and quiet hours).
FOCUSES: dict[str, frozenset[str] | None] = {
    "everything": None,
    "cards": frozenset({"schedule", "click", "recall", "advance"}),
    "digests": frozenset(
        {
            "schedule_many_follow_ups",
            "schedule",
            "set_preference",
            "set_quiet_hours",
            "advance",
            "advance_to",
            "provider_faults",
            "worker_dies",
        }
    ),
}


def budget() -> hypothesis_settings:
    """A fixed, reproducible budget in ``make test``; ``MODEL_SOAK_EXAMPLES`` for a soak."""
    common: dict[str, Any] = {
        "deadline": None,
        "suppress_health_check": list(HealthCheck),
        "print_blob": True,
        "database": None,
    }
    if SOAK:
        return hypothesis_settings(max_examples=SOAK, stateful_step_count=60, **common)
    return hypothesis_settings(max_examples=6, stateful_step_count=30, derandomize=True, **common)


@pytest.fixture
def model_settings(settings: Any) -> None:
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        CHANNEL: {"BACKEND": "tests.support.faithful.FaithfulSender"},
    }
    settings.REMINDERS_DEFAULT_CHANNEL = CHANNEL
    settings.REMINDERS_KINDS = KINDS_POLICIES
    # A worker never sleeps for a rate-limit slot on a clock that does not move.
    settings.REMINDERS_RATE_MAX_WAIT = 0.001


@pytest.mark.usefixtures("model_settings")
@pytest.mark.parametrize("focus", FOCUSES)
def test_pipeline__keeps_its_promises_whatever_happens_in_whatever_order(focus: str) -> None:
    machine = type(f"{focus.title()}Machine", (PipelineMachine,), {"focus": FOCUSES[focus]})
    if not SOAK:
        run_state_machine_as_test(machine, settings=budget())
        return
    chosen = int(os.environ.get("MODEL_SEED") or random.randrange(2**32))
    try:
        run_state_machine_as_test(seed(chosen)(machine), settings=budget())
    except BaseException as exc:
        exc.add_note(f"model-based soak of {SOAK} examples: MODEL_SEED={chosen} replays it")
        raise


# The shortest sequences found that break a promise, each kept as its regression test:
# today's known defects (``KNOWN_DEFECTS``), replayed step by step through the machine.
SHORT = "https://crm.example/c/" + "x" * 21
LONG = "https://crm.example/c/" + "x" * 316
SEQUENCES: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "digest_size": [
        (
            "schedule_many_follow_ups",
            {"member": "bob", "count": 25, "minutes": 0, "link": SHORT, "titled": False},
        ),
        ("advance", {"seconds": 1800}),
    ],
    "throttle_chunks": [
        (
            "schedule_many_follow_ups",
            {"member": "alice", "count": 27, "minutes": 0, "link": LONG, "titled": True},
        ),
        ("advance", {"seconds": 1800}),
    ],
    "snooze_after_recall": [
        (
            "schedule",
            {
                "kind": "inquiry_timeout",
                "member": "alice",
                "when": ("at", 0),
                "payload": {},
                "key": None,
            },
        ),
        ("advance", {"seconds": 1}),
        ("click", {"pick": 0, "button": "snooze_1h"}),
        ("recall", {"pick": 0}),
        ("advance", {"seconds": 3700}),
    ],
    "throttle_on_request": [
        (
            "schedule",
            {
                "kind": "follow_up",
                "member": "carol",
                "when": ("cron", "*/20 9-11 * * *"),
                "payload": {},
                "key": "k2",
            },
        ),
        ("advance", {"seconds": 1800}),
        ("click", {"pick": 0, "button": "snooze_1h"}),
        (
            "schedule",
            {
                "kind": "weekly_report",
                "member": "carol",
                "when": ("cron", "*/20 9-11 * * *"),
                "payload": {},
                "key": "k2",
            },
        ),
        ("advance", {"seconds": 7200}),
    ],
    "cancel_reason": [
        (
            "schedule",
            {
                "kind": "daily_report",
                "member": "alice",
                "when": ("cron", "0 9 * * *"),
                "payload": {},
                "key": None,
            },
        ),
        ("advance", {"seconds": 610}),
        ("act_on_a_task", {"pick": 0, "verb": "cancel"}),
    ],
}


@pytest.mark.usefixtures("model_settings")
@pytest.mark.parametrize("rule", SEQUENCES)
def test_shortest_sequences__break_only_their_known_defect_until_it_is_fixed(rule: str) -> None:
    """While ``rule`` is a known defect, its sequence breaks it and nothing else; once the
    defect leaves ``KNOWN_DEFECTS`` (fixed), nothing at all."""
    machine = PipelineMachine()
    broken: set[str] = set()
    try:
        for step, arguments in SEQUENCES[rule]:
            getattr(machine, step)(**arguments)
            broken |= {broke for broke, _ in machine.world.problems()}
    finally:
        machine.teardown()
    if rule in KNOWN_DEFECTS:
        assert broken == {rule}, f"take {rule!r} out of KNOWN_DEFECTS if it was fixed"
    else:
        assert broken == set()
