"""The share of a paced channel kept for high priority runs (``REMINDERS_HIGH_RATE_SHARE``)."""

import time
import uuid

import pytest
from django.core.exceptions import ImproperlyConfigured

from reminders import ratelimit
from reminders.conf import settings as conf
from reminders.models import RateBucket, TaskRun
from reminders.senders.base import UNLIMITED, Limit, Message, Rate, bulk_rate
from reminders.senders.memory import MemorySender
from tests.settings import rate_cache
from tests.support.jobs import tick

pytestmark = pytest.mark.django_db

T0 = 1_900_000_000.0
CHANNEL = Limit("c:channel", Rate(per_second=100, burst=1))
BULK = Limit("c:channel:bulk", Rate(per_second=80, burst=1))


@pytest.fixture(params=["database", "cache"])
def store(request, settings):
    if request.param == "cache":
        settings.CACHES = {**settings.CACHES, "rate": rate_cache(f"test-{uuid.uuid4().hex}")}
        settings.REMINDERS_RATE_LIMIT_CACHE = "rate"
    return request.param


def test_bulk_rate__is_the_channel_less_the_high_share(settings):
    assert bulk_rate(Rate(100, burst=10)) == Rate(pytest.approx(80), burst=8)
    settings.REMINDERS_HIGH_RATE_SHARE = 0.5
    assert bulk_rate(Rate(10, burst=1)) == Rate(5, burst=1)  # never less than a burst of one


@pytest.mark.parametrize("channel", [None, UNLIMITED])
def test_bulk_rate__an_unlimited_channel_keeps_no_share(channel):
    assert bulk_rate(channel) is None


def test_bulk_rate__a_share_of_zero_keeps_none(settings):
    settings.REMINDERS_HIGH_RATE_SHARE = 0
    assert bulk_rate(Rate(100, burst=10)) is None


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


def test_limits__bulk_sends_also_fit_the_bulk_bucket_high_ones_the_channel_alone():
    sender = MemorySender("paced", rate_limit=100, rate_burst=10)
    message = Message("alice", "text", {"content": "x"}, "k")
    high = sender.limits(message, "high")
    assert [limit.name for limit in high] == ["paced:channel"]
    for priority in ("normal", "low"):
        channel, bulk = sender.limits(message, priority)
        assert (channel, bulk.name) == (high[0], "paced:channel:bulk")
        assert bulk.rate == bulk_rate(channel.rate)
    # Unlimited: the channel's bucket only, which carries its pauses.
    assert [limit.name for limit in MemorySender("free").limits(message, "low")] == ["free:channel"]


def sends_in_one_second(*requests: list[Limit]) -> list[int]:
    """Each of ``requests`` always waiting and asked for every half millisecond, in
    order, for a second: how many of each went."""
    sent = [0] * len(requests)
    for step in range(2000):
        for index, request in enumerate(requests):
            [slot] = ratelimit.reserve([request], max_wait=0, now=T0 + step / 2000)
            sent[index] += slot.reserved
    return sent


def test_reserve__bulk_work_alone_is_paced_at_its_share(store):
    assert sends_in_one_second([CHANNEL, BULK]) == [pytest.approx(80, abs=1)]


def test_reserve__bulk_work_never_spends_the_high_share(store):
    """Both always waiting, bulk asking first: high still gets at least its 20 a second,
    bulk no more than 80, the channel no more than 100."""
    bulk, high = sends_in_one_second([CHANNEL, BULK], [CHANNEL])
    assert bulk <= 80 + 1
    assert high >= 20 - 1
    assert bulk + high <= 100 + 1


def test_reserve__with_no_bulk_work_high_may_use_the_whole_channel(store):
    slots = ratelimit.reserve([[CHANNEL]] * 100, max_wait=10, now=T0)
    assert slots[-1].at - T0 == pytest.approx(99 / 100)


def test_deliver__a_high_run_goes_while_bulk_work_has_spent_its_share(
    make_task, outbox, paced_channel
):
    low = [make_task(channel=paced_channel, priority="low") for _ in range(3)]
    inquiry = make_task("inquiry_timeout", channel=paced_channel)
    # Other workers hold the bulk share's next five seconds; the channel itself is free.
    RateBucket.objects.create(name="paced:channel:bulk", tat=time.time() + 5)
    assert tick() == 1
    assert [m.recipient for m in outbox] == [inquiry.recipient]
    waiting = TaskRun.objects.filter(task__in=low)
    assert {(r.status, r.attempts, r.error_code) for r in waiting} == {
        ("scheduled", 0, "rate_limited")
    }


def test_deliver__bulk_runs_move_both_buckets_high_runs_the_channel_only(
    make_task, outbox, paced_channel
):
    make_task("inquiry_timeout", channel=paced_channel)
    assert tick() == 1
    assert set(RateBucket.objects.values_list("name", flat=True)) == {"paced:channel"}
    make_task(channel=paced_channel, priority="normal")
    assert tick() == 1
    assert set(RateBucket.objects.values_list("name", flat=True)) == {
        "paced:channel",
        "paced:channel:bulk",
    }
