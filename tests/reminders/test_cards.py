"""Cards people act on: a follow-up or an inquiry alert is a WeCom ``template_card`` of
``card_type`` ``button_interaction`` where its channel carries one (a WeCom app), in the
task's language, within WeCom's limits, with the stamp on it and a ``task_id`` that
names its run; a CRM changes the buttons per kind, and what it returns is held to
WeCom's rules. Text everywhere else, as before."""

# Chinese text is written with Chinese (full-width) punctuation.
# ruff: noqa: RUF001

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from reminders import kinds
from reminders.engine import planning
from reminders.exceptions import BuilderFailed
from reminders.messages import cards
from reminders.messages.cards import DONE, SNOOZE, TAKE, Button
from reminders.models import ScheduledTask, TaskRun
from reminders.senders import get_sender
from reminders.senders.base import Message, render_body
from reminders.senders.template_card import problem, width
from tests.reminders.callback.test_view import callback_settings

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("card_channels")]
__all__ = ["callback_settings"]

NINE_IN_SHANGHAI = datetime(2026, 12, 3, 1, 0, tzinfo=UTC)
LINK = "https://crm.example/followups/7"
FOLLOW_UP = {"customer": "ACME 有限公司", "subject": "Renewal quote", "url": LINK}
INQUIRY = {"customer": "Globex", "subject": "Bulk order", "minutes": 45, "url": LINK}

Make = Callable[..., ScheduledTask]


@pytest.fixture
def card_channels(carrier_channels: None, callback_settings: None, settings: Any) -> None:
    """Beside the WeCom app (``wecom``) and robot (``robot``) that are never reached: a
    memory channel that carries cards as the WeCom app does; the callback configured,
    so that their clicks come back (``test_cards_callback``: without it, no buttons)."""
    settings.WECOM_AGENT_ID = "1"  # the app channel's agent
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        "memory_cards": {
            "BACKEND": "reminders.senders.memory.MemorySender",
            "OPTIONS": {"cards": True},
        },
    }


@pytest.fixture(autouse=True)
def _no_hooks() -> Iterator[None]:
    yield
    cards._hooks.clear()


@pytest.fixture
def task(make_task: Make) -> Make:
    """Factory: a task to lisi at 09:00 in Shanghai on 2026-12-03, on the WeCom app."""

    def make(kind: str, channel: str = "wecom", **payload: Any) -> ScheduledTask:
        return make_task(
            kind, "lisi", at=NINE_IN_SHANGHAI, tz="Asia/Shanghai", channel=channel, payload=payload
        )

    return make


def planned(task: ScheduledTask) -> TaskRun:
    """The task's run of 09:00 on 2026-12-03, as if saved (it has an id of its own)."""
    run = planning.new_run(task, NINE_IN_SHANGHAI)
    run.pk = 1000 + task.pk
    return run


def render(task: ScheduledTask, run: TaskRun | None = None, *, makeup: bool = False) -> Any:
    run = run or planned(task)
    run.is_compensation = makeup
    return kinds.render(task, run)


def stamp(task: ScheduledTask) -> str:
    return f"— 2026-12-03 09:00 · #{task.pk}"


def task_id(run: TaskRun) -> str:
    created = run.created_at.isoformat() if run.created_at else ""
    name = f"{run.ledger_key}|{created}"
    return f"r{run.pk}-{hashlib.sha1(name.encode()).hexdigest()[:10]}"  # noqa: S324


# -- what each card says -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lang", "expected"),
    [
        (
            "en",
            {
                "source": {"desc": "Follow-up reminder"},
                "main_title": {
                    "title": "Follow-up: ACME 有限公司",
                    "desc": "You have a customer follow-up due.",
                },
                "sub_title_text": "Subject: Renewal quote\nDue: 2026-12-03 09:00",
                "horizontal_content_list": [
                    {"keyname": "Customer", "value": "ACME 有限公司"},
                    {"type": 1, "keyname": "Link", "value": "View", "url": LINK},
                ],
                "button_list": [
                    {"key": "done", "text": "Done", "style": 1},
                    {"key": "snooze_1h", "text": "Remind me in 1 hour", "style": 2},
                ],
            },
        ),
        (
            "zh-hans",
            {
                "source": {"desc": "跟进提醒"},
                "main_title": {
                    "title": "跟进提醒：ACME 有限公司",
                    "desc": "你有一项客户跟进到期了。",
                },
                "sub_title_text": "主题：Renewal quote\n跟进时间：2026-12-03 09:00",
                "horizontal_content_list": [
                    {"keyname": "客户", "value": "ACME 有限公司"},
                    {"type": 1, "keyname": "链接", "value": "查看详情", "url": LINK},
                ],
                "button_list": [
                    {"key": "done", "text": "已完成", "style": 1},
                    {"key": "snooze_1h", "text": "1小时后提醒", "style": 2},
                ],
            },
        ),
    ],
)
def test_follow_up__to_a_wecom_app_is_a_card_with_done_and_remind_me_later(task, lang, expected):
    follow_up = task("follow_up", **FOLLOW_UP, lang=lang)

    content = render(follow_up)

    assert content == kinds.Content(
        "template_card",
        {
            "card_type": "button_interaction",
            **expected,
            "sub_title_text": f"{expected['sub_title_text']}\n{stamp(follow_up)}",
            "task_id": task_id(planned(follow_up)),
        },
    )
    assert problem(content.body) is None


@pytest.mark.parametrize(
    ("lang", "title", "desc", "sub_title", "buttons"),
    [
        (
            "en",
            "Escalated inquiry: Globex",
            "A customer inquiry that was not answered has been escalated to you.",
            [
                "Subject: Bulk order",
                "Waiting for a reply: 45 minutes",
                "Escalated from: zhangsan, the first recipient",
            ],
            ["I'll take it", "Done", "Remind me in 1 hour"],
        ),
        (
            "zh-hans",
            "询盘升级：Globex",
            "一条未及时回复的客户询盘已升级给你。",
            ["主题：Bulk order", "已等待回复：45 分钟", "升级自：zhangsan（首位接收人）"],
            ["我来处理", "已完成", "1小时后提醒"],
        ),
    ],
)
def test_inquiry__a_card_whose_first_button_is_take_it(task, lang, title, desc, sub_title, buttons):
    inquiry = task("inquiry_timeout", **INQUIRY, escalated_from="zhangsan", lang=lang)

    body = render(inquiry).body

    assert body["main_title"] == {"title": title, "desc": desc}
    assert body["sub_title_text"].splitlines() == [*sub_title, stamp(inquiry)]
    assert [b["key"] for b in body["button_list"]] == [TAKE, DONE, SNOOZE]
    assert [b["text"] for b in body["button_list"]] == buttons
    assert [b["style"] for b in body["button_list"]] == [1, 2, 2]
    assert body["horizontal_content_list"][0]["value"] == "Globex"
    assert problem(body) is None


def test_inquiry__without_details_the_headline_is_the_line_the_stamp_goes_under(task):
    bare = task("inquiry_timeout")

    body = render(bare).body

    assert body["main_title"] == {"title": "Inquiry waiting too long"}
    assert body["sub_title_text"].splitlines() == [
        "A customer inquiry has been waiting too long for your reply.",
        stamp(bare),
    ]
    assert "horizontal_content_list" not in body


def test_long_crm_text__is_cut_to_wecoms_lengths_the_stamp_and_words_never(task):
    inquiry = task(
        "inquiry_timeout", customer="环球贸易" * 50, subject="Bulk order " * 60, minutes=5
    )

    body = render(inquiry, makeup=True).body

    assert problem(body) is None
    assert body["main_title"]["title"].startswith("Inquiry waiting: 环球贸易")
    assert body["main_title"]["title"].endswith("…")
    assert width(body["main_title"]["title"]) <= 72
    assert width(body["horizontal_content_list"][0]["value"]) <= 60
    lines = body["sub_title_text"].splitlines()
    assert lines[0].startswith("Subject: Bulk order") and lines[0].endswith("…")
    assert lines[1:] == [
        "Waiting for a reply: 5 minutes",
        "Make-up for 2026-12-03 09:00, missed.",
        stamp(inquiry),
    ]
    assert width(body["sub_title_text"]) > 320 - 4  # cut, not dropped
    get_sender("wecom").check_message(Message("lisi", "template_card", body, ""))


# -- where cards go ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["follow_up", "inquiry_timeout"])
def test_channel__an_app_gets_a_card_a_robot_text_as_before(task, kind):
    assert render(task(kind, **INQUIRY)).msgtype == "template_card"
    assert render(task(kind, channel="memory_cards", **INQUIRY)).msgtype == "template_card"

    robot = render(task(kind, channel="robot", **INQUIRY))
    assert robot.msgtype == "text"
    assert robot.body["content"].splitlines()[-2] == LINK
    # A channel that carries no card but a textcard (a plain memory channel) gets one.
    assert render(task(kind, channel="memory", **INQUIRY)).msgtype == "textcard"


def test_channel__the_capability_is_the_senders(settings):
    assert get_sender("wecom").carries_cards is True
    assert get_sender("robot").carries_cards is False
    assert get_sender("memory").carries_cards is False
    assert get_sender("memory_cards").carries_cards is True
    assert get_sender("console").carries_cards is False


def test_channel__the_crms_own_content_stays_text(task):
    own = task("follow_up", content="Call ACME", url=LINK)

    assert render(own) == kinds.Content("text", {"content": f"Call ACME\n{stamp(own)}"})


@pytest.mark.parametrize("kind", ["daily_report", "weekly_report", "birthday"])
def test_channel__the_other_kinds_are_unchanged(task, kind):
    assert render(task(kind, url=LINK)).msgtype in ("textcard", "text")


# -- the stamp and the task_id -------------------------------------------------------------


def test_stamp__two_occurrences_of_one_task_never_look_alike(make_task):
    hourly = make_task("follow_up", "lisi", cron="0 * * * *", tz="UTC", channel="wecom")
    runs = [planning.new_run(hourly, NINE_IN_SHANGHAI + timedelta(hours=hour)) for hour in range(3)]
    for number, run in enumerate(runs, 1):
        run.pk = 1000 + number  # saved runs: each has its own id

    bodies = [kinds.render(hourly, run).body for run in runs]

    assert len({body["sub_title_text"] for body in bodies}) == 3
    assert len({body["task_id"] for body in bodies}) == 3
    assert len({render_body("template_card", body) for body in bodies}) == 3


def test_stamp__a_run_rendered_again_elsewhere_is_the_same_bytes(task):
    first = task("inquiry_timeout", **INQUIRY, escalated_from="zhangsan", lang="zh-hans")
    again = ScheduledTask.objects.get(pk=first.pk)  # as a retry in another process reads it

    mine, other = render(first, makeup=True), render(again, planned(again), makeup=True)

    assert render_body(mine.msgtype, mine.body) == render_body(other.msgtype, other.body)


def test_stamp__a_make_up_says_so_before_the_stamp(task):
    follow_up = task("follow_up", **FOLLOW_UP, lang="zh-hans")

    lines = render(follow_up, makeup=True).body["sub_title_text"].splitlines()

    assert lines[-2:] == ["补发：2026-12-03 09:00 未按时发出的提醒。", stamp(follow_up)]


def test_task_id__names_its_run_and_reads_back(task):
    follow_up = task("follow_up")
    run = planned(follow_up)

    assert cards.task_id(run) == task_id(run) == render(follow_up, run).body["task_id"]
    assert cards.run_pk(cards.task_id(run)) == run.pk
    assert len(cards.task_id(run).encode()) <= 128


def test_task_id__differs_for_a_run_made_again_under_the_same_id_and_key(task):
    # A database restored from a backup hands out run ids and ledger keys again; WeCom
    # keeps every task_id it took for good: the new run's card must not carry the old id.
    run = planning.new_run(task("follow_up"), NINE_IN_SHANGHAI)
    run.save()
    before = cards.task_id(run)
    TaskRun.objects.filter(pk=run.pk).update(created_at=run.created_at + timedelta(days=30))
    run.refresh_from_db()

    assert cards.task_id(run) != before
    assert cards.run_pk(cards.task_id(run)) == run.pk


@pytest.mark.parametrize(
    "other", ["", "r0-0123456789", "r12-012345678", "r12-0123456789a", "x12-0123456789", None]
)
def test_run_pk__is_none_for_anything_else(other):
    assert cards.run_pk(other) is None


def test_task_id__of_a_run_not_saved_yet_names_no_run(task):
    unsaved = planning.new_run(task("follow_up"), NINE_IN_SHANGHAI + timedelta(days=1))

    assert cards.task_id(unsaved).startswith("r0-")
    assert cards.run_pk(cards.task_id(unsaved)) is None


# -- a CRM's buttons -----------------------------------------------------------------------


def test_hook__adds_a_button(task):
    @kinds.buttons("follow_up")
    def with_a_call(task, run, defaults):
        return [*defaults, Button("call", "Call now", style=3)]

    body = render(task("follow_up", **FOLLOW_UP)).body

    assert [b["key"] for b in body["button_list"]] == [DONE, SNOOZE, "call"]
    assert body["button_list"][-1] == {"key": "call", "text": "Call now", "style": 3}


def test_hook__changes_one_kind_only_and_gets_the_defaults_in_the_tasks_language(task):
    seen = []
    inquiry, follow_up = task("inquiry_timeout", lang="zh-hans"), task("follow_up")

    @cards.buttons("inquiry_timeout")
    def only_take(task, run, defaults):
        seen.append([b.text for b in defaults])
        return [b for b in defaults if b.key == TAKE]

    assert [b["key"] for b in render(inquiry).body["button_list"]] == [TAKE]
    assert seen == [["我来处理", "已完成", "1小时后提醒"]]
    assert [b["key"] for b in render(follow_up).body["button_list"]] == [DONE, SNOOZE]


def test_hook__a_link_button_needs_no_key(task):
    @cards.buttons("follow_up")
    def with_a_link(task, run, defaults):
        return [defaults[0], Button("", "Open", url=LINK)]

    buttons = render(task("follow_up")).body["button_list"]

    assert buttons[1] == {"type": 1, "text": "Open", "style": 1, "url": LINK}


def test_hook__the_later_one_wins_and_unregister_forgets_it(task):
    cards.buttons("follow_up")(lambda task, run, defaults: defaults[:1])
    cards.buttons("follow_up")(lambda task, run, defaults: defaults[1:])

    assert [b["key"] for b in render(task("follow_up")).body["button_list"]] == [SNOOZE]
    cards.unregister("follow_up")
    assert [b["key"] for b in render(task("follow_up")).body["button_list"]] == [DONE, SNOOZE]


def test_hook__is_reminders_kinds_buttons():
    assert kinds.buttons is cards.buttons
    assert "buttons" in kinds.__all__


SEVEN = [Button(f"k{n}", f"B{n}") for n in range(7)]


@pytest.mark.parametrize(
    ("returned", "rule"),
    [
        (SEVEN, "button_list has 7 buttons; WeCom takes 1 to 6"),
        ([], "button_list is empty; WeCom takes 1 to 6 buttons"),
        ([Button("a", "A"), Button("a", "B")], "button_list[2].key 'a' is used twice"),
        ([Button("a", "x" * 21)], "button_list[1].text is 10.5 characters long, over WeCom's 10"),
        ([Button("a", "十一个字的按钮文字啊啊")], "is 11 characters long, over WeCom's 10"),
        ([Button("a" * 1025, "A")], "button_list[1].key is 1025 bytes, over WeCom's 1024"),
        ([Button("", "A")], "button_list[1].key is missing"),
        ([Button("a", " ")], "button_list[1].text is missing"),
        ([Button("a", "A", style=5)], "button_list[1].style is 5; WeCom takes 1 to 4"),
        ([{"key": "a", "text": "A"}], "returns a list of reminders.messages.cards.Button"),
        (None, "returned None; a buttons hook returns a list"),
    ],
)
def test_hook__returning_what_wecom_refuses_fails_naming_the_kind_and_the_rule(
    task, returned, rule
):
    follow_up = task("follow_up")  # scheduled before the CRM's hook changed

    @cards.buttons("follow_up")
    def bad(task, run, defaults):
        return returned

    with pytest.raises(BuilderFailed) as caught:
        render(follow_up)

    message = str(caught.value)
    assert message.startswith(f"Buttons hook {__name__}.")
    assert "bad of kind 'follow_up'" in message and rule in message


def test_hook__that_raises_is_a_builder_failure_and_refuses_the_task_when_scheduled(make_task):
    @cards.buttons("follow_up")
    def broken(task, run, defaults):
        raise KeyError("crm_id")

    with pytest.raises(ValidationError) as caught:
        make_task("follow_up", "lisi", channel="wecom")

    [message] = caught.value.message_dict["payload"]
    assert "BuilderFailed: Buttons hook" in message and "raised KeyError: 'crm_id'" in message
    assert not ScheduledTask.objects.exists()
    # Where no card is written, the hook is not asked.
    assert make_task("follow_up", "lisi", channel="robot").pk


def test_hook__a_builder_failure_is_that_runs_alone(make_task, outbox):
    @cards.buttons("follow_up")
    def picky(task, run, defaults):
        if task.payload.get("customer") == "Boom":
            raise ZeroDivisionError("the CRM's bug")
        return defaults

    fine = make_task("follow_up", "lisi", channel="memory_cards", payload={"customer": "Fine"})
    boom = make_task("follow_up", "wangwu", channel="memory_cards", payload={"customer": "Ok"})
    ScheduledTask.objects.filter(pk=boom.pk).update(payload={"customer": "Boom"})
    from tests.support.jobs import tick

    tick()

    assert [m.recipient for m in outbox] == ["lisi"]
    assert outbox[0].msgtype == "template_card"
    assert TaskRun.objects.get(task=fine).status == "sent"
    failed = TaskRun.objects.get(task=boom)
    assert (failed.status, failed.error_code) == ("failed", "render")
    assert "Buttons hook" in failed.error_message
