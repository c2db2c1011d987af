"""The alert step forgets what ops were told once it is older than
``OPS_ALERT_RETENTION_DAYS``, a batch per step, and never an alert still being told."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured

from ops.alerts import prune_alerts
from ops.conf import settings as conf
from ops.models import Alert, AlertDelivery, AlertEvent, AlertType

pytestmark = pytest.mark.django_db


def fail(at, n=1, channel="memory"):  # type: ignore[no-untyped-def]
    for i in range(n):
        AlertEvent.objects.record(
            AlertType.RUN_FAILED,
            occurred_at=at,
            kind="follow_up",
            channel=channel,
            code="81013",
            message="invalid user",
            run_id=i + 1,
        )


def test_alerts_past_retention_go_with_their_events_and_deliveries(admins, clock, settings):
    settings.OPS_ALERT_RETENTION_DAYS = 30
    fail(clock.now, n=3)
    [old] = clock.step().opened
    assert AlertDelivery.objects.get(alert=old).status == AlertDelivery.Status.SENT
    clock.now += timedelta(days=29)
    fail(clock.now, channel="robot")
    [recent] = clock.step().opened
    assert prune_alerts(clock.now) == 0  # 29 days old: kept
    clock.now += timedelta(days=1, seconds=1)
    assert prune_alerts(clock.now) == 1
    assert list(Alert.objects.all()) == [recent]
    assert AlertEvent.objects.filter(alert_id=old.pk).count() == 0
    assert AlertDelivery.objects.filter(alert_id=old.pk).count() == 0
    assert AlertEvent.objects.filter(alert=recent).count() == 1


def test_the_step_prunes(admins, clock, settings):
    settings.OPS_ALERT_RETENTION_DAYS = 1
    fail(clock.now)
    clock.step()
    assert Alert.objects.count() == 1
    assert clock.step(2 * 86400).pruned == 1
    assert Alert.objects.count() == 0


def test_an_alert_still_being_delivered_is_kept(settings, clock):
    settings.OPS_ALERT_RETENTION_DAYS = 1
    settings.OPS_ALERT_CHANNELS = {"broken": {"BACKEND": "ops.alert_channels.MailAdmins"}}
    settings.OPS_ALERT_RETRY_DELAYS = [10 * 86400]
    settings.ADMINS = []  # mail_admins with nobody: the channel refuses, so it retries
    fail(clock.now)
    [alert] = clock.step().opened
    delivery = AlertDelivery.objects.get(alert=alert)
    assert delivery.status == AlertDelivery.Status.RETRYING
    clock.now += timedelta(days=5)
    assert prune_alerts(clock.now) == 0
    AlertDelivery.objects.filter(pk=delivery.pk).update(status=AlertDelivery.Status.FAILED)
    assert prune_alerts(clock.now) == 1


def test_one_batch_per_call(admins, clock, settings):
    settings.OPS_ALERT_RETENTION_DAYS = 1
    for channel in ("a", "b", "c"):
        fail(clock.now, channel=channel)
    assert len(clock.step().opened) == 3
    later = clock.now + timedelta(days=2)
    assert prune_alerts(later, batch=2) == 2
    assert prune_alerts(later, batch=2) == 1
    assert prune_alerts(later, batch=2) == 0


def test_zero_keeps_everything(admins, clock, settings):
    settings.OPS_ALERT_RETENTION_DAYS = 0
    fail(clock.now)
    clock.step()
    assert prune_alerts(clock.now + timedelta(days=3650)) == 0
    assert Alert.objects.count() == 1


@pytest.mark.parametrize("value", [-1, "soon", None])
def test_a_bad_retention_names_the_setting(settings, value):
    settings.OPS_ALERT_RETENTION_DAYS = value
    with pytest.raises(ImproperlyConfigured, match="OPS_ALERT_RETENTION_DAYS"):
        _ = conf.ALERT_RETENTION_DAYS
