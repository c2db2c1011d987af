"""The share of a paced channel kept for high priority runs (``REMINDERS_HIGH_RATE_SHARE``)."""

import time
import uuid
from dataclasses import replace

import pytest
from django.core.exceptions import ImproperlyConfigured

from reminders import ratelimit
from reminders.conf import settings as conf
from reminders.models import RateBucket, TaskRun
from reminders.senders.base import UNLIMITED, Limit, Message, Rate, shares
from reminders.senders.memory import MemorySender
from tests.settings import rate_cache
from tests.support.ci import skip_cache_store_off_postgresql
from tests.support.jobs import tick

pytestmark = pytest.mark.django_db

T0 = 1_900_000_000.0
CHANNEL = Limit("c:channel", UNLIMITED)  # carries pauses only: the shares pace it
HIGH_SHARE = Limit("c:channel:high", Rate(per_second=20, burst=1))
BULK_SHARE = Limit("c:channel:bulk", Rate(per_second=80, burst=1))
BULK = [CHANNEL, replace(BULK_SHARE, lender=HIGH_SHARE)]
HIGH = [CHANNEL, replace(HIGH_SHARE, lender=BULK_SHARE)]


@pytest.fixture(params=["database", "cache"])
def store(request, settings):
    skip_cache_store_off_postgresql(request.param)
    if request.param == "cache":
        settings.CACHES = {**settings.CACHES, "rate": rate_cache(f"test-{uuid.uuid4().hex}")}
        settings.REMINDERS_RATE_LIMIT_CACHE = "rate"
    return request.param


def test_shares__split_the_channel_rate_and_burst(settings):
    assert shares(Rate(100, burst=10)) == {
        "high": Rate(pytest.approx(20), burst=2),
        "bulk": Rate(pytest.approx(80), burst=8),
    }
    settings.REMINDERS_HIGH_RATE_SHARE = 0.01
    # Each class may send at least one at a time; together never more than the burst.
    assert shares(Rate(10, burst=2)) == {
        "high": Rate(pytest.approx(0.1), burst=1),
        "bulk": Rate(pytest.approx(9.9), burst=1),
    }


@pytest.mark.parametrize("channel", [None, UNLIMITED, Rate(10, burst=1)])
def test_shares__an_unlimited_channel_or_one_send_at_a_time_is_not_split(channel):
    assert shares(channel) is None


def test_shares__a_share_of_zero_splits_nothing(settings):
    settings.REMINDERS_HIGH_RATE_SHARE = 0
    assert shares(Rate(100, burst=10)) is None


@pytest.mark.parametrize("value", [-0.1, 1, 1.5, "half", None, True])
def test_high_rate_share__must_be_at_least_0_and_below_1(settings, value):
    settings.REMINDERS_HIGH_RATE_SHARE = value
    with pytest.raises(ImproperlyConfigured, match="REMINDERS_HIGH_RATE_SHARE"):
        _ = conf.HIGH_RATE_SHARE


@pytest.mark.parametrize("value", [-1, 1.5, "two", True])
def test_high_workers__must_be_a_whole_number_of_at_least_0(settings, value):
    settings.REMINDERS_HIGH_WORKERS = value
    with pytest.raises(ImproperlyConfigured, match="REMINDERS_HIGH_WORKERS"):
        _ = conf.HIGH_WORKERS


def test_limits__each_class_fits_its_share_and_may_borrow_the_others():
    sender = MemorySender("paced", rate_limit=100, rate_burst=10)
    message = Message("alice", "text", {"content": "x"}, "k")
    split = shares(sender.channel_rate())
    assert split is not None
    for priority, own, other in [
        ("high", "high", "bulk"),
        (None, "high", "bulk"),
        ("normal", "bulk", "high"),
        ("low", "bulk", "high"),
    ]:
        channel, share = sender.limits(message, priority)
        assert channel == Limit("paced:channel", UNLIMITED)
        assert (share.name, share.rate) == (f"paced:channel:{own}", split[own])
        assert share.lender == Limit(f"paced:channel:{other}", split[other])
    # Unlimited: the channel's bucket only, which carries its pauses.
    assert MemorySender("free").limits(message, "low") == [Limit("free:channel", UNLIMITED)]


def test_limits__with_no_share_every_send_fits_the_channel_alone(settings):
    settings.REMINDERS_HIGH_RATE_SHARE = 0
    sender = MemorySender("paced", rate_limit=100, rate_burst=10)
    message = Message("alice", "text", {"content": "x"}, "k")
    assert sender.limits(message, "low") == [Limit("paced:channel", sender.channel_rate())]


def booked(requests: list[list[Limit]], seconds: float) -> list[tuple[int, float]]:
    """Each of ``requests`` always waiting for ``seconds``: every 10 ms, each asks in
    turn for a slot in the next 10 ms until all are refused (as workers with runs in
    hand would). Returns (which request, slot time) of every slot handed out before
    the end. Slots booked a step ahead keep their own times, where slots granted only
    on the moment asked would fall on the step's grid and lose rate to it."""
    step = 0.01
    slots = []
    for n in range(round(seconds / step)):
        now = T0 + n * step
        asking = set(range(len(requests)))
        while asking:
            for index in sorted(asking):
                [slot] = ratelimit.reserve([requests[index]], max_wait=step, now=now)
                if not slot.reserved:
                    asking.discard(index)
                elif slot.at < T0 + seconds:
                    slots.append((index, slot.at))
    return slots


def test_reserve__bulk_work_alone_uses_the_whole_channel(store):
    assert len(booked([BULK], 1)) == pytest.approx(100, abs=1)


def test_reserve__high_work_alone_uses_the_whole_channel(store):
    assert len(booked([HIGH], 1)) == pytest.approx(100, abs=1)


def test_reserve__both_waiting_each_class_gets_its_share(store):
    """Both classes always waiting for three seconds, asking every 10 ms, bulk first,
    each booking up to a second ahead as workers do: once high work books its share
    further ahead than bulk work may borrow it, each class gets its share of every
    later second (the first one is a transient: bulk borrowed the idle high share)."""
    slots: dict[str, list[float]] = {"bulk": [], "high": []}
    for step in range(300):
        for name, request in (("bulk", BULK), ("high", HIGH)):
            [slot] = ratelimit.reserve([request], max_wait=1, now=T0 + step / 100)
            if slot.reserved:
                slots[name].append(slot.at)
    second = {name: sum(T0 + 2 <= at < T0 + 3 for at in ats) for name, ats in slots.items()}
    assert second == {"bulk": pytest.approx(80, abs=1), "high": pytest.approx(20, abs=1)}


def test_reserve__a_high_send_waits_at_most_the_borrow_time_behind_booked_bulk(store, settings):
    settings.REMINDERS_RATE_BORROW_SECONDS = 0.5
    # Bulk workers book all they may: two seconds of slots.
    booked = ratelimit.reserve([BULK] * 1000, max_wait=2, now=T0)
    last = max(slot.at for slot in booked if slot.reserved)
    assert last - T0 == pytest.approx(2, abs=0.02)
    # They used the whole channel: their share, and the high share up to 0.5 s ahead.
    assert sum(slot.reserved for slot in booked) == pytest.approx(160 + 10, abs=2)
    [high] = ratelimit.reserve([HIGH], max_wait=2, now=T0)
    assert high.reserved
    assert high.at - T0 == pytest.approx(0.5, abs=0.06)


def test_reserve__the_channel_never_sees_more_than_its_pace(store):
    """Bulk and high both waiting for two seconds (``booked``): in every 100 ms window
    of the slots handed out, at most the channel's 10 and its burst of one (plus the two
    shares' bursts); 160 + 40 slots in all."""
    moments = sorted(at for _, at in booked([BULK, HIGH], 2))
    busiest = max(
        sum(1 for other in moments[index:] if other < moment + 0.1)
        for index, moment in enumerate(moments)
    )
    assert busiest <= 10 + 2
    assert 198 <= len(moments) <= 200 + 2


@pytest.fixture
def split_channel(settings) -> str:
    """A memory channel paced at 20 a second with a burst of 2: shares of 4 and 16 a
    second, one at a time each; runs wait at most 0.2 s for a slot, and borrow slots at
    most 0.2 s ahead."""
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        "split": {
            "BACKEND": "reminders.senders.memory.MemorySender",
            "OPTIONS": {"rate_limit": 20, "rate_burst": 2},
        },
    }
    settings.REMINDERS_RATE_MAX_WAIT = 0.2
    settings.REMINDERS_RATE_BORROW_SECONDS = 0.2
    return "split"


def test_deliver__a_high_run_goes_while_bulk_work_has_booked_ahead(
    make_task, outbox, split_channel, settings, time_machine
):
    settings.REMINDERS_RATE_MAX_WAIT = 1.0
    # The clock stands still: on a busy machine the time the tick takes to reach the
    # buckets would otherwise let a bulk run borrow the high share's next slot.
    time_machine.move_to(time.time(), tick=False)
    low = [make_task(channel=split_channel, priority="low") for _ in range(3)]
    inquiry = make_task("inquiry_timeout", channel=split_channel)
    # Other workers hold the bulk share's next five seconds, and have borrowed the high
    # share as far ahead as they may: the high run waits for its share, bulk ones for later.
    RateBucket.objects.create(name="split:channel:bulk", tat=time.time() + 5)
    RateBucket.objects.create(name="split:channel:high", tat=time.time() + 0.6)
    assert tick() == 1
    assert [m.recipient for m in outbox] == [inquiry.recipient]
    waiting = TaskRun.objects.filter(task__in=low)
    assert {(r.status, r.attempts, r.error_code) for r in waiting} == {
        ("scheduled", 0, "rate_limited")
    }


def test_deliver__a_bulk_run_borrows_the_idle_high_share(make_task, outbox, split_channel):
    booked = time.time() + 5
    RateBucket.objects.create(name="split:channel:bulk", tat=booked)
    make_task(channel=split_channel, priority="normal")
    assert tick() == 1
    assert len(outbox) == 1
    buckets = dict(RateBucket.objects.values_list("name", "tat"))
    assert buckets["split:channel:bulk"] == booked
    assert buckets["split:channel:high"] > time.time() - 1


def test_deliver__each_class_spends_its_own_share_first(make_task, outbox, split_channel):
    def moved() -> set[str]:
        return set(RateBucket.objects.filter(tat__gt=0).values_list("name", flat=True))

    make_task("inquiry_timeout", channel=split_channel)
    assert tick() == 1
    assert moved() == {"split:channel:high"}
    make_task(channel=split_channel, priority="normal")
    assert tick() == 1
    assert moved() == {"split:channel:high", "split:channel:bulk"}
