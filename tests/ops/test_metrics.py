"""/metrics: figures read from the database, compared with counts made by hand; and who
may read them."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from prometheus_client.parser import text_string_to_metric_families

from ops import metrics
from ops.models import Alert, AlertDelivery, AlertEvent
from reminders.calendars import days as calendar_days
from reminders.engine import actions
from reminders.models import RateBucket, ScheduledTask, SchedulerHeartbeat, SendLog, TaskRun

pytestmark = pytest.mark.django_db

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(now: datetime | None = None) -> tuple[Samples, dict[str, str]]:
    text = metrics.render(now).decode()
    samples: Samples = {}
    types = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples, types


def of(samples: Samples, name: str) -> dict[tuple[str, ...], float]:
    """The samples of ``name``, keyed by their label values in label-name order."""
    return {
        tuple(v for _, v in labels): value for (n, labels), value in samples.items() if n == name
    }


class Runs:
    """Runs of a task with the fields that matter here; the rest are filled in."""

    def __init__(self, task: ScheduledTask, now: datetime) -> None:
        self.task, self.now, self.n = task, now, 0

    def add(
        self,
        status: str,
        *,
        ago: float = 0,
        late: float = 0,
        took: float | None = None,
        due_in: float | None = None,
        code: str = "",
    ) -> TaskRun:
        self.n += 1
        finished = self.now - timedelta(seconds=ago)
        fields: dict[str, Any] = {
            "task": self.task,
            "occurrence": self.now - timedelta(days=1, minutes=self.n),
            "run_date": self.now.date(),
            "due_at": finished - timedelta(seconds=late),
            "status": status,
            "priority": 1,
            "ledger_key": f"{self.task.pk}:{self.n}",
            "error_code": code,
        }
        if status in TaskRun.FINISHED:
            fields.update(finished_at=finished, duration=timedelta(seconds=took) if took else None)
        elif status in TaskRun.WAITING:
            fields["next_attempt_at"] = self.now + timedelta(seconds=due_in or 0)
        else:
            fields.update(lease_token="t", lease_expires_at=self.now + timedelta(minutes=5))
        return TaskRun.objects.create(**fields)


@pytest.fixture
def sent_recall(db):  # type: ignore[no-untyped-def]
    """Factory: a ledger row of ``channel`` recalled at ``at``."""

    def make(channel: str, at: datetime) -> SendLog:
        return SendLog.objects.create(
            key=f"r{SendLog.objects.count()}",
            status="sent",
            channel=channel,
            sent_at=at - timedelta(minutes=1),
            recalled_at=at,
            recalled_by="ops",
            recall_reason="wrong customer",
        )

    return make


@pytest.fixture
def world(make_task, now):  # type: ignore[no-untyped-def]
    """A day of a small deployment, as the counts below say."""
    follow = Runs(make_task("follow_up", channel="memory"), now)
    follow.add("sent", ago=98, late=2, took=0.3)
    follow.add("sent", ago=990, late=10, took=1.5)
    follow.add("failed", ago=50, took=0.1)
    follow.add("sent", ago=7200, late=1, took=0.2)  # before the hour: not counted
    follow.add("scheduled", due_in=-30)
    follow.add("scheduled", due_in=600)  # not due yet
    follow.add("retrying", due_in=-10, code="rate_limited")
    follow.add("queued")
    report = Runs(make_task("daily_report", channel="memory_dedup", cron="0 9 * * *"), now)
    report.add("sent", ago=200, late=300, took=0.05)
    report.add("expired", ago=20)
    paused = make_task("inquiry_timeout")
    actions.pause(paused)
    Runs(paused, now).add("scheduled", due_in=-3600)  # its task is paused: no backlog
    for channel, status in [
        ("memory", "sent"),
        ("memory", "sent"),
        ("memory", "failed"),
        ("memory_dedup", "sent"),
        ("memory_dedup", "unknown"),
    ]:
        SendLog.objects.create(key=f"k{SendLog.objects.count()}", status=status, channel=channel)
    SendLog.objects.update(created_at=now - timedelta(minutes=1))
    SendLog.objects.filter(status="unknown").update(created_at=now - timedelta(hours=2))
    RateBucket.objects.create(name="memory:channel", paused_until=now + timedelta(seconds=30))
    RateBucket.objects.create(name="old:channel", paused_until=now - timedelta(seconds=5))
    for owner, age in [("a:1", 5), ("b:2", 300)]:
        at = now - timedelta(seconds=age)
        SchedulerHeartbeat.objects.beat(owner, host="h", pid=1, started_at=at, now=at)
    AlertEvent.objects.record("run_failed", occurred_at=now, kind="k")
    AlertEvent.objects.record("run_failed", occurred_at=now, kind="k")
    alert = Alert.objects.create(group_key="g", seq=1, type="run_failed", created_at=now)
    AlertDelivery.objects.create(alert=alert, channel="admins", status="retrying")
    AlertDelivery.objects.create(alert=alert, channel="robot", status="sent")
    return now


def test_runs_by_status_and_kind(world):
    samples, types = scrape(world)
    assert of(samples, "reminders_runs_open") == {
        ("follow_up", "scheduled"): 2,
        ("follow_up", "retrying"): 1,
        ("follow_up", "queued"): 1,
        ("inquiry_timeout", "scheduled"): 1,
    }
    assert of(samples, "reminders_runs_finished") == {
        ("follow_up", "sent"): 2,
        ("follow_up", "failed"): 1,
        ("daily_report", "sent"): 1,
        ("daily_report", "expired"): 1,
    }
    assert of(samples, "reminders_metrics_window_seconds") == {(): 3600}
    assert types["reminders_runs_finished"] == "gauge"


def test_lateness_and_duration_histograms(world):
    samples, types = scrape(world)
    assert types["reminders_run_lateness_seconds"] == "histogram"  # gauge histogram, as text
    late = of(samples, "reminders_run_lateness_seconds_bucket")
    # follow_up: 2 s and 10 s late; daily_report: 300 s.
    assert [late[("follow_up", le)] for le in ("1.0", "5.0", "15.0", "+Inf")] == [0, 1, 2, 2]
    assert [late[("daily_report", le)] for le in ("120.0", "300.0", "+Inf")] == [0, 1, 1]
    assert of(samples, "reminders_run_lateness_seconds_gsum") == {
        ("follow_up",): 12.0,
        ("daily_report",): 300.0,
    }
    assert of(samples, "reminders_run_lateness_seconds_gcount") == {
        ("follow_up",): 2,
        ("daily_report",): 1,
    }
    took = of(samples, "reminders_run_duration_seconds_bucket")
    # memory: 0.3 s and 1.5 s (the failed run is not a send); memory_dedup: 0.05 s.
    assert [took[("memory", le)] for le in ("0.25", "0.5", "1.0", "2.5", "+Inf")] == [0, 1, 1, 2, 2]
    assert took[("memory_dedup", "0.05")] == 1
    assert of(samples, "reminders_run_duration_seconds_gsum") == pytest.approx(
        {("memory",): 1.8, ("memory_dedup",): 0.05}
    )


def test_sends_backlog_rate_limits_and_pauses(world):
    samples, _ = scrape(world)
    assert of(samples, "reminders_sends") == {
        ("memory", "sent"): 2,
        ("memory", "failed"): 1,
        ("memory_dedup", "sent"): 1,
    }
    assert of(samples, "reminders_backlog_runs") == {("normal",): 2}
    assert of(samples, "reminders_backlog_oldest_seconds") == {("normal",): 30}
    assert of(samples, "reminders_rate_limited_runs") == {("memory",): 1}
    assert of(samples, "reminders_rate_limit_pause_seconds") == {("memory:channel",): 30}


def test_schedulers_and_alerts(world):
    samples, _ = scrape(world)
    assert of(samples, "reminders_schedulers") == {("fresh",): 1, ("stale",): 1}
    assert of(samples, "reminders_scheduler_last_tick_age_seconds") == {(): 5}
    assert of(samples, "ops_alert_events_pending") == {(): 2}
    assert of(samples, "ops_alert_deliveries_open") == {("admins", "retrying"): 1}


def test_recalls_of_the_window_by_channel(world, sent_recall):
    for channel, ago in [("wecom", 60), ("wecom", 3000), ("wecom_b", 10), ("wecom", 3700)]:
        sent_recall(channel, world - timedelta(seconds=ago))
    SendLog.objects.create(key="never", status="sent", channel="wecom", sent_at=world)
    samples, types = scrape(world)
    assert of(samples, "reminders_messages_recalled") == {("wecom",): 2, ("wecom_b",): 1}
    assert types["reminders_messages_recalled"] == "gauge"


def test_recalls__what_the_engine_recalls_is_counted(make_task, settings):
    """Through engine.recall, not rows made by hand: what /metrics says after a recall."""
    from reminders.engine import recall
    from tests.support.jobs import tick

    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        "app": {"BACKEND": "reminders.senders.memory.MemorySender", "OPTIONS": {"cards": True}},
    }
    make_task("follow_up", "lisi", channel="app", payload={"content": "Call ACME"})
    assert tick() == 1
    samples, _ = scrape()
    assert of(samples, "reminders_messages_recalled") == {}
    recall.recall(SendLog.objects.get(), by="ops", reason="wrong customer")
    samples, _ = scrape()
    assert of(samples, "reminders_messages_recalled") == {("app",): 1}


def test_an_empty_database_scrapes(db):
    samples, _ = scrape()
    assert of(samples, "reminders_schedulers") == {("fresh",): 0, ("stale",): 0}
    assert of(samples, "reminders_runs_open") == {}


def test_a_scrape_costs_the_same_queries_whatever_the_runs(world, make_task):
    def queries() -> int:
        calendar_days.forget()  # the worst case: the calendar's ops entries read too
        with CaptureQueriesContext(connection) as captured:
            metrics.render(world)
        return len(captured)

    before = queries()
    more = Runs(make_task("follow_up"), world)
    for i in range(50):
        more.add("sent", ago=i, late=1, took=0.1)
        more.add("scheduled", due_in=-i)
        SendLog.objects.create(
            key=f"recalled{i}",
            status="sent",
            channel=f"c{i % 3}",
            recalled_at=world - timedelta(seconds=i),
            recalled_by="ops",
            recall_reason="wrong customer",
        )
    # One more than before recalls were counted: reminders_messages_recalled.
    assert queries() == before <= 13


# Access ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("token", "networks", "address", "header", "status"),
    [
        ("", [], "127.0.0.1", None, 403),  # nothing configured: nobody
        ("", [], "127.0.0.1", "Bearer anything", 403),
        ("s3cret-token", [], "127.0.0.1", "Bearer s3cret-token", 200),
        ("s3cret-token", [], "127.0.0.1", "bearer s3cret-token", 200),
        ("s3cret-token", [], "127.0.0.1", "Bearer wrong", 401),
        ("s3cret-token", [], "127.0.0.1", "Bearer s3cret-token2", 401),
        ("s3cret-token", [], "127.0.0.1", "Basic czNjcmV0LXRva2Vu", 401),
        ("s3cret-token", [], "127.0.0.1", None, 401),
        ("", ["10.0.0.0/8"], "10.1.2.3", None, 200),
        ("", ["10.0.0.0/8"], "::ffff:10.1.2.3", None, 200),
        ("", ["10.0.0.0/8"], "192.168.1.1", None, 403),
        ("", ["10.0.0.0/8", "fd00::/8"], "fd12::1", None, 200),
        ("", "10.0.0.0/8, 192.168.0.0/16", "192.168.1.1", None, 200),
        ("s3cret-token", ["10.0.0.0/8"], "10.1.2.3", None, 200),
        ("s3cret-token", ["10.0.0.0/8"], "10.1.2.3", "Bearer wrong", 401),
        ("s3cret-token", ["10.0.0.0/8"], "192.168.1.1", "Bearer s3cret-token", 200),
        ("s3cret-token", ["10.0.0.0/8"], "192.168.1.1", None, 401),
    ],
)
def test_access(client, settings, token, networks, address, header, status):
    settings.OPS_METRICS_TOKEN = token
    settings.OPS_METRICS_ALLOWED_NETWORKS = networks
    extra = {"REMOTE_ADDR": address}
    if header is not None:
        extra["HTTP_AUTHORIZATION"] = header
    response = client.get("/metrics", **extra)
    assert response.status_code == status
    if status == 200:
        assert response["Content-Type"].startswith("text/plain")
        assert b"reminders_runs_open" in response.content
    else:
        assert response.content == b""  # no detail
        assert ("WWW-Authenticate" in response) == (status == 401)
    assert "no-cache" in response["Cache-Control"]


def test_access__x_forwarded_for_is_not_believed(client, settings):
    settings.OPS_METRICS_ALLOWED_NETWORKS = ["10.0.0.0/8"]
    response = client.get("/metrics", REMOTE_ADDR="203.0.113.9", HTTP_X_FORWARDED_FOR="10.0.0.1")
    assert response.status_code == 403


def test_only_get_and_head(client, settings):
    settings.OPS_METRICS_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    for method in (client.post, client.put, client.delete, client.options):
        refused = method("/metrics")
        assert refused.status_code == 405, method
        assert {m.strip() for m in refused["Allow"].split(",")} == {"GET", "HEAD"}
    got, head = client.get("/metrics"), client.head("/metrics")
    assert got.status_code == head.status_code == 200
    # The same answer, headers and all, as a scraper probing with HEAD expects.
    assert head["Content-Type"] == got["Content-Type"]
    assert got["Content-Type"].startswith("text/plain; version=")
