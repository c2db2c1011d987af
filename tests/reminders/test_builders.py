"""A CRM's own message builders: plugged in by dotted path or decorator, their return
value made a message or refused naming them, and a builder that fails only failing the
run it was rendering."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.utils import timezone
from django.utils.translation import gettext

from reminders import api, checks, kinds
from reminders.engine import planning
from reminders.messages import builders
from reminders.models import ScheduledTask, TaskRun
from reminders.senders.memory import MemorySender
from tests.support.jobs import tick

pytestmark = pytest.mark.django_db

NINE_IN_SHANGHAI = datetime(2026, 12, 3, 1, 0, tzinfo=UTC)
HERE = __name__


# Builders the settings name by dotted path.


def shout(task: ScheduledTask, run: TaskRun) -> str:
    return f"CALL {task.payload['customer'].upper()} NOW"


def card(task: ScheduledTask, run: TaskRun) -> dict[str, Any]:
    return {
        "msgtype": "textcard",
        "textcard": {"title": gettext("Daily report"), "description": "Go", "url": "https://x.cn"},
    }


def explode_on_boom(task: ScheduledTask, run: TaskRun) -> str:
    if task.payload.get("customer") == "Boom":
        raise ZeroDivisionError("the CRM's bug")
    return "fine"


NOT_CALLABLE = 42


def returns(value: Any) -> Any:
    """A builder returning ``value``, named as the settings would name it."""

    def builder(task: ScheduledTask, run: TaskRun) -> Any:
        return value

    return builder


@pytest.fixture
def crm_kind() -> Iterator[str]:
    """A kind the CRM registers, with its own render, and no builder plugged in."""
    kinds.register(kinds.Kind("crm_visit", "Visit", lambda task, run: "the kind's own"))
    yield "crm_visit"
    kinds._registry.pop("crm_visit")
    builders.unregister("crm_visit")


def render(task: ScheduledTask) -> kinds.Content:
    return kinds.render(task, planning.new_run(task, NINE_IN_SHANGHAI))


def schedule(kind: str, at: datetime = NINE_IN_SHANGHAI, **payload: Any) -> ScheduledTask:
    return api.schedule(kind, "lisi", at=at, tz="Asia/Shanghai", payload=payload)


def stamp(task: ScheduledTask) -> str:
    return kinds.stamp(task, planning.new_run(task, task.run_at or NINE_IN_SHANGHAI))


# -- plugging one in ----------------------------------------------------------------------


def test_setting__a_dotted_path_builds_a_built_in_kind(settings):
    settings.REMINDERS_BUILDERS = {"follow_up": f"{HERE}.shout"}
    task = schedule("follow_up", customer="Acme")

    assert render(task) == kinds.Content("text", {"content": f"CALL ACME NOW\n{stamp(task)}"})


def test_decorator__builds_a_crms_own_kind_and_the_stamp_goes_last(crm_kind):
    @builders.builder(crm_kind)
    def visit(task: ScheduledTask, run: TaskRun) -> kinds.Content:
        return kinds.Content("markdown", {"content": f"**Visit** {task.payload['where']}"})

    task = schedule(crm_kind, where="Pudong")

    assert render(task) == kinds.Content(
        "markdown", {"content": f"**Visit** Pudong\n{stamp(task)}"}
    )


def test_order__the_setting_wins_over_the_decorator_which_wins_over_the_kind(crm_kind, settings):
    task = schedule(crm_kind, customer="Acme")
    assert render(task).body["content"].startswith("the kind's own")

    builders.builder(crm_kind)(returns("decorated"))
    assert render(task).body["content"].startswith("decorated")

    settings.REMINDERS_BUILDERS = {crm_kind: f"{HERE}.shout"}
    assert render(task).body["content"].startswith("CALL ACME NOW")


def test_builder__runs_in_the_tasks_language_and_may_return_wecoms_dict(settings):
    settings.REMINDERS_BUILDERS = {"daily_report": f"{HERE}.card"}
    task = schedule("daily_report", lang="zh-hans")

    assert render(task) == kinds.Content(
        "textcard",
        {"title": "日报", "description": f"Go\n{stamp(task)}", "url": "https://x.cn"},
    )


def test_content__of_a_built_in_kind_overrides_a_plugged_builder(settings):
    settings.REMINDERS_BUILDERS = {"follow_up": f"{HERE}.shout"}
    task = schedule("follow_up", content="Call ACME, the CRM wrote")

    assert render(task).body["content"] == f"Call ACME, the CRM wrote\n{stamp(task)}"


def test_content__a_crm_kind_may_ask_for_the_override(crm_kind):
    kinds.register(
        kinds.Kind("crm_note", "Note", lambda task, run: "ignored", content_override=True)
    )
    try:
        task = schedule("crm_note", content="From the CRM")
        assert render(task).body["content"] == f"From the CRM\n{stamp(task)}"
    finally:
        kinds._registry.pop("crm_note")


# -- what a builder returns ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (42, "returned int"),
        (None, "returned NoneType"),
        ({"msgtype": "text"}, 'without "msgtype" and a body'),
        ({"msgtype": "text", "text": {"content": "x"}, "safe": 1}, "keys beside the message: safe"),
        ({"msgtype": "text", "text": ["x"]}, "body that is list"),
        (kinds.Content("", {"content": "x"}), "not a name"),
        (kinds.Content("text", {"content": 5}), '"content" is not text'),
        (kinds.Content("textcard", {"title": None}), '"title" is not text'),
        ({"msgtype": "text", "text": {"content": "x", "at": timezone.now()}}, "JSON cannot carry"),
        ({"msgtype": "text", "text": {"content": "x", "n": float("nan")}}, "JSON cannot carry"),
    ],
)
def test_return__not_a_message_is_refused_on_payload_naming_the_builder(crm_kind, value, said):
    builders.builder(crm_kind)(returns(value))

    with pytest.raises(ValidationError) as caught:
        schedule(crm_kind)

    [message] = caught.value.message_dict["payload"]
    assert f"BuilderFailed: Builder {HERE}.returns.<locals>.builder of kind 'crm_visit'" in message
    assert said in message
    assert not ScheduledTask.objects.exists()


def test_raising__is_refused_on_payload_naming_the_builder_and_its_error(settings):
    settings.REMINDERS_BUILDERS = {"follow_up": f"{HERE}.explode_on_boom"}

    with pytest.raises(ValidationError) as caught:
        schedule("follow_up", customer="Boom")

    [message] = caught.value.message_dict["payload"]
    assert (
        f"Builder {HERE}.explode_on_boom of kind 'follow_up' raised ZeroDivisionError: "
        "the CRM's bug"
    ) in message


def test_tick__a_builder_that_raises_fails_its_run_only(settings, received, outbox, caplog):
    now = timezone.now()
    boom = schedule("follow_up", at=now, customer="Boom")
    fine = schedule("follow_up", at=now, customer="Fine")
    settings.REMINDERS_BUILDERS = {"follow_up": f"{HERE}.explode_on_boom"}  # after scheduling

    with caplog.at_level(logging.ERROR, logger="reminders.engine.delivery"):
        assert tick() == 1

    assert [(m.recipient, m.body["content"]) for m in outbox] == [("lisi", f"fine\n{stamp(fine)}")]
    failed = boom.runs.get()
    assert (failed.status, failed.error_code) == ("failed", "render")
    assert failed.error_message == (
        f"BuilderFailed: Builder {HERE}.explode_on_boom of kind 'follow_up' raised "
        "ZeroDivisionError: the CRM's bug"
    )
    assert fine.runs.get().status == "sent"
    assert ("run_failed", failed.pk, "failed") in received
    [record] = [r for r in caplog.records if r.name == "reminders.engine.delivery"]
    assert record.exc_info and record.exc_info[0].__name__ == "BuilderFailed"  # with traceback


def test_tick__a_path_that_stopped_importing_fails_the_run_saying_so(settings, outbox):
    task = schedule("follow_up", at=timezone.now())
    settings.REMINDERS_BUILDERS = {"follow_up": f"{HERE}.gone"}

    assert tick() == 0

    run = task.runs.get()
    assert run.error_code == "render"
    assert "REMINDERS_BUILDERS['follow_up'] cannot be imported" in run.error_message
    assert MemorySender.outbox == []


# -- checks -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ({"follow_up": f"{HERE}.gone"}, "cannot be imported"),
        ({"follow_up": "nodots"}, "cannot be imported"),
        ({"follow_up": "no_such_module.build"}, "cannot be imported"),
        ({"follow_up": f"{HERE}.NOT_CALLABLE"}, "a int, not a callable"),
        (["follow_up"], "must be a dict"),
        ({"follow_up": shout}, "must be a dict of kind names to dotted paths"),
    ],
)
def test_checks__a_builder_setting_that_cannot_be_used_is_e011(settings, value, said):
    settings.REMINDERS_BUILDERS = value

    [error] = [m for m in checks.check_settings() if m.id == "reminders.E011"]
    assert said in error.msg
    with pytest.raises(SystemCheckError, match=r"reminders\.E011"):
        call_command("check")


def test_checks__builders_that_import_pass(settings):
    settings.REMINDERS_BUILDERS = {"follow_up": f"{HERE}.shout", "birthday": f"{HERE}.card"}
    settings.REMINDERS_REPORT_URL = "https://crm.example/reports"

    assert [m.id for m in checks.check_settings() if m.id.startswith("reminders.")] == []


def test_checks__a_builder_for_a_kind_nobody_registered_is_w006(settings):
    settings.REMINDERS_BUILDERS = {"folow_up": f"{HERE}.shout"}
    builders.builder("visti")(shout)
    try:
        warnings = [m for m in checks.check_settings() if m.id == "reminders.W006"]
    finally:
        builders.unregister("visti")

    assert ["'folow_up'" in warnings[0].msg, "'visti'" in warnings[1].msg] == [True, True]


@pytest.mark.parametrize("url", ["crm.example/reports", "ftp://crm.example", 42])
def test_checks__a_report_url_that_is_not_a_link_is_e012(settings, url):
    settings.REMINDERS_REPORT_URL = url

    [error] = [m for m in checks.check_settings() if m.id == "reminders.E012"]
    assert error.msg.startswith("REMINDERS_REPORT_URL ")
