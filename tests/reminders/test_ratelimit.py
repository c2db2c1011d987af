import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from reminders import ratelimit
from reminders.exceptions import ThrottledSendError
from reminders.models import RateBucket, SendLog, TaskRun
from reminders.senders.base import UNLIMITED, Limit, Rate
from reminders.senders.memory import MemorySender
from tests.settings import rate_cache
from tests.support.jobs import tick

pytestmark = pytest.mark.django_db

T0 = 1_900_000_000.0  # a fixed "now", in epoch seconds


def most_in_any_window(moments: list[float], window: float) -> int:
    moments = sorted(moments)
    best, start = 0, 0
    for end, moment in enumerate(moments):
        while moment - moments[start] >= window:
            start += 1
        best = max(best, end - start + 1)
    return best


@pytest.fixture(params=["database", "cache"])
def store(request, settings):
    """Each test of the algorithm runs on both stores: the database, and Redis."""
    if request.param == "cache":
        settings.CACHES = {**settings.CACHES, "rate": rate_cache(f"test-{uuid.uuid4().hex}")}
        settings.REMINDERS_RATE_LIMIT_CACHE = "rate"
    return request.param


def test_rate_at_most__never_exceeds_the_count_in_any_window(store):
    rate = Rate.at_most(30, 60)
    slots = ratelimit.reserve([[Limit("u", rate)]] * 200, max_wait=10_000, now=T0)
    moments = [slot.at for slot in slots]
    assert all(slot.reserved for slot in slots)
    assert moments[:15] == [T0] * 15  # the burst goes at once
    assert most_in_any_window(moments, 60) <= 30
    assert most_in_any_window(moments, 3600) <= 1000


def test_reserve__paces_a_channel_at_its_rate_after_the_burst(store):
    limit = Limit("wecom:channel", Rate(per_second=100, burst=10))
    moments = [s.at for s in ratelimit.reserve([[limit]] * 1000, max_wait=60, now=T0)]
    assert most_in_any_window(moments, 1.0) <= 100 + 10
    assert moments[-1] - T0 == pytest.approx((1000 - 10) / 100)


def test_reserve__state_is_shared_between_calls(store):
    limit = Limit("c", Rate(per_second=10, burst=1))
    first = ratelimit.reserve([[limit]] * 5, max_wait=60, now=T0)
    second = ratelimit.reserve([[limit]] * 5, max_wait=60, now=T0)
    assert [s.at - T0 for s in first + second] == pytest.approx([i / 10 for i in range(10)])
    assert RateBucket.objects.filter(name="c").exists() == (store == "database")


def test_reserve__a_batch_takes_only_slots_that_fall_at_the_first_ones_moment(store):
    channel = Limit("c", Rate(per_second=10, burst=3))
    slots = ratelimit.reserve([[channel]] * 5, max_wait=60, together=True, now=T0)
    assert [s.reserved for s in slots] == [True, True, True, False, False]
    # Apart, the same five would have gone over the next two tenths of a second.
    [next_one] = ratelimit.reserve([[channel]], max_wait=60, now=T0)
    assert next_one.at == pytest.approx(T0 + 0.1)


def test_reserve__refuses_what_cannot_go_within_max_wait_and_keeps_bucket_order(store):
    channel = Limit("c", Rate(per_second=10, burst=1))
    busy_user = Limit("c:to:bob", Rate(per_second=0.01, burst=1))
    requests = [[channel, busy_user], [channel, busy_user], [channel], [channel] * 1]
    slots = ratelimit.reserve(requests, max_wait=1.0, now=T0)
    assert [s.reserved for s in slots] == [True, False, True, True]
    assert slots[1].at == pytest.approx(T0 + 100)  # bob's next chance
    assert [s.at - T0 for s in slots if s.reserved] == pytest.approx([0, 0.1, 0.2])


def test_reserve__a_request_of_cost_n_moves_the_bucket_by_n_intervals(store):
    limit = Limit("c", Rate(per_second=10, burst=1))
    three_parts = Limit("c", Rate(per_second=10, burst=1), cost=3)
    slots = ratelimit.reserve([[three_parts], [limit]], max_wait=60, now=T0)
    # The first slot is the first part's; the next send waits for the other two parts'.
    assert [s.at - T0 for s in slots] == pytest.approx([0, 0.3])


def test_reserve__a_request_of_cost_n_waits_until_n_slots_fit_the_burst(store):
    rate = Rate(per_second=10, burst=5)
    singles = ratelimit.reserve([[Limit("c", rate)]] * 3, max_wait=60, now=T0)
    [parts] = ratelimit.reserve([[Limit("c", rate, cost=3)]], max_wait=60, now=T0)
    # Two of the burst's five are left at T0: the third part's slot frees 0.1 s later.
    assert [s.at for s in singles] == [T0] * 3
    assert parts.at == pytest.approx(T0 + 0.1)
    [after] = ratelimit.reserve([[Limit("c", rate)]], max_wait=60, now=T0)
    assert after.at == pytest.approx(T0 + 0.2)


def test_reserve__mixed_costs_never_exceed_the_count_in_any_window(store):
    rate = Rate.at_most(30, 60)
    costs = [1 + (n * 7) % 4 for n in range(120)]  # 1 to 4 parts
    requests = [[Limit("u", rate, cost=cost)] for cost in costs]
    slots = ratelimit.reserve(requests, max_wait=100_000, now=T0)
    assert all(slot.reserved for slot in slots)
    moments = [slot.at for slot, cost in zip(slots, costs, strict=True) for _ in range(cost)]
    assert most_in_any_window(moments, 60) <= 30
    assert most_in_any_window(moments, 3600) <= 1000


def test_reserve__a_request_beyond_max_wait_for_its_cost_is_refused(store):
    rate = Rate(per_second=1, burst=2)
    [single] = ratelimit.reserve([[Limit("c", rate)]], max_wait=2.0, now=T0)
    [parts] = ratelimit.reserve([[Limit("c", rate, cost=5)]], max_wait=2.0, now=T0)
    # tat is T0 + 1; five parts fit once tat + 4 intervals - tolerance (1 s) has come.
    assert (single.reserved, parts.reserved) == (True, False)
    assert parts.at == pytest.approx(T0 + 4)


def test_reserve__costs_above_the_burst_keep_every_window_of_their_excess_and_longer():
    """A request of more slots than the burst goes whole (parts are not spread out): it
    waits until the bucket has been idle for its excess too, so any window at least that
    long still sees at most burst + window x rate."""
    rate = Rate(per_second=1, burst=2)
    tat = {"c": 0.0}
    now, moments = T0, []
    for n in range(300):
        now += [0, 0, 0.1, 0.5, 1, 3, 8][n % 7]
        cost = 1 + (n * 3) % 5  # 1 to 5
        [slot] = ratelimit._allot([[Limit("c", rate, cost)]], tat, {}, now, 1e9, False)
        moments += [slot.at] * cost
        now = max(now, slot.at)
    for window in (3, 4, 10, 60):
        assert most_in_any_window(moments, window) <= 2 + window


def test_pause__holds_the_bucket_for_everyone_and_never_shortens(store):
    limit = Limit("wecom:channel", Rate(per_second=100, burst=1))
    until = ratelimit.pause("wecom:channel", 60, "45009 frequency limit")
    assert ratelimit.pause("wecom:channel", 5, "shorter") == until
    [slot] = ratelimit.reserve([[limit]], max_wait=2.0)
    assert slot.reserved is False
    assert slot.at == pytest.approx(until.timestamp())
    [later] = ratelimit.reserve([[limit]], max_wait=2.0, now=until.timestamp() + 1)
    assert later.reserved is True


def test_pause__an_unlimited_bucket_found_clear_is_trusted_briefly_a_pause_found_never(
    monkeypatch,
):
    """A reservation on an unlimited bucket found not paused reads it again only after
    PAUSES_FRESH_SECONDS: a pause set by another process (its row written directly) is
    seen by then; one set by this process is seen at once, and a pause found is read
    again every time (its end is seen at once)."""
    from reminders.ratelimit import database

    clock = [1000.0]
    monkeypatch.setattr(database.time, "monotonic", lambda: clock[0])
    limit = Limit("open:channel", UNLIMITED)

    def goes() -> bool:
        [slot] = ratelimit.reserve([[limit]], max_wait=2.0)
        return slot.reserved

    assert goes()
    far = timezone.now() + timedelta(minutes=5)
    RateBucket.objects.create(name="open:channel", paused_until=far, pause_reason="elsewhere")
    clock[0] += database.PAUSES_FRESH_SECONDS - 0.01
    assert goes()  # still trusted
    clock[0] += 0.02
    assert not goes()  # read again: paused
    RateBucket.objects.filter(name="open:channel").update(paused_until=None)
    assert goes()  # a pause found was not trusted: its end is seen at once
    ratelimit.pause("open:channel", 60, "45009 here")
    assert not goes()  # set by this process: seen at once


def test_reserve__a_paced_bucket_is_made_once_and_again_if_deleted_by_hand():
    """The INSERT that makes a paced bucket's row goes once per process, not before every
    reservation; a row deleted since is made again, and the reservation still holds."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    limit = Limit("paced:made", Rate(per_second=10, burst=1))

    def inserts() -> int:
        with CaptureQueriesContext(connection) as queries:
            [slot] = ratelimit.reserve([[limit]], max_wait=60, now=T0)
        assert slot.reserved
        return sum("INSERT" in q["sql"] for q in queries.captured_queries)

    assert inserts() == 1
    assert inserts() == 0
    RateBucket.objects.filter(name="paced:made").delete()
    assert inserts() == 1
    assert RateBucket.objects.filter(name="paced:made").exists()


def test_deliver__runs_beyond_the_rate_wait_without_spending_an_attempt(
    make_task, outbox, paced_channel
):
    import time

    for _ in range(10):
        make_task(channel=paced_channel)
    # Other workers hold the channel's next five seconds: more than RATE_MAX_WAIT away.
    RateBucket.objects.create(name="paced:channel", tat=time.time() + 5)
    assert tick() == 0
    waiting = TaskRun.objects.all()
    assert {(r.status, r.attempts, r.error_code) for r in waiting} == {
        ("scheduled", 0, "rate_limited")
    }
    assert all(r.next_attempt_at > timezone.now() + timedelta(seconds=3) for r in waiting)
    # Their keys were never reserved: nothing about them is in doubt.
    assert not SendLog.objects.exists()
    RateBucket.objects.filter(name="paced:channel").update(tat=0)
    started = time.monotonic()
    assert tick(now=timezone.now() + timedelta(seconds=6)) == 10
    # 20 a second, paced 3% under, with a burst of one: nine intervals between ten sends.
    assert time.monotonic() - started >= 9 / (20 * 0.97) - 0.05
    assert len(outbox) == 10
    assert set(TaskRun.objects.values_list("status", "attempts")) == {("sent", 1)}


def test_deliver__provider_throttling_pauses_the_channel_and_wastes_no_attempt(make_task, outbox):
    tasks = [make_task() for _ in range(5)]
    MemorySender.script[:] = [None, ThrottledSendError("api freq out of limit", code="45009")]
    assert tick() == 1
    bucket = RateBucket.objects.get(name="memory:channel")
    assert bucket.paused_until > timezone.now() + timedelta(seconds=55)
    assert "freq" in bucket.pause_reason
    waiting = TaskRun.objects.exclude(status="sent")
    assert {(r.status, r.attempts) for r in waiting} == {("scheduled", 0)}
    assert waiting.count() == 4
    assert tick(now=timezone.now() + timedelta(seconds=5)) == 0  # still paused for everyone
    # Claimed once due again, but the pause holds on the real clock: back in line.
    assert tick(now=bucket.paused_until + timedelta(seconds=1)) == 0
    RateBucket.objects.filter(pk=bucket.pk).update(paused_until=timezone.now())
    assert tick(now=timezone.now() + timedelta(seconds=61)) == 4
    assert sorted(m.recipient for m in outbox) == sorted(t.recipient for t in tasks)
    assert set(TaskRun.objects.values_list("status", "attempts")) == {("sent", 1)}


def test_deliver__a_paced_batch_takes_the_burst_at_once_then_the_pace(make_task, outbox):
    import time

    for _ in range(9):
        make_task(channel="paced_dedup")
    started = time.monotonic()
    assert tick() == 9
    # Three at once (the burst), then six intervals of 1 / (20 x 0.97) s.
    assert time.monotonic() - started >= 6 / (20 * 0.97) - 0.05
    assert len(outbox) == 9
    assert set(TaskRun.objects.values_list("status", "attempts")) == {("sent", 1)}


def test_pause__a_provider_asking_for_longer_than_the_cap_gets_the_cap_and_a_warning(
    store, settings, caplog
):
    settings.REMINDERS_MAX_PAUSE_SECONDS = 120
    before = timezone.now()
    with caplog.at_level("WARNING", logger="reminders.ratelimit"):
        until = ratelimit.pause("wecom:c:1:channel", 7200, "HTTP 429, Retry-After 7200")
    assert before + timedelta(seconds=119) < until <= timezone.now() + timedelta(seconds=120)
    [record] = caplog.records
    assert record.levelname == "WARNING"
    assert "wecom:c:1:channel" in record.message
    assert "7200" in record.message and "120" in record.message
    if store == "database":
        reason = RateBucket.objects.get(name="wecom:c:1:channel").pause_reason
        assert reason.startswith("capped at 120 s (asked 7200 s): HTTP 429")


def test_pause__within_the_cap_is_kept_as_asked_and_not_logged(store, caplog):
    with caplog.at_level("WARNING", logger="reminders.ratelimit"):
        until = ratelimit.pause("c", 60, "45009")
    assert until > timezone.now() + timedelta(seconds=59)
    assert caplog.records == []


def test_pause__a_garbled_pause_is_capped_too(store, settings):
    settings.REMINDERS_MAX_PAUSE_SECONDS = 30
    until = ratelimit.pause("c", float("nan"), "Retry-After: nan")
    assert until <= timezone.now() + timedelta(seconds=30)


@pytest.mark.parametrize("value", [0, -5, "soon"])
def test_max_pause_seconds__must_be_a_positive_number(settings, value):
    from django.core.exceptions import ImproperlyConfigured

    from reminders.conf import settings as conf

    settings.REMINDERS_MAX_PAUSE_SECONDS = value
    with pytest.raises(ImproperlyConfigured, match="REMINDERS_MAX_PAUSE_SECONDS"):
        _ = conf.MAX_PAUSE_SECONDS


def test_deliver__a_throttle_asking_for_hours_pauses_the_channel_for_the_cap(make_task, outbox):
    make_task()
    MemorySender.script[:] = [ThrottledSendError("Retry-After", code="429", pause_seconds=36_000)]
    assert tick() == 0
    bucket = RateBucket.objects.get(name="memory:channel")
    assert bucket.paused_until <= timezone.now() + timedelta(seconds=300)
    assert "capped at 300 s (asked 36000 s)" in bucket.pause_reason


def test_reserve__a_reservation_that_loses_a_deadlock_is_asked_again(monkeypatch):
    """The database ends one reservation as a deadlock's victim (MariaDB's 1213): it is
    asked again and gets its slot; an error that is not a deadlock is raised at once."""
    from contextlib import contextmanager

    from django.db import OperationalError

    from reminders.ratelimit.store import Held, Store

    class Losing(Store):
        def __init__(self, errors: list[OperationalError]) -> None:
            self.errors = errors
            self.holds = 0

        @contextmanager
        def hold(self, paced, unlimited):
            self.holds += 1
            if self.errors:
                raise self.errors.pop(0)
            yield Held(tat=dict.fromkeys(paced, 0.0), paused={})

        def pause(self, name, seconds, reason):  # pragma: no cover - not used here
            raise NotImplementedError

    limit = Limit("d:channel", Rate(per_second=10, burst=1))
    store = Losing([OperationalError(1213, "Deadlock found when trying to get lock")])
    monkeypatch.setattr(ratelimit, "_store", lambda: store)
    [slot] = ratelimit.reserve([[limit]], max_wait=1, now=1_900_000_000.0)
    assert slot.reserved
    assert store.holds == 2

    other = Losing([OperationalError(2006, "MySQL server has gone away")])
    monkeypatch.setattr(ratelimit, "_store", lambda: other)
    with pytest.raises(OperationalError):
        ratelimit.reserve([[limit]], max_wait=1)
    assert other.holds == 1
