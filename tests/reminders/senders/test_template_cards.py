"""Cards with buttons on the wire: WeCom's rules for a ``template_card`` of ``card_type``
``button_interaction`` (``senders.template_card``), held by the WeCom app sender, by
``MemorySender`` and by the sandbox over HTTP alike, and a card's ``task_id`` taken once
per app: a re-send of a card that reached WeCom is reported delivered before, never a
failure nor a second card."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import requests
from django.test import TestCase

from reminders.engine import dispatch
from reminders.exceptions import PayloadSendError
from reminders.models import SendLog, TaskRun
from reminders.senders import template_card
from reminders.senders.base import Message
from reminders.senders.memory import MemorySender
from reminders.senders.wecom import WeComSender
from tests.support.jobs import run_queued
from tests.support.sandbox import (
    AGENT_ID,
    CORP_ID,
    CORP_SECRET,
    DEFAULTS,
    assert_ledger_matches,
    running_sandbox,
    wecom_settings,
)
from wecom_sandbox import WeComSandbox

CARD: dict[str, Any] = {
    "card_type": "button_interaction",
    "source": {"desc": "Follow-up reminder"},
    "main_title": {"title": "Follow-up: ACME", "desc": "You have a customer follow-up due."},
    "sub_title_text": "Due: 2026-12-03 09:00\n— 2026-12-03 09:00 · #42",
    "horizontal_content_list": [
        {"keyname": "Customer", "value": "ACME"},
        {"type": 1, "keyname": "Link", "value": "View", "url": "https://crm.example/7"},
    ],
    "task_id": "r7-0123456789",
    "button_list": [
        {"key": "done", "text": "Done", "style": 1},
        {"key": "snooze_1h", "text": "Remind me in 1 hour", "style": 2},
    ],
}


def card(**changes: Any) -> dict[str, Any]:
    """``CARD`` with ``changes``: a dotted name is a field inside (``main_title.title``),
    a value of None removes the field."""
    body = copy.deepcopy(CARD)
    for name, value in changes.items():
        *outer, last = name.split(".")
        target = body
        for part in outer:
            target = target[part]
        if value is None:
            target.pop(last, None)
        else:
            target[last] = value
    return body


def buttons(count: int) -> list[dict[str, Any]]:
    return [{"key": f"k{n}", "text": f"B{n}"} for n in range(count)]


# Each card WeCom refuses: what our check says, and the errcode the sandbox answers.
REFUSED = [
    ({"task_id": None}, "task_id is missing", 42014),
    ({"task_id": ""}, "task_id is missing", 42014),
    ({"task_id": "r" * 129}, "is not 1 to 128 bytes of 0-9a-zA-Z_-@", 42014),
    ({"task_id": "r7 0123"}, "is not 1 to 128 bytes of 0-9a-zA-Z_-@", 42014),
    ({"main_title": None}, "main_title is missing", 40058),
    ({"main_title.title": "x" * 73}, "main_title.title is 36.5 characters long", 45002),
    (
        {"main_title.desc": "字" * 45},
        "main_title.desc is 45 characters long, over WeCom's 44",
        45002,
    ),
    ({"sub_title_text": "字" * 161}, "sub_title_text is 161 characters long", 45002),
    ({"source.desc": "字" * 21}, "source.desc is 21 characters long, over WeCom's 20", 45002),
    ({"horizontal_content_list": [{"keyname": "K"}] * 7}, "has 7 lines", 40058),
    ({"horizontal_content_list": [{"value": "v"}]}, "[1].keyname is missing", 40058),
    ({"horizontal_content_list": [{"keyname": "字" * 6}]}, "keyname is 6 characters", 45002),
    ({"horizontal_content_list": [{"keyname": "L", "type": 1}]}, "without a url", 40058),
    ({"button_list": None}, "button_list is empty", 40058),
    ({"button_list": []}, "button_list is empty", 40058),
    ({"button_list": buttons(7)}, "button_list has 7 buttons; WeCom takes 1 to 6", 40058),
    ({"button_list": [{"key": "k"}]}, "button_list[1].text is missing", 40058),
    ({"button_list": [{"key": "k", "text": "字" * 11}]}, "is 11 characters long", 45002),
    ({"button_list": [{"text": "Done"}]}, "button_list[1].key is missing", 40058),
    ({"button_list": [{"key": "k" * 1025, "text": "A"}]}, "1025 bytes, over WeCom's 1024", 40058),
    ({"button_list": buttons(1) * 2}, "button_list[2].key 'k0' is used twice", 40058),
]
REFUSED_IDS = [next(iter(changes)) + f"-{n}" for n, (changes, _, _) in enumerate(REFUSED)]


def test_problem__none_for_the_card_the_engine_writes() -> None:
    assert template_card.problem(CARD) is None
    # Six of each, texts at their limits (a half-width character counts half).
    full = card(
        **{"main_title.title": "字" * 36, "sub_title_text": "a" * 320},
        button_list=[{"key": f"k{n}", "text": "字" * 10} for n in range(6)],
        horizontal_content_list=[{"keyname": "字" * 5, "value": "字" * 30}] * 6,
    )
    assert template_card.problem(full) is None


@pytest.mark.parametrize(("changes", "says", "errcode"), REFUSED, ids=REFUSED_IDS)
def test_problem__names_the_field_and_wecoms_limit(changes, says, errcode) -> None:
    found = template_card.problem(card(**changes))

    assert found is not None and found.startswith("template_card.") and says in found


def test_problem__another_card_type_is_not_this_one() -> None:
    assert "not 'button_interaction'" in str(template_card.problem(card(card_type="text_notice")))


def test_width__counts_a_full_width_character_as_two_halves() -> None:
    assert template_card.width("Done") == 4
    assert template_card.width("已完成") == 6
    assert template_card.width("1小时后提醒") == 11


# -- the WeCom app sender ------------------------------------------------------------------


def message(body: dict[str, Any] | None = None, recipient: str = "lisi") -> Message:
    return Message(recipient, "template_card", body or card(), "follow_up:42:2026-12-03")


def test_wecom__carries_cards_a_robot_does_not() -> None:
    from reminders.senders.robot import WeComRobotSender

    assert WeComSender.carries_cards is True
    assert WeComRobotSender.carries_cards is False
    assert MemorySender("m").carries_cards is False
    assert MemorySender("m", cards=True).carries_cards is True


@pytest.mark.parametrize(("changes", "says", "errcode"), REFUSED[:6], ids=REFUSED_IDS[:6])
def test_wecom__refuses_a_card_wecom_would_before_sending(changes, says, errcode) -> None:
    sender = WeComSender("wecom", corp_id="c", corp_secret="s", agent_id=1)

    with pytest.raises(PayloadSendError) as caught:
        sender.check_message(message(card(**changes)))

    assert caught.value.code == "card" and says in caught.value.message
    sender.close()


def test_wecom__a_card_goes_without_the_body_check_held_unique_by_its_task_id() -> None:
    sender = WeComSender("wecom", corp_id="c", corp_secret="s", agent_id=1)
    payload = json.loads(sender._payload(message(), 1, card()))

    assert "enable_duplicate_check" not in payload
    assert sender.deduplicates(message()) is True
    assert sender.deduplicates(message(card(task_id=None))) is False
    text = Message("lisi", "text", {"content": "Call ACME\n— 2026-12-03 09:00 · #42"}, "k")
    assert json.loads(sender._payload(text, 1, text.body))["enable_duplicate_check"] == 1
    sender.close()


# -- MemorySender, as forgiving as WeCom and no more -------------------------------------


@pytest.mark.parametrize(("changes", "says", "errcode"), REFUSED, ids=REFUSED_IDS)
def test_memory__refuses_what_wecom_refuses(changes, says, errcode) -> None:
    with pytest.raises(PayloadSendError) as caught:
        MemorySender("memory").send(message(card(**changes)))

    assert caught.value.code == "card" and says in caught.value.message
    assert MemorySender.outbox == []


def test_memory__a_task_id_used_before_is_delivered_before_not_again() -> None:
    sender = MemorySender("memory", cards=True)

    first = sender.send(message())
    again = sender.send(message())
    # WeCom holds a task_id per app, whatever the recipient or the rest of the card.
    other = sender.send(message(card(sub_title_text="Another"), recipient="wangwu"))

    assert first.code == "0" and first.message_id
    assert again == other == template_card.delivered_before("r7-0123456789")
    assert again.code == "42014" and again.detail["delivered_before"]
    assert [m.recipient for m in MemorySender.outbox] == ["lisi"]
    assert [m.recipient for m in MemorySender.suppressed] == ["lisi", "wangwu"]
    assert sender.deduplicates(message()) is True  # without the option duplicate_check too


def test_memory__another_app_has_task_ids_of_its_own() -> None:
    MemorySender("memory", rate_scope="app-1").send(message())
    MemorySender("memory", rate_scope="app-2").send(message())

    assert len(MemorySender.outbox) == 2


# -- the sandbox over HTTP -----------------------------------------------------------------


class Api:
    """``message/send`` as a sender calls it, with a token of its own."""

    def __init__(self, box: WeComSandbox) -> None:
        self.base = box.base_url
        self.session = requests.Session()
        params = {"corpid": CORP_ID, "corpsecret": CORP_SECRET}
        self.token = self.session.get(f"{self.base}/cgi-bin/gettoken", params=params).json()[
            "access_token"
        ]

    def send(self, body: dict[str, Any], touser: str = "lisi") -> dict[str, Any]:
        request = {"touser": touser, "msgtype": "template_card", "agentid": AGENT_ID}
        return self.session.post(
            f"{self.base}/cgi-bin/message/send",
            params={"access_token": self.token},
            data=json.dumps({**request, "template_card": body}).encode(),
            timeout=10,
        ).json()


@pytest.fixture
def box() -> Iterator[WeComSandbox]:
    with WeComSandbox(**DEFAULTS) as sandbox:
        yield sandbox


@pytest.fixture
def api(box: WeComSandbox) -> Iterator[Api]:
    caller = Api(box)
    yield caller
    caller.session.close()


def test_sandbox__delivers_a_card_with_a_response_code(api: Api, box: WeComSandbox) -> None:
    reply = api.send(card())

    assert (reply["errcode"], reply["errmsg"]) == (0, "ok")
    assert reply["msgid"] and reply["response_code"]
    [entry] = box.delivered(to="lisi")
    assert entry.msgtype == "template_card"
    assert entry.content.splitlines() == [
        "Follow-up: ACME",
        "You have a customer follow-up due.",
        "Due: 2026-12-03 09:00",
        "— 2026-12-03 09:00 · #42",
        "Customer: ACME",
        "Link: View",
        "[Done] [Remind me in 1 hour]",
    ]


@pytest.mark.parametrize(("changes", "says", "errcode"), REFUSED, ids=REFUSED_IDS)
def test_sandbox__refuses_each_card_wecom_refuses(
    api: Api, box: WeComSandbox, changes: dict[str, Any], says: str, errcode: int
) -> None:
    reply = api.send(card(**changes))

    assert reply["errcode"] == errcode
    assert box.delivered() == []
    assert [entry.status for entry in box.ledger()] == ["rejected"]


def test_sandbox__a_card_type_it_does_not_model_is_refused(api: Api, box: WeComSandbox) -> None:
    assert api.send(card(card_type="text_notice"))["errcode"] == 40058
    assert api.send({})["errcode"] == 44004


def test_sandbox__a_style_out_of_range_is_taken_as_wecom_takes_it(api: Api) -> None:
    assert api.send(card(button_list=[{"key": "k", "text": "A", "style": 9}]))["errcode"] == 0


def test_sandbox__a_task_id_used_before_is_42014_for_any_member_until_a_reset(
    api: Api, box: WeComSandbox
) -> None:
    assert api.send(card())["errcode"] == 0

    again = api.send(card())
    elsewhere = api.send(card(sub_title_text="Another"), touser="wangwu")

    assert again["errcode"] == elsewhere["errcode"] == 42014
    assert "taskid has existed" in again["errmsg"] and "msgid" not in again
    assert [entry.status for entry in box.ledger()] == ["delivered", "rejected", "rejected"]
    assert len(box.delivered()) == 1
    box.reset()
    assert Api(box).send(card())["errcode"] == 0  # a reset ends the tokens too


def test_sandbox__a_refused_card_does_not_use_up_its_task_id(api: Api) -> None:
    assert api.send(card(button_list=buttons(7)))["errcode"] == 40058
    assert api.send(card())["errcode"] == 0


@pytest.mark.django_db  # the access token is shared through the database
def test_wecom_sender__a_card_sent_again_is_reported_delivered_before(box: WeComSandbox) -> None:
    sender = WeComSender(
        "wecom", api_base=box.base_url, corp_id=CORP_ID, corp_secret=CORP_SECRET, agent_id=AGENT_ID
    )

    first = sender.send(message())
    again = sender.send(message())

    assert first.code == "0" and first.message_id == box.delivered()[0].msgid
    assert first.detail["response_code"]
    assert again == template_card.delivered_before("r7-0123456789")
    assert len(box.delivered()) == 1
    sender.close()


# -- through the engine --------------------------------------------------------------------


def use(box: WeComSandbox, settings: Any) -> None:
    for name, value in wecom_settings(box.base_url).items():
        setattr(settings, name, value)
    settings.WECOM_TIMEOUT = 1.0
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        "wecom": {"BACKEND": "reminders.senders.wecom.WeComSender"},
    }


def tick(now: Any = None) -> int:
    with TestCase.captureOnCommitCallbacks(execute=True):
        dispatch.materialize(now=now)
        dispatch.claim("cards-test", 1000, now=now)
        return run_queued()


FOLLOW_UP = {"customer": "ACME", "subject": "Renewal quote", "url": "https://crm.example/7"}


@pytest.mark.django_db
def test_e2e__a_follow_up_card_arrives_once_with_its_run_named(make_task: Any, settings: Any):
    with running_sandbox() as box:
        use(box, settings)
        task = make_task("follow_up", "lisi", channel="wecom", payload=FOLLOW_UP)

        assert tick() == 1

        [entry] = box.delivered(to="lisi")
        run, row = TaskRun.objects.get(), SendLog.objects.get()
        sent = entry.request["template_card"]
        assert (run.status, row.status, row.provider_message_id) == ("sent", "sent", entry.msgid)
        assert row.reply_detail["response_code"]
        assert sent["task_id"] == f"r{run.pk}-{sent['task_id'][-10:]}"
        assert [b["key"] for b in sent["button_list"]] == ["done", "snooze_1h"]
        assert sent["sub_title_text"].endswith(f"· #{task.pk}")
        assert json.loads(row.body)["template_card"] == sent  # what was recorded, was sent
        assert_ledger_matches(box)


@pytest.mark.django_db
def test_e2e__a_card_whose_reply_was_lost_is_sent_again_and_arrives_once(
    make_task: Any, settings: Any
) -> None:
    with WeComSandbox(**DEFAULTS) as box:
        use(box, settings)
        make_task("inquiry_timeout", "wangwu", channel="wecom", payload={"minutes": 30})
        box.control(lost_replies=1)

        tick()
        run = TaskRun.objects.get()
        assert (run.status, run.error_code) == ("retrying", "network")
        tick(now=run.next_attempt_at + timedelta(seconds=1))

        run.refresh_from_db()
        row = SendLog.objects.get()
        assert (run.status, run.attempts, row.status) == ("sent", 2, "sent")
        assert (row.reply_code, row.reply_detail["delivered_before"]) == (
            "42014",
            "task_id already used",
        )
        assert [entry.status for entry in box.ledger()] == ["delivered", "rejected"]
        assert box.ledger()[1].errcode == 42014
        assert len(box.delivered(to="wangwu")) == 1
        # The ledger check finds the card's first delivery by its task_id.
        assert_ledger_matches(box)
