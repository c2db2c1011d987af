"""Cards only where clicks can come back: a follow-up or an inquiry alert goes as a card
with buttons only on a channel whose app's clicks WeCom's callback takes (the callback
configured, and the channel's agent the callback's); elsewhere as a textcard with its
link, which has no button to click. What the channel (MemorySender, the WeCom sandbox)
receives is exactly that; the admin's preview shows it; a system check warns of a
channel that carries cards no click of which could come back."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from reminders import api
from reminders.checks import check_settings
from reminders.models import ScheduledTask
from reminders.senders.memory import MemorySender
from tests.reminders.callback.test_view import AGENT, CORP, KEY, TOKEN
from tests.support.jobs import tick
from tests.support.sandbox import running_sandbox, wecom_settings
from wecom_sandbox import WeComSandbox

pytestmark = pytest.mark.django_db

CARDS = "memory_cards"
LINK = "https://crm.example/followups/7"
PAYLOADS = {
    "follow_up": {"customer": "ACME", "subject": "Renewal quote", "url": LINK},
    "inquiry_timeout": {"customer": "Globex", "minutes": 45, "url": LINK},
}
BUTTONS = {"follow_up": ["done", "snooze_1h"], "inquiry_timeout": ["take", "done", "snooze_1h"]}


@pytest.fixture(autouse=True)
def cards_channel(settings: Any) -> None:
    """A memory channel that carries cards as the WeCom app does, and no callback."""
    settings.WECOM_CALLBACK_TOKEN = settings.WECOM_CALLBACK_AES_KEY = ""
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        CARDS: {"BACKEND": "reminders.senders.memory.MemorySender", "OPTIONS": {"cards": True}},
    }


def configure_callback(settings: Any, agent: str = AGENT) -> None:
    settings.WECOM_CALLBACK_TOKEN = TOKEN
    settings.WECOM_CALLBACK_AES_KEY = KEY
    settings.WECOM_CORP_ID = CORP
    settings.WECOM_AGENT_ID = agent


def send(kind: str, channel: str = CARDS) -> ScheduledTask:
    task = api.schedule(kind, "alice", at=timezone.now(), channel=channel, payload=PAYLOADS[kind])
    assert tick() == 1
    return task


def keys(body: dict[str, Any]) -> list[str]:
    return [button["key"] for button in body["button_list"]]


# -- MemorySender ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["follow_up", "inquiry_timeout"])
def test_a_card__has_buttons_where_the_callback_takes_the_channel_s_clicks(settings, kind):
    configure_callback(settings)
    send(kind)
    [message] = MemorySender.outbox
    assert message.msgtype == "template_card"
    assert keys(message.body) == BUTTONS[kind]


@pytest.mark.parametrize("kind", ["follow_up", "inquiry_timeout"])
def test_a_card__goes_as_a_textcard_with_no_button_where_no_callback_is_configured(kind):
    send(kind)
    [message] = MemorySender.outbox
    assert message.msgtype == "textcard"
    assert message.body["url"] == LINK and "button_list" not in message.body


def test_a_card__goes_as_a_textcard_where_the_callback_is_another_app_s(settings):
    configure_callback(settings, agent="1000099")  # the callback takes that app's clicks
    channel = settings.REMINDERS_CHANNELS[CARDS]
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        CARDS: {**channel, "OPTIONS": {**channel["OPTIONS"], "agent_id": AGENT}},
    }
    send("follow_up")
    [message] = MemorySender.outbox
    assert message.msgtype == "textcard"


# -- the WeCom sandbox ------------------------------------------------------------------


@pytest.fixture
def sandbox(settings: Any) -> Iterator[WeComSandbox]:
    """A sandbox, with the WeCom app channel ``wecom`` on it and the callback its app's."""
    with running_sandbox() as box:
        for name, value in wecom_settings(box.base_url).items():
            setattr(settings, name, value)
        settings.REMINDERS_CHANNELS = {
            **settings.REMINDERS_CHANNELS,
            "wecom": {"BACKEND": "reminders.senders.wecom.WeComSender"},
        }
        yield box


def sandbox_request(box: WeComSandbox) -> dict[str, Any]:
    [entry] = [entry for entry in box.ledger() if entry.delivered]
    assert entry.request is not None
    return entry.request


def test_sandbox__a_follow_up_on_the_callback_s_app_is_a_card_with_buttons(sandbox):
    send("follow_up", channel="wecom")
    request = sandbox_request(sandbox)
    assert request["msgtype"] == "template_card"
    assert keys(request["template_card"]) == BUTTONS["follow_up"]


def test_sandbox__a_follow_up_without_a_callback_is_a_textcard(settings, sandbox):
    settings.WECOM_CALLBACK_TOKEN = settings.WECOM_CALLBACK_AES_KEY = ""
    send("follow_up", channel="wecom")
    request = sandbox_request(sandbox)
    assert request["msgtype"] == "textcard"
    assert request["textcard"]["url"] == LINK


# -- the admin's preview ----------------------------------------------------------------


def preview(admin_client: Client, make_task: Callable[..., ScheduledTask]) -> str:
    later = timezone.now() + timedelta(hours=1)
    task = make_task("follow_up", "alice", at=later, channel=CARDS, payload=PAYLOADS["follow_up"])
    url = f"/admin/reminders/scheduledtask/{task.pk}/change/"
    return admin_client.get(url).content.decode()


def test_preview__shows_the_buttons_where_clicks_come_back(admin_client, make_task, settings):
    configure_callback(settings)
    assert 'data-key="done"' in preview(admin_client, make_task)


def test_preview__shows_no_button_where_no_click_can_come_back(admin_client, make_task):
    page = preview(admin_client, make_task)
    assert 'data-key="done"' not in page and "reminders-preview-card" not in page
    assert LINK in page


# -- the system check -------------------------------------------------------------------


def card_warnings() -> list[Any]:
    return [m for m in check_settings() if m.id == "reminders.W008"]


def test_check__warns_of_a_channel_that_carries_cards_no_click_of_which_comes_back():
    [warning] = card_warnings()
    assert f"{CARDS!r}" in warning.msg and "text" in warning.msg
    assert "WECOM_CALLBACK_TOKEN" in warning.hint


def test_check__warns_of_a_channel_of_another_app_than_the_callback_s(settings):
    configure_callback(settings, agent="1000099")
    channel = settings.REMINDERS_CHANNELS[CARDS]
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        CARDS: {**channel, "OPTIONS": {**channel["OPTIONS"], "agent_id": AGENT}},
    }
    [warning] = card_warnings()
    assert AGENT in warning.msg and "1000099" in warning.msg


def test_check__is_quiet_where_the_callback_takes_the_clicks(settings):
    configure_callback(settings)
    assert card_warnings() == []


def test_check__is_quiet_about_channels_that_carry_no_cards(settings):
    del settings.REMINDERS_CHANNELS[CARDS]
    assert card_warnings() == []
