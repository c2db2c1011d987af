"""An alert channel that fails is recorded, retried later and never raised: it stops
neither the engine's sends nor the other channels nor the next digests."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ops.alerts import open_alerts
from ops.models import AlertDelivery, AlertEvent, AlertType
from reminders.exceptions import PermanentSendError
from reminders.models import TaskRun
from reminders.senders.memory import MemorySender
from tests.support.alert_channels import Exploding, admins_setting
from tests.support.jobs import tick

pytestmark = pytest.mark.django_db


@pytest.fixture
def broken_and_admins(settings):  # type: ignore[no-untyped-def]
    settings.ADMINS = admins_setting("ops@example.com")
    settings.OPS_ALERT_CHANNELS = {
        "broken": {"BACKEND": "tests.support.alert_channels.Exploding"},
        "admins": {"BACKEND": "ops.alert_channels.MailAdmins"},
    }
    settings.OPS_ALERT_RETRY_DELAYS = [60, 300]
    Exploding.calls = 0


def deliveries(channel: str) -> list[tuple[int, str, int]]:
    return list(
        AlertDelivery.objects.filter(channel=channel)
        .order_by("alert__seq")
        .values_list("alert__seq", "status", "attempts")
    )


def test_a_channel_that_raises_breaks_no_send_no_channel_and_no_digest(
    make_task, broken_and_admins, clock, mailoutbox, outbox
):
    make_task()
    MemorySender.script[:] = [PermanentSendError("invalid user", code="81013")]
    tick()
    result = clock.step()
    assert (result.sent, result.failed) == (1, 1)
    assert len(mailoutbox) == 1
    broken = AlertDelivery.objects.get(channel="broken")
    assert (broken.status, broken.attempts, broken.target) == ("retrying", 1, "nobody")
    assert broken.error == "RuntimeError('the alert backend is down')"
    assert broken.next_attempt_at == clock.now + timedelta(seconds=60)
    # The engine goes on sending.
    make_task()
    assert tick() == 1
    assert TaskRun.objects.filter(status="sent").count() == 1
    # Retried when due, then given up after the last delay; mail is never held back.
    assert clock.step(30).failed == 0
    assert clock.step(30).failed == 1
    assert deliveries("broken") == [(1, "retrying", 2)]
    assert clock.step(300).failed == 1
    assert deliveries("broken") == [(1, "failed", 3)]
    assert Exploding.calls == 3
    # The next digest still goes out, to both.
    MemorySender.script[:] = [PermanentSendError("invalid user", code="81013")]
    make_task()
    tick()
    assert len(clock.step(600).opened) == 1
    assert len(mailoutbox) == 2
    assert deliveries("admins") == [(1, "sent", 1), (2, "sent", 1)]
    assert deliveries("broken") == [(1, "failed", 3), (2, "retrying", 1)]


def test_a_robot_that_cannot_be_reached_is_recorded_without_its_key(settings, clock):
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        # The discard port: connection refused, nothing reaches anyone.
        "ops_group": {
            "BACKEND": "reminders.senders.robot.WeComRobotSender",
            "OPTIONS": {"api_base": "http://127.0.0.1:9", "key": "robot-secret-key"},
        },
    }
    settings.OPS_ALERT_CHANNELS = {
        "group": {
            "BACKEND": "ops.alert_channels.ReminderChannel",
            "OPTIONS": {"channel": "ops_group"},
        }
    }
    AlertEvent.objects.record(AlertType.RUN_STUCK, occurred_at=clock.now, kind="k", channel="c")
    result = clock.step()
    assert (result.sent, result.failed) == (0, 1)
    delivery = AlertDelivery.objects.get()
    assert (delivery.status, delivery.target) == ("retrying", "ops_group")
    assert "robot-secret-key" not in delivery.error
    assert "Error" in delivery.error


def test_an_alert_channel_no_longer_configured_is_a_failed_delivery(settings, clock, admins):
    AlertEvent.objects.record(AlertType.RUN_STUCK, occurred_at=clock.now, kind="k", channel="c")
    settings.OPS_ALERT_CHANNELS = {"admins": {"BACKEND": "ops.alert_channels.MailAdmins"}}
    AlertDelivery.objects.all().delete()
    clock.step()  # opens the alert, with a delivery to "admins"
    settings.OPS_ALERT_CHANNELS = {}
    AlertDelivery.objects.update(status="pending", next_attempt_at=clock.now)
    assert clock.step().failed == 1
    assert AlertDelivery.objects.get().error == "OPS_ALERT_CHANNELS has no channel 'admins'."


def test_mail_with_no_admins_is_a_failed_delivery(settings, clock, mailoutbox):
    settings.ADMINS = []
    settings.OPS_ALERT_CHANNELS = {"admins": {"BACKEND": "ops.alert_channels.MailAdmins"}}
    AlertEvent.objects.record(AlertType.RUN_STUCK, occurred_at=clock.now, kind="k", channel="c")
    assert clock.step().failed == 1
    assert "ADMINS is empty" in AlertDelivery.objects.get().error
    assert mailoutbox == []


def test_a_delivery_whose_step_died_mid_send_is_tried_again_after_its_lease(
    admins, clock, mailoutbox, settings
):
    settings.OPS_ALERT_LEASE_SECONDS = 120
    AlertEvent.objects.record(AlertType.RUN_STUCK, occurred_at=clock.now, kind="k", channel="c")
    open_alerts(clock.now)
    delivery = AlertDelivery.objects.get()
    assert delivery.claim(clock.now, 120)  # and the step that claimed it died
    assert clock.step(60).sent == 0
    assert clock.step(61).sent == 1
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == ("sent", 2)
    assert len(mailoutbox) == 1


def test_the_admin_shows_an_alert_and_its_deliveries(admin_client, admins, clock):
    AlertEvent.objects.record(AlertType.RUN_STUCK, occurred_at=clock.now, kind="k", channel="c")
    [alert] = clock.step().opened
    page = admin_client.get(f"/admin/ops/alert/{alert.pk}/change/")
    assert page.status_code == 200
    assert alert.title.encode() in page.content
    assert b"ADMINS" in page.content
    assert admin_client.get("/admin/ops/alertdelivery/").status_code == 200
