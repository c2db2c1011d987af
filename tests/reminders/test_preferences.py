"""Recipients' preferences: the CRM's API (``reminders.preferences``), its refusals, the
history it keeps, and the engine skipping a run of a kind its recipient opted out of."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import IntegrityError
from django.utils import timezone

from reminders import api, preferences
from reminders.models import Preference, PreferenceChange, SendLog, TaskRun
from reminders.schedule.policies import Policy, PolicyError
from reminders.senders.memory import MemorySender
from tests.support.jobs import tick

pytestmark = pytest.mark.django_db


def test_set__records_the_choice_and_who_made_it_when_and_why() -> None:
    choice = preferences.set("alice", "birthday", opted_out=True, by="alice", reason="no fuss")
    assert (choice.opted_out, choice.changed_by, choice.reason) == (True, "alice", "no fuss")
    got = preferences.get("alice")["birthday"]
    assert (got.opted_out, got.changed_by, got.reason) == (True, "alice", "no fuss")
    preferences.set("alice", "birthday", opted_out=False, by="ops.li", reason="she asked back")
    assert preferences.get("alice")["birthday"].opted_out is False
    history = list(PreferenceChange.objects.values_list("opted_out", "changed_by", "reason"))
    assert history == [(False, "ops.li", "she asked back"), (True, "alice", "no fuss")]
    assert Preference.objects.count() == 1  # one row per recipient and kind


def test_get__every_kind_saying_which_are_mandatory() -> None:
    choices = preferences.get("bob")
    assert choices["follow_up"].opted_out is False and choices["follow_up"].changed_by == ""
    assert {kind for kind, choice in choices.items() if choice.mandatory} == {
        "daily_report",
        "weekly_report",
        "inquiry_timeout",
        "inquiry_taken",
    }


def test_set__a_crm_user_is_its_member_id(settings: Any) -> None:
    user = get_user_model().objects.create_user("wang.fang")
    preferences.set(user, "follow_up", opted_out=True, by="crm")
    assert Preference.objects.get().recipient == "wang.fang"
    assert preferences.get(user)["follow_up"].opted_out is True


@pytest.mark.parametrize(
    ("call", "field"),
    [
        ({"user": "@all"}, "user"),
        ({"user": 42}, "user"),
        ({"kind": "no_such_kind"}, "kind"),
        ({"kind": "daily_report"}, "kind"),  # mandatory
        ({"opted_out": "yes"}, "opted_out"),
        ({"by": "  "}, "by"),
    ],
)
def test_set__bad_input_names_the_field_and_saves_nothing(call: dict[str, Any], field: str) -> None:
    values = {"user": "alice", "kind": "birthday", "opted_out": True, "by": "alice", **call}
    user, kind = values.pop("user"), values.pop("kind")
    with pytest.raises(ValidationError) as raised:
        preferences.set(user, kind, **values)
    assert field in raised.value.message_dict
    assert not Preference.objects.exists() and not PreferenceChange.objects.exists()


def test_set__opting_back_in_to_a_mandatory_kind_is_allowed() -> None:
    preferences.set("alice", "daily_report", opted_out=False, by="ops")
    assert preferences.get("alice")["daily_report"].opted_out is False


def test_database__a_change_without_who_is_refused() -> None:
    with pytest.raises(IntegrityError):
        Preference.objects.create(
            recipient="a", kind="birthday", changed_by="", changed_at=timezone.now()
        )


def test_policy__mandatory_is_checked_and_overridable(settings: Any) -> None:
    with pytest.raises(PolicyError, match="mandatory"):
        Policy(mandatory="yes")  # type: ignore[arg-type]
    settings.REMINDERS_KINDS = {"birthday": {"mandatory": True}}
    with pytest.raises(ValidationError) as raised:
        preferences.set("alice", "birthday", opted_out=True, by="alice")
    assert "kind" in raised.value.message_dict


# --- The engine -------------------------------------------------------------------------


def test_engine__a_run_of_a_kind_opted_out_of_is_skipped_saying_why(outbox: list) -> None:
    preferences.set("alice", "follow_up", opted_out=True, by="alice", reason="too many")
    skipped = api.schedule("follow_up", "alice", at=timezone.now(), channel="memory")
    sent = api.schedule("follow_up", "bob", at=timezone.now(), channel="memory")
    assert tick() == 1
    run = TaskRun.objects.get(task=skipped)
    assert (run.status, run.error_code) == ("skipped", "opted_out")
    assert "alice opted out of follow_up (alice, " in run.error_message
    assert "too many" in run.error_message
    assert not SendLog.objects.filter(run=run).exists()
    assert [m.recipient for m in MemorySender.outbox] == ["bob"]
    assert TaskRun.objects.get(task=sent).status == "sent"


def test_engine__a_choice_reaches_runs_planned_before_it(outbox: list) -> None:
    task = api.schedule("follow_up", "alice", at=timezone.now(), channel="memory")
    from reminders.engine import dispatch

    dispatch.materialize()
    assert TaskRun.objects.get(task=task).status == "scheduled"
    preferences.set("alice", "follow_up", opted_out=True, by="alice")
    assert tick() == 0
    assert TaskRun.objects.get(task=task).error_code == "opted_out"


def test_engine__a_mandatory_kind_goes_whatever_an_old_preference_says(
    settings: Any, outbox: list, time_machine: Any
) -> None:
    # A morning: a birthday scheduled "now" after 12:00 Beijing has passed its send_by.
    time_machine.move_to(datetime(2027, 3, 4, 9, 30, tzinfo=ZoneInfo("Asia/Shanghai")))
    preferences.set("alice", "birthday", opted_out=True, by="alice")
    settings.REMINDERS_KINDS = {"birthday": {"mandatory": True}}
    task = api.schedule("birthday", "alice", at=timezone.now(), channel="memory")
    assert tick() == 1
    assert TaskRun.objects.get(task=task).status == "sent"


def test_engine__opting_back_in_sends_again(outbox: list) -> None:
    preferences.set("alice", "follow_up", opted_out=True, by="alice")
    preferences.set("alice", "follow_up", opted_out=False, by="alice")
    api.schedule("follow_up", "alice", at=timezone.now(), channel="memory")
    assert tick() == 1
