"""The ops surfaces with digests: a run folded into a digest is pending (in flight) until
its digest goes, never failed and never left out of a count; the figures of runs count
runs (a digest is a run of its own beside the runs it carries), those of messages count
messages (the digest is one, the ledger's row); the plan, ``reminders_stats`` and
``/metrics`` report the runs in digests. The digests are made by the engine itself, at
frozen times, as tests/reminders/test_digests.py makes them; where the ledger's own clock
(the real one) matters, in the next window of the real clock."""

from __future__ import annotations

import json
from datetime import date, timedelta
from io import StringIO
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

import pytest
from django.core.management import call_command
from django.utils import timezone

from ops import dashboard_page, metrics, statistics, stats
from ops.stats import text as stats_text
from ops.stats.wave import quota as wave_quota
from reminders import api, preferences
from reminders.exceptions import TransientSendError
from reminders.models import DIGEST_KEY, SendLog, TaskRun
from reminders.schedule import timing
from reminders.senders.memory import MemorySender
from tests.support.digests import THURSDAY, TZ, at, follow_up, release, tick_at

from .test_dashboard import PAGE, changelist
from .test_metrics import of, scrape

pytestmark = pytest.mark.django_db

# The statuses that are counted apart from "pending": every other one is pending.
ENDS = {"sent", "failed", "expired", "unknown", "skipped", "cancelled"}


@pytest.fixture(autouse=True)
def digested(settings: Any) -> None:
    settings.REMINDERS_KINDS = {
        "follow_up": {"digest_seconds": 900, "max_lateness_seconds": 400 * 24 * 3600}
    }


class AppMemorySender(MemorySender):
    """The memory sender, its messages counted as a WeCom app's (the daily quota)."""

    spends_app_quota: ClassVar[bool] = True


@pytest.fixture
def memory_is_an_app(settings: Any) -> None:
    """The "memory" channel spends WeCom's daily quota, as the WeCom app channel does."""
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        "memory": {"BACKEND": f"{__name__}.AppMemorySender"},
    }


class Folded:
    """Three follow-ups for alice in the real clock's next window, folded by the engine
    into one digest at the window's end (``went``): sent, or waiting to retry."""

    def __init__(self, *, fail_first: bool = False) -> None:
        _, start = timing.window(timezone.now(), TZ, 900)
        self.tasks = [
            follow_up("alice", start + timedelta(minutes=m), c)
            for m, c in ((0, "ACME"), (5, "Globex"), (10, "Initech"))
        ]
        self.went = release("alice", start + timedelta(minutes=15))
        if fail_first:
            MemorySender.script.append(TransientSendError("busy", code="-1"))
        tick_at(self.went)
        self.digest = TaskRun.objects.get(task__payload__has_key=DIGEST_KEY)
        self.items = [TaskRun.objects.get(task=task) for task in self.tasks]
        self.day = timing.local_date(self.went, TZ)
        self.after = self.went + timedelta(minutes=1)

    def compute(self) -> stats.Stats:
        return stats.compute(self.day, self.after)


def statuses(runs: list[TaskRun]) -> set[str]:
    return {TaskRun.objects.get(pk=run.pk).status for run in runs}


# Every status is counted ----------------------------------------------------------------


def test_statuses__each_is_pending_or_an_end_of_its_own_none_left_out():
    assert set(TaskRun.Status.values) == set(stats.PENDING) | ENDS
    assert not set(stats.PENDING) & ENDS
    assert TaskRun.Status.FOLDED in stats.PENDING
    assert TaskRun.Status.FOLDED in metrics.OPEN
    assert TaskRun.Status.FOLDED in dashboard_page.PLANNED
    counts = stats.Counts.of_statuses({"folded": 3, "running": 1, "sent": 2})
    assert (counts.pending, counts.planned, counts.ended) == (4, 6, 2)


# A digest not sent yet --------------------------------------------------------------------


def test_day__a_pending_digests_runs_are_pending_never_failed():
    world = Folded(fail_first=True)
    assert statuses(world.items) == {TaskRun.Status.FOLDED}
    assert statuses([world.digest]) == {TaskRun.Status.RETRYING}

    numbers = world.compute()

    # The three runs folded, and the digest waiting to retry.
    assert numbers.totals == stats.Counts(pending=4)
    assert [kind.counts for kind in numbers.kinds] == [stats.Counts(pending=4)]
    assert (numbers.failures, numbers.latest_failures) == ([], [])
    assert sum(plan.folded for plan in numbers.plan) == 3
    normal = next(plan for plan in numbers.plan if plan.priority == "normal")
    assert normal.folded == 3


def test_dashboard__links_the_runs_in_a_digest_and_shows_no_failure(admin_client):
    world = Folded(fail_first=True)

    response = admin_client.get(PAGE, {"date": world.day.isoformat()})
    ctx, html = response.context, response.content.decode()

    totals = {cell.label: cell for cell in ctx["totals"]}
    assert (totals["Pending"].value, totals["Failed"].value) == ("4", "0")
    assert not any(cell.alert for cell in ctx["totals"])
    assert changelist(admin_client, totals["Pending"].link) == sorted(
        run.pk for run in [world.digest, *world.items]
    )
    assert ctx["failures"] == [] and ctx["latest"] == []
    normal = next(row for row in ctx["plan"] if row["priority"] == "normal")
    assert normal["folded"].value == "3"
    assert parse_qs(urlsplit(normal["folded"].link).query)["status__exact"] == ["folded"]
    assert changelist(admin_client, normal["folded"].link) == sorted(r.pk for r in world.items)
    assert "In a digest" in html
    assert "These are runs, not messages" in html


def test_reminders_stats__reports_the_runs_in_digests():
    world = Folded(fail_first=True)
    out = StringIO()
    call_command("reminders_stats", "--date", world.day.isoformat(), stdout=out)
    lines = out.getvalue().splitlines()

    head = next(line for line in lines if line.startswith("priority"))
    assert head.split()[-3:] == ["in", "a", "digest"]
    normal = next(line for line in lines if line.startswith("normal "))
    assert normal.split()[-1] == "3"

    out = StringIO()
    call_command("reminders_stats", "--date", world.day.isoformat(), "--json", stdout=out)
    data = json.loads(out.getvalue())
    assert {p["priority"]: p["folded"] for p in data["plan"]["priorities"]} == {
        "high": 0,
        "normal": 3,
        "low": 0,
    }
    assert data["totals"]["pending"] == 4 and data["totals"]["failed"] == 0


def test_text__the_plan_table_has_a_column_for_runs_in_a_digest():
    world = Folded(fail_first=True)
    rendered = stats_text.render(world.compute())
    assert "in a digest" in rendered


def test_metrics__the_runs_in_digests_are_open_runs():
    world = Folded(fail_first=True)
    samples, _ = scrape(world.after)
    assert of(samples, "reminders_runs_open") == {
        ("follow_up", "folded"): 3,
        ("follow_up", "retrying"): 1,
    }
    assert of(samples, "reminders_runs_finished") == {}


def test_wave__a_digest_waiting_to_retry_is_one_message_ahead_its_runs_none():
    world = Folded(fail_first=True)
    retry = TaskRun.objects.get(pk=world.digest.pk).next_attempt_at

    wave = stats.compute(world.day, retry - timedelta(seconds=30)).wave

    assert wave is not None
    assert sum(minute.total for minute in wave.minutes) == 1
    assert [(m.recipient, m.next_hour) for m in wave.members] == [("alice", 1)]


# A digest sent ----------------------------------------------------------------------------


@pytest.mark.usefixtures("memory_is_an_app")
def test_day__a_sent_digest_is_four_runs_sent_and_one_message(time_machine: Any):
    # The ledger stamps its row on the real clock, and the day's quota counts the
    # messages of the digest's day: a morning of its own, not the minute before midnight.
    time_machine.move_to(at(THURSDAY, 9))
    world = Folded()
    assert statuses([world.digest, *world.items]) == {TaskRun.Status.SENT}
    assert SendLog.objects.get().run_id == world.digest.pk

    numbers = world.compute()

    assert numbers.totals == stats.Counts(sent=4)  # runs
    assert numbers.wave is not None
    assert numbers.wave.quota.used == 1  # messages: the ledger's
    assert statistics.our_count(["memory"], world.day) == 1


def test_metrics__runs_finished_count_runs_and_sends_count_messages():
    world = Folded()
    samples, _ = scrape(world.after)
    assert of(samples, "reminders_runs_finished") == {("follow_up", "sent"): 4}
    assert of(samples, "reminders_sends") == {("memory", "sent"): 1}


@pytest.mark.usefixtures("memory_is_an_app")
def test_wave__tomorrows_estimate_counts_last_weeks_digest_once():
    """Recurring follow-ups folded a week before tomorrow: one message, not three."""
    thursday = date(2026, 12, 3)
    for minute, customer in ((0, "ACME"), (5, "Globex"), (10, "Initech")):
        task = api.schedule(
            "follow_up",
            "alice",
            cron=f"{minute} 9 * * *",
            tz=TZ,
            channel="memory",
            payload={"customer": customer, "url": f"https://crm.example/c/{customer}"},
        )
        task.plan_first_run(at(thursday, 8))  # as if scheduled that morning
        task.save(update_fields=["next_run"])
    tick_at(at(thursday, 8, 59))
    tick_at(release("alice", at(thursday, 9, 15)))
    recurring = TaskRun.objects.exclude(task__cron="")
    assert recurring.filter(status=TaskRun.Status.SENT, digest__isnull=False).count() == 3
    assert SendLog.objects.count() == 1

    # Six days on, tomorrow is the same weekday as that Thursday.
    quota = wave_quota(at(thursday + timedelta(days=6), 12))

    assert quota.tomorrow_estimated == 1


# Held for a digest -------------------------------------------------------------------------


def test_metrics__runs_held_for_a_digests_window_or_a_throttle_are_open_not_a_backlog(
    settings: Any,
):
    settings.REMINDERS_KINDS = {
        "follow_up": {"throttle_per_hour": 1, "max_lateness_seconds": 400 * 24 * 3600}
    }
    settings.REMINDERS_DIGEST_SECONDS = 3600
    preferences.set("alice", "birthday", digest=True, by="crm", reason="too many")
    thursday = date(2026, 12, 3)
    for name in ("Li", "Wang"):
        api.schedule(
            "birthday", "alice", at=at(thursday, 9), tz=TZ, channel="memory", payload={"name": name}
        )
    for minute in (0, 10, 20):
        follow_up("bob", at(thursday, 9, minute), f"C{minute}")
        tick_at(at(thursday, 9, minute))
    held = TaskRun.objects.filter(status__in=TaskRun.WAITING)
    assert sorted(held.values_list("task__kind", "error_code")) == [
        ("birthday", "digest"),
        ("birthday", "digest"),
        ("follow_up", "throttled"),
        ("follow_up", "throttled"),
    ]

    samples, _ = scrape(at(thursday, 9, 30))

    open_runs = of(samples, "reminders_runs_open")
    assert sum(n for (kind, _), n in open_runs.items() if kind == "birthday") == 2
    assert sum(n for (kind, _), n in open_runs.items() if kind == "follow_up") == 2
    assert of(samples, "reminders_backlog_runs") == {}  # waiting for 10:00, not late
