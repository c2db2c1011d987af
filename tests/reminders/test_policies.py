"""A kind's policy, and ``REMINDERS_KINDS`` overriding it field by field."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from django.core import checks

from reminders import kinds
from reminders.checks import check_settings
from reminders.engine import planning
from reminders.exceptions import TransientSendError
from reminders.schedule.policies import Policy, PolicyError
from reminders.senders.memory import MemorySender
from tests.support.jobs import tick


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"priority": "urgent"}, "priority"),
        ({"missed": "later"}, "missed"),
        ({"key_per": "week"}, "key_per"),
        ({"jitter_seconds": -1}, "jitter_seconds"),
        ({"batches": 0}, "batches"),
        ({"batches": 2.5}, "batches"),
        ({"max_lateness_seconds": 0}, "max_lateness_seconds"),
        ({"send_by": "25:00"}, "send_by"),
        ({"send_by": "noon"}, "send_by"),
        ({"retry_delays": (60, 0)}, "retry_delays"),
        ({"compensate_max_age_seconds": True}, "compensate_max_age_seconds"),
    ],
)
def test_policy__a_bad_value_is_refused_naming_the_field(values, field):
    with pytest.raises(PolicyError, match=field):
        Policy(**values)


def test_policy__overrides_replace_only_the_fields_they_name():
    base = Policy(priority="high", jitter_seconds=300)
    changed = base.with_overrides({"jitter_seconds": 60, "retry_delays": [5, 10]})
    assert (changed.priority, changed.jitter_seconds, changed.retry_delays) == ("high", 60, (5, 10))
    with pytest.raises(PolicyError, match="jiter_seconds"):
        base.with_overrides({"jiter_seconds": 60})


def test_built_in_kinds__reports_are_staggered_and_time_critical_kinds_are_not():
    for name in ("daily_report", "weekly_report"):
        policy = kinds.policy(name)
        assert (policy.jitter_seconds, policy.batches, policy.missed) == (300, 10, "compensate")
    for name in ("birthday", "inquiry_timeout"):
        policy = kinds.policy(name)
        assert (policy.priority, policy.jitter_seconds, policy.batches) == ("high", 0, 1)
    assert kinds.policy("birthday").send_by == "12:00"


def test_settings__override_a_kind_s_policy(settings):
    settings.REMINDERS_KINDS = {"daily_report": {"jitter_seconds": 0, "batches": 1}}
    policy = kinds.policy("daily_report")
    assert (policy.jitter_seconds, policy.batches, policy.missed) == (0, 1, "compensate")


def test_settings__a_kept_policy_follows_every_change_of_the_overrides(settings):
    """A kind's policy is built once and kept: a new setting, a dict changed in place, a
    list inside it changed in place and a kind registered again each give a new one."""
    settings.REMINDERS_KINDS = {"follow_up": {"retry_delays": [60, 300]}}
    first = kinds.policy("follow_up")
    assert kinds.policy("follow_up") is first
    assert first.retry_delays == (60, 300)
    settings.REMINDERS_KINDS["follow_up"]["retry_delays"].append(900)
    assert kinds.policy("follow_up").retry_delays == (60, 300, 900)
    settings.REMINDERS_KINDS["follow_up"]["priority"] = "low"
    assert kinds.policy("follow_up").priority == "low"
    settings.REMINDERS_KINDS = {}
    assert kinds.policy("follow_up") == kinds.get("follow_up").policy
    original = kinds.get("follow_up")
    try:
        kinds.register(dataclasses.replace(original, policy=Policy(priority="high")))
        assert kinds.policy("follow_up").priority == "high"
    finally:
        kinds.register(original)
    assert kinds.policy("follow_up") == original.policy


@pytest.mark.parametrize(
    ("value", "level", "check_id"),
    [
        ({"daily_report": {"jiter_seconds": 5}}, "ERROR", "reminders.E009"),
        ({"daily_report": {"missed": "never"}}, "ERROR", "reminders.E009"),
        ({"daily_report": 5}, "ERROR", "reminders.E009"),
        ({"no_such_kind": {"batches": 2}}, "WARNING", "reminders.W004"),
    ],
)
def test_checks__bad_kind_settings_are_named(settings, value, level, check_id):
    settings.REMINDERS_KINDS = value
    [message] = check_settings()
    assert (message.id, message.level) == (check_id, getattr(checks, level))


@pytest.mark.django_db
def test_stagger__follows_the_kind_s_policy(make_task, settings):
    settings.REMINDERS_KINDS = {"follow_up": {"jitter_seconds": 600, "batches": 3}}
    offsets = set()
    for number in range(30):
        task = make_task(recipient=f"member{number}", at=None, cron="0 9 * * *")
        run = planning.new_run(task, task.next_run)
        offsets.add(run.due_at - run.occurrence)
    assert max(offsets) < timedelta(seconds=600 + 2 * 60)
    assert len(offsets) > 10  # spread, not one moment
    assert any(offset >= timedelta(seconds=120) for offset in offsets)  # the third batch


@pytest.mark.django_db
def test_retry_delays__a_kind_s_own_come_before_the_setting(make_task, outbox, settings):
    settings.REMINDERS_RETRY_DELAYS = "900"
    settings.REMINDERS_KINDS = {"follow_up": {"retry_delays": [7]}}
    task = make_task()
    MemorySender.script[:] = [TransientSendError("busy", code="-1")]
    tick()
    run = task.runs.get()
    assert run.status == "retrying"
    assert timedelta(seconds=6) < run.next_attempt_at - run.started_at <= timedelta(seconds=8)


@pytest.mark.django_db
@pytest.mark.parametrize(("key_per", "per_day"), [("day", True), ("occurrence", False)])
def test_key_per__the_policy_chooses_the_key_s_granularity(make_task, settings, key_per, per_day):
    settings.REMINDERS_KINDS = {"follow_up": {"key_per": key_per}}
    task = make_task(cron="0 9,15 * * *", tz="Asia/Shanghai")
    key = task.ledger_key(task.next_run)
    assert key.endswith("T00:00+08:00") is per_day
