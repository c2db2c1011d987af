"""Grouping and throttling on the tests' clock: the first alert of a quiet group at once,
what follows in its window as one digest when the window closes."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ops.alerts import run_step
from ops.models import Alert, AlertDelivery, AlertEvent, AlertType

pytestmark = pytest.mark.django_db


def fail(at, kind="follow_up", channel="memory", n=1, code="81013"):  # type: ignore[no-untyped-def]
    for i in range(n):
        AlertEvent.objects.record(
            AlertType.RUN_FAILED,
            occurred_at=at,
            kind=kind,
            channel=channel,
            code=code,
            message="invalid user",
            run_id=i + 1,
        )


def test_500_failures_in_a_minute_are_one_alert_and_one_digest(admins, clock, mailoutbox, settings):
    settings.OPS_ALERT_WINDOW_SECONDS = 600
    fail(clock.now)
    first = clock.step()
    assert [a.event_count for a in first.opened] == [1]
    assert len(mailoutbox) == 1
    # 499 more over the next minute, with a step every 10 s until the window closes.
    for second in range(1, 60):
        fail(clock.now + timedelta(seconds=second), n=8 if second <= 58 else 35)
    assert AlertEvent.objects.pending().count() == 499
    for _ in range(59):
        assert clock.step(10).opened == []
    assert len(mailoutbox) == 1
    digest = clock.step(10).opened  # 600 s after the first alert
    assert [(a.seq, a.event_count) for a in digest] == [(2, 499)]
    assert len(mailoutbox) == 2
    assert "499 runs of Follow-up reminder failed on channel memory" in mailoutbox[1].subject
    assert "81013: 499" in mailoutbox[1].body
    assert "… and 494 more." in mailoutbox[1].body  # 5 shown, the rest counted
    assert AlertEvent.objects.pending().count() == 0
    # Quiet for a window: nothing more; the next failure goes at once again.
    assert clock.step(600).opened == []
    fail(clock.now + timedelta(seconds=1))
    assert [a.event_count for a in clock.step(5).opened] == [1]
    assert len(mailoutbox) == 3
    assert Alert.objects.count() == 3


def test_500_failures_before_a_step_are_one_alert(admins, clock, mailoutbox):
    fail(clock.now, n=500)
    [alert] = clock.step().opened
    assert alert.event_count == 500
    assert (alert.first_event_at, alert.last_event_at) == (clock.now, clock.now)
    assert len(mailoutbox) == 1
    assert len(mailoutbox[0].body) < 2000  # a digest is bounded, not a list of 500


def test_groups_are_alerted_apart_and_windows_are_per_group(admins, clock, mailoutbox, settings):
    settings.OPS_ALERT_WINDOWS = {"run_expired": 60}
    fail(clock.now, kind="follow_up")
    fail(clock.now, kind="birthday")
    fail(clock.now, channel="wecom")
    AlertEvent.objects.record(
        AlertType.RUN_EXPIRED, occurred_at=clock.now, kind="follow_up", channel="memory"
    )
    assert len(clock.step().opened) == 4
    fail(clock.now + timedelta(seconds=1))
    AlertEvent.objects.record(
        AlertType.RUN_EXPIRED,
        occurred_at=clock.now + timedelta(seconds=1),
        kind="follow_up",
        channel="memory",
    )
    # The expired group's window is a minute, the failed group's the default 10.
    assert [a.type for a in clock.step(61).opened] == ["run_expired"]
    assert [a.type for a in clock.step(600).opened] == ["run_failed"]
    assert len(mailoutbox) == 6


def test_an_event_recorded_after_the_step_s_clock_waits_for_the_next_step(admins, clock):
    fail(clock.now + timedelta(seconds=5))
    assert clock.step().opened == []
    assert [a.event_count for a in clock.step(5).opened] == [1]


def test_two_steps_at_once_open_one_alert(admins, clock, mailoutbox):
    fail(clock.now, n=3)
    first = run_step(clock.now)
    second = run_step(clock.now)
    assert len(first.opened) == 1 and second.opened == []
    assert Alert.objects.count() == 1
    assert AlertDelivery.objects.filter(status="sent").count() == 1
    assert len(mailoutbox) == 1


def test_with_no_alert_channel_alerts_are_recorded_only(settings, clock, mailoutbox):
    settings.OPS_ALERT_CHANNELS = {}
    fail(clock.now)
    [alert] = clock.step().opened
    assert alert.event_count == 1 and alert.title
    assert AlertDelivery.objects.count() == 0
    assert mailoutbox == []
