"""The five built-in kinds' messages: what each says in English and Simplified Chinese, a
textcard where there is a link and the channel carries one, text otherwise, and always
within WeCom's limits with the stamp last. (A follow-up's or an inquiry's card with
buttons, on a channel that carries one, is tests/reminders/test_cards.py's.)"""

# Chinese text is written with Chinese (full-width) punctuation.
# ruff: noqa: RUF001

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone, translation

from reminders import kinds
from reminders.engine import planning
from reminders.messages import wording
from reminders.models import ScheduledTask
from reminders.senders import get_sender
from reminders.senders.base import Message, render_body
from reminders.senders.wecom import CONTENT_LIMIT, FIELD_LIMITS
from tests.support.jobs import tick
from tests.support.sandbox import ROBOT_KEY, assert_ledger_matches, running_sandbox, wecom_settings

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("carrier_channels")]

NINE_IN_SHANGHAI = datetime(2026, 12, 3, 1, 0, tzinfo=UTC)
LINK = "https://crm.example/customers/7"

Make = Callable[..., ScheduledTask]


@pytest.fixture
def task(make_task: Make) -> Make:
    """Factory: a task to lisi at 09:00 in Shanghai on 2026-12-03 with ``payload``."""

    def make(kind: str, channel: str = "memory", **payload: Any) -> ScheduledTask:
        return make_task(
            kind, "lisi", at=NINE_IN_SHANGHAI, tz="Asia/Shanghai", channel=channel, payload=payload
        )

    return make


def render(task: ScheduledTask, *, makeup: bool = False) -> kinds.Content:
    run = planning.new_run(task, NINE_IN_SHANGHAI)
    run.is_compensation = makeup
    return kinds.render(task, run)


def stamp(task: ScheduledTask) -> str:
    return f"— 2026-12-03 09:00 · #{task.pk}"


def size(text: str) -> int:
    return len(text.encode())


# -- reports ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "lang", "title", "text", "button"),
    [
        ("daily_report", "en", "Daily report", "Please submit your daily report.", "Open"),
        ("weekly_report", "en", "Weekly report", "Please submit your weekly report.", "Open"),
        ("daily_report", "zh-hans", "日报提醒", "请提交今天的日报。", "去填写"),
        ("weekly_report", "zh-hans", "周报提醒", "请提交本周的周报。", "去填写"),
    ],
)
def test_reports__a_link_makes_a_textcard_without_one_a_text(task, kind, lang, title, text, button):
    card = task(kind, url="https://crm.example/reports/new", lang=lang)
    plain = task(kind, lang=lang)

    assert render(card) == kinds.Content(
        "textcard",
        {
            "title": title,
            "description": f"{text}\n{stamp(card)}",
            "url": "https://crm.example/reports/new",
            "btntxt": button,
        },
    )
    assert render(plain) == kinds.Content("text", {"content": f"{text}\n{stamp(plain)}"})


def test_reports__the_setting_links_those_whose_payload_has_no_url(task, settings):
    settings.REMINDERS_REPORT_URL = "https://crm.example/reports"
    from_setting, own, none = (
        task("daily_report"),
        task("weekly_report", url=LINK),
        task("daily_report", url=""),
    )

    assert render(from_setting).body["url"] == "https://crm.example/reports"
    assert render(own).body["url"] == LINK
    assert render(none) == kinds.Content(
        "text", {"content": f"Please submit your daily report.\n{stamp(none)}"}
    )


def test_reports__to_a_group_robot_the_link_is_a_line_of_text(task):
    report = task("daily_report", channel="robot", url=LINK, lang="zh-hans")

    assert render(report) == kinds.Content(
        "text", {"content": f"请提交今天的日报。\n{LINK}\n{stamp(report)}"}
    )


# -- birthday -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lang", "named", "unnamed"),
    [
        (
            "en",
            "Happy birthday, Wang Fang! Best wishes from all of us.",
            "Happy birthday! Best wishes from all of us.",
        ),
        (
            "zh-hans",
            "Wang Fang，生日快乐！全体同事祝你身体健康、万事如意。",
            "生日快乐！全体同事祝你身体健康、万事如意。",
        ),
    ],
)
def test_birthday__greets_the_person_by_name_if_given(task, lang, named, unnamed):
    with_name, without = (
        task("birthday", name="Wang\nFang ", lang=lang),
        task("birthday", lang=lang),
    )

    assert render(with_name) == kinds.Content("text", {"content": f"{named}\n{stamp(with_name)}"})
    assert render(without) == kinds.Content("text", {"content": f"{unnamed}\n{stamp(without)}"})


# -- follow-up ----------------------------------------------------------------------------

FOLLOW_UP = {"customer": "ACME 有限公司", "subject": "Renewal quote", "url": LINK}


def test_follow_up__names_the_customer_the_subject_and_the_due_time_in_english(task):
    card = task("follow_up", **FOLLOW_UP)

    assert render(card) == kinds.Content(
        "textcard",
        {
            "title": "Follow-up: ACME 有限公司",
            "description": (
                "Customer: ACME 有限公司\nSubject: Renewal quote\nDue: 2026-12-03 09:00\n"
                f"{stamp(card)}"
            ),
            "url": LINK,
            "btntxt": "View",
        },
    )


def test_follow_up__and_in_chinese(task):
    card = task("follow_up", **FOLLOW_UP, lang="zh-hans")

    assert render(card) == kinds.Content(
        "textcard",
        {
            "title": "跟进提醒：ACME 有限公司",
            "description": (
                "客户：ACME 有限公司\n主题：Renewal quote\n跟进时间：2026-12-03 09:00\n"
                f"{stamp(card)}"
            ),
            "url": LINK,
            "btntxt": "查看详情",
        },
    )


def test_follow_up__without_a_link_is_a_text_that_says_what_it_is(task):
    plain = task("follow_up", customer="ACME", lang="zh-hans")
    bare = task("follow_up")

    assert render(plain) == kinds.Content(
        "text",
        {
            "content": (
                f"你有一项客户跟进到期了。\n客户：ACME\n跟进时间：2026-12-03 09:00\n{stamp(plain)}"
            )
        },
    )
    assert render(bare) == kinds.Content(
        "text",
        {"content": f"You have a customer follow-up due.\nDue: 2026-12-03 09:00\n{stamp(bare)}"},
    )


def test_follow_up__the_due_time_is_the_occurrence_in_the_tasks_zone(make_task):
    at = datetime(2026, 7, 1, 13, 30, tzinfo=UTC)
    task = make_task("follow_up", "lisi", at=at, tz="America/New_York", payload=FOLLOW_UP)

    description = kinds.render(task, planning.new_run(task, at)).body["description"]

    assert "Due: 2026-07-01 09:30" in description.splitlines()


# -- inquiry timeout ----------------------------------------------------------------------

INQUIRY = {"customer": "Globex", "subject": "Bulk order", "minutes": 45, "url": LINK}


@pytest.mark.parametrize(
    ("lang", "title", "lines"),
    [
        (
            "en",
            "Inquiry waiting: Globex",
            ["Customer: Globex", "Subject: Bulk order", "Waiting for a reply: 45 minutes"],
        ),
        (
            "zh-hans",
            "询盘待回复：Globex",
            ["客户：Globex", "主题：Bulk order", "已等待回复：45 分钟"],
        ),
    ],
)
def test_inquiry_timeout__names_the_customer_the_subject_and_how_long_it_waited(
    task, lang, title, lines
):
    card = task("inquiry_timeout", **INQUIRY, lang=lang)

    content = render(card)

    assert (content.msgtype, content.body["title"], content.body["url"]) == (
        "textcard",
        title,
        LINK,
    )
    assert content.body["description"].splitlines() == [*lines, stamp(card)]


def test_inquiry_timeout__one_minute_is_singular(task):
    content = render(task("inquiry_timeout", minutes=1))

    assert content.body["content"].splitlines()[:2] == [
        "A customer inquiry has been waiting too long for your reply.",
        "Waiting for a reply: 1 minute",
    ]


@pytest.mark.parametrize(
    ("lang", "title", "headline", "line"),
    [
        (
            "en",
            "Escalated inquiry: Globex",
            "A customer inquiry that was not answered has been escalated to you.",
            "Escalated from: zhangsan, the first recipient",
        ),
        (
            "zh-hans",
            "询盘升级：Globex",
            "一条未及时回复的客户询盘已升级给你。",
            "升级自：zhangsan（首位接收人）",
        ),
    ],
)
def test_inquiry_timeout__an_escalation_says_so_and_whom_it_was_first_sent_to(
    task, lang, title, headline, line
):
    card = task("inquiry_timeout", **INQUIRY, escalated_from="zhangsan", lang=lang)
    plain = task(
        "inquiry_timeout", channel="robot", **INQUIRY, escalated_from="zhangsan", lang=lang
    )

    assert render(card).body["title"] == title
    assert render(card).body["description"].splitlines()[-2:] == [line, stamp(card)]
    lines = render(plain).body["content"].splitlines()
    assert (lines[0], lines[-3:]) == (headline, [line, LINK, stamp(plain)])


# -- what the CRM wrote never makes a message unsendable -------------------------------------


def test_long_fields__are_cut_in_bytes_to_a_textcards_limits_and_the_stamp_stays_last(task):
    # 200 characters each, 600 bytes: under 512 characters, over 512 bytes.
    customer, subject = "华" * 200, "续约报价。" * 40
    card = task("follow_up", customer=customer, subject=subject, url=LINK)

    content = render(card)

    title, description = content.body["title"], content.body["description"]
    assert size(title) <= FIELD_LIMITS["textcard"]["title"] < size(f"Follow-up: {customer}")
    assert size(description) <= FIELD_LIMITS["textcard"]["description"]
    assert size(description) > FIELD_LIMITS["textcard"]["description"] - 6  # cut, not dropped
    lines = description.splitlines()
    assert lines[0].startswith("Customer: 华华") and lines[0].endswith("华…")
    assert lines[1].startswith("Subject: 续约报价。") and lines[1].endswith("…")
    assert abs(size(lines[0]) - size(lines[1])) <= 6  # an equal share each
    assert lines[2:] == ["Due: 2026-12-03 09:00", stamp(card)]
    get_sender("wecom").check_message(Message("lisi", content.msgtype, content.body, ""))


def test_long_fields__a_short_one_keeps_all_of_itself(task):
    card = task("follow_up", customer="ACME", subject="x" * 5000, url=LINK)

    lines = render(card).body["description"].splitlines()

    assert lines[0] == "Customer: ACME"
    assert lines[1].endswith("x…")


def test_long_fields__a_text_is_cut_to_its_limit_with_the_make_up_line_and_stamp(task):
    long = task("inquiry_timeout", channel="robot", customer="Ω" * 3000, url=LINK, lang="zh-hans")

    content = render(long, makeup=True)

    text = content.body["content"]
    assert size(CONTENT_LIMIT * "x") - 6 < size(text) <= CONTENT_LIMIT
    makeup = "补发：2026-12-03 09:00 未按时发出的提醒。"
    assert text.splitlines()[-3:] == [LINK, makeup, stamp(long)]
    get_sender("robot").check_message(Message("lisi", content.msgtype, content.body, ""))


@pytest.mark.parametrize(
    ("text", "budget", "cut"),
    [
        ("abcdef", 6, "abcdef"),
        ("abcdef", 5, "ab…"),
        ("华华华", 8, "华…"),  # 3 bytes a character: never half of one
        ("Zoe\u0301 x", 6, "Zo…"),  # not between the e and its accent
        ("ok 👍🏽 yes", 12, "ok…"),  # nor between a thumb and its skin tone
        ("a 👨\u200d👩\u200d👧 b", 15, "a…"),  # nor inside a family joined by ZWJs
        ("abcdef", 2, ""),
    ],
)
def test_cut__at_a_character_that_splits_nothing(text, budget, cut):
    assert wording.cut(text, budget) == cut
    assert size(wording.cut(text, budget)) <= budget


def test_fields__are_one_line_of_plain_text_never_escaped(task):
    card = task("follow_up", customer='A&B <div class="gray">\n Co\t\x07Ltd', url=LINK)

    assert render(card).body["title"] == 'Follow-up: A&B <div class="gray"> Co Ltd'


def test_limits__are_those_the_wecom_sender_checks():
    wecom = FIELD_LIMITS["textcard"]
    assert wecom["title"] == wording.TITLE_LIMIT
    assert wecom["description"] == wording.DESCRIPTION_LIMIT
    assert wording.TEXT_LIMIT == CONTENT_LIMIT


@pytest.mark.parametrize("lang", ["en", "zh-hans"])
def test_buttons__fit_the_four_characters_wecom_shows(task, lang):
    kinds_ = ["daily_report", "weekly_report", "follow_up", "inquiry_timeout"]
    buttons = {render(task(kind, url=LINK, lang=lang)).body["btntxt"] for kind in kinds_}
    assert len(buttons) == 2 and all(len(button) <= 4 for button in buttons)


# -- languages, make-ups, bytes -----------------------------------------------------------


def test_language__defaults_to_the_projects_and_ignores_the_callers(task, settings):
    english = task("daily_report")

    with translation.override("zh-hans"):  # an admin page in Chinese renders it
        assert render(english).body["content"].startswith("Please submit")
    settings.LANGUAGE_CODE = "zh-hans"
    assert render(english).body["content"].startswith("请提交今天的日报")
    assert render(task("daily_report", lang="en")).body["content"].startswith("Please submit")


def test_language__a_regional_variant_is_the_language_the_project_declares(task):
    assert render(task("daily_report", lang="zh-CN")).body["content"].startswith("请提交")


@pytest.mark.parametrize("lang", ["xx", "klingon", 7, ""])
def test_language__one_the_project_does_not_declare_is_refused_on_payload(make_task, lang):
    with pytest.raises(ValidationError) as caught:
        make_task("daily_report", "lisi", payload={"lang": lang})

    assert [error.code for error in caught.value.error_dict["payload"]] == ["payload_lang"]
    assert not ScheduledTask.objects.exists()


def test_language__the_refusal_speaks_the_callers_language(make_task):
    with translation.override("zh-hans"):
        with pytest.raises(ValidationError) as caught:
            make_task("daily_report", "lisi", payload={"lang": "xx"})

        [message] = caught.value.message_dict["payload"]
    assert message == "payload 的 \"lang\" 'xx' 不是本项目声明的语言。"


@pytest.mark.parametrize(
    ("kind", "payload", "field"),
    [
        ("inquiry_timeout", {"minutes": "45"}, "minutes"),
        ("inquiry_timeout", {"minutes": True}, "minutes"),
        ("inquiry_timeout", {"minutes": -1}, "minutes"),
        ("inquiry_timeout", {"escalated_from": "@all"}, "escalated_from"),
        ("follow_up", {"url": "ftp://crm.example/7"}, "url"),
        ("follow_up", {"url": "https://crm.example/" + "a" * 2048}, "url"),
        ("follow_up", {"customer": 42}, "customer"),
        ("birthday", {"name": ["Wang"]}, "name"),
    ],
)
def test_payload__a_field_a_kind_cannot_use_is_refused_on_payload(make_task, kind, payload, field):
    with pytest.raises(ValidationError) as caught:
        make_task(kind, "lisi", payload=payload)

    [message] = caught.value.message_dict["payload"]
    assert f'payload["{field}"]' in message and "BadPayload" in message


def test_make_up__the_line_is_in_the_tasks_language_before_the_stamp(task):
    for lang, line in (
        ("en", "Make-up for 2026-12-03 09:00, missed."),
        ("zh-hans", "补发：2026-12-03 09:00 未按时发出的提醒。"),
    ):
        card = task("follow_up", **FOLLOW_UP, lang=lang)
        assert render(card, makeup=True).body["description"].splitlines()[-2:] == [
            line,
            stamp(card),
        ]


def test_content__still_overrides_the_wording_in_any_language(task):
    own = task("follow_up", content="Call ACME", url=LINK, lang="zh-hans")

    assert render(own) == kinds.Content("text", {"content": f"Call ACME\n{stamp(own)}"})
    assert render(own, makeup=True).body["content"].splitlines()[1].startswith("补发：")


@pytest.mark.parametrize("kind", ["daily_report", "follow_up", "inquiry_timeout", "birthday"])
def test_render__again_in_another_process_is_the_same_bytes(task, kind):
    first = task(kind, **INQUIRY, escalated_from="zhangsan", lang="zh-hans")
    again = ScheduledTask.objects.get(pk=first.pk)  # as a retry in another process reads it

    with translation.override("en"):
        other = render(again, makeup=True)
    mine = render(first, makeup=True)
    assert render_body(mine.msgtype, mine.body) == render_body(other.msgtype, other.body)


def test_render__two_occurrences_never_the_same_bytes(make_task):
    task = make_task("daily_report", "lisi", cron="0 9 * * *", tz="Asia/Shanghai")
    bodies = {
        render_body(c.msgtype, c.body)
        for c in (
            kinds.render(task, planning.new_run(task, NINE_IN_SHANGHAI + timedelta(days=day)))
            for day in range(3)
        )
    }
    assert len(bodies) == 3


# -- through WeCom's sandbox --------------------------------------------------------------


@pytest.fixture
def sandbox(settings: Any) -> Iterator[Any]:
    """A sandbox that refuses (rather than cuts) what is over WeCom's limits, with the
    ``wecom`` app channel and a ``robot`` group robot on it."""
    with running_sandbox(overflow="reject") as box:
        for name, value in wecom_settings(box.base_url).items():
            setattr(settings, name, value)
        settings.REMINDERS_CHANNELS = {
            **settings.REMINDERS_CHANNELS,
            "wecom": {"BACKEND": "reminders.senders.wecom.WeComSender"},
            "robot": {
                "BACKEND": "reminders.senders.robot.WeComRobotSender",
                "OPTIONS": {"key": ROBOT_KEY},
            },
        }
        yield box


def test_e2e__long_chinese_fields_arrive_whole_as_a_card_and_as_robot_text(make_task, sandbox):
    payload = {**INQUIRY, "customer": "环球贸易" * 100, "escalated_from": "zhangsan"}
    for channel in ("wecom", "robot"):
        make_task(
            "inquiry_timeout",
            "lisi",
            at=timezone.now(),
            channel=channel,
            payload={**payload, "lang": "zh-hans"},
        )

    assert tick() == 2

    [card] = sandbox.delivered(to="lisi")
    robot = [e for e in sandbox.ledger() if e.endpoint == "webhook/send"]
    assert [e.status for e in robot] == ["delivered"]
    assert card.msgtype == "template_card" and robot[0].msgtype == "text"
    sub_title = card.request["template_card"]["sub_title_text"]
    for text in (sub_title, robot[0].content):
        assert "升级自：zhangsan（首位接收人）" in text
        assert text.splitlines()[-1].startswith("— ")
    assert not robot[0].truncated
    assert_ledger_matches(sandbox)
