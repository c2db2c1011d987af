"""The ledger's pages show a message sent in parts: which parts went (how many, and
their message ids) on a row's page, a column of them in the list, and a filter for the
messages only partly delivered (``partly_sent``, or in doubt after some parts went)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.urls import reverse

from reminders.exceptions import InDoubtSendError, RecipientSendError
from reminders.models import ScheduledTask, SendLog
from reminders.senders.memory import MemorySender
from tests.support.jobs import tick

pytestmark = pytest.mark.django_db

LEDGER = reverse("admin:reminders_sendlog_changelist")
# About 5,000 bytes: three parts of a WeCom text.
LONG = "".join(f"{n:03d} follow up with the customer about the quote\n" for n in range(100))


@pytest.fixture(autouse=True)
def split_channel(settings: Any) -> None:
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        "split": {
            "BACKEND": "reminders.senders.memory.MemorySender",
            "OPTIONS": {"oversize": "split"},
        },
    }


@pytest.fixture
def sent(make_task: Callable[..., ScheduledTask]) -> Callable[..., SendLog]:
    """Factory: ``recipient``'s text (long by default) sent on the splitting channel,
    each part's send answered as ``script`` says (None: delivered); its ledger row."""

    def send(recipient: str, *script: Exception | None, content: str = LONG) -> SendLog:
        MemorySender.script[:] = list(script)
        task = make_task("follow_up", recipient, channel="split", payload={"content": content})
        tick()
        return SendLog.objects.get(task=task)

    return send


def page_of(log: SendLog) -> str:
    return reverse("admin:reminders_sendlog_change", args=[log.pk])


def cells(html: str, column: str) -> list[str]:
    found = re.findall(rf'<t[dh] class="field-{column}[^"]*">(.*?)</t[dh]>', html, re.S)
    return [re.sub(r"<[^>]+>", "", cell).strip() for cell in found]


def test_ledger__a_message_sent_in_parts_shows_which_parts_went(admin_client, sent):
    partly = sent("lisi", None, None, RecipientSendError("no such member", code="81013"))
    doubt = sent("wangwu", None, InDoubtSendError("no answer (read timeout)", code="timeout"))
    whole = sent("zhaoliu")
    plain = sent("sunqi", content="Call ACME")
    assert (partly.status, len(partly.parts_sent)) == ("partly_sent", 2)
    assert (doubt.status, len(doubt.parts_sent)) == ("unknown", 1)
    assert (whole.status, len(whole.reply_detail["msgids"])) == ("sent", 3)

    first, second = partly.parts_sent
    page = admin_client.get(page_of(partly)).content.decode()
    assert f"2 parts delivered so far: {first}, {second}" in page
    page = admin_client.get(page_of(doubt)).content.decode()
    assert f"1 part delivered so far: {doubt.parts_sent[0]}" in page
    page = admin_client.get(page_of(whole)).content.decode()
    assert "All 3 parts delivered: {}, {}, {}".format(*whole.reply_detail["msgids"]) in page
    assert "parts delivered" not in admin_client.get(page_of(plain)).content.decode().lower()

    listed = admin_client.get(LEDGER).content.decode()
    column = dict(zip(cells(listed, "recipient"), cells(listed, "parts"), strict=True))
    assert column == {"lisi": "2 so far", "wangwu": "1 so far", "zhaoliu": "3", "sunqi": "-"}
    only = admin_client.get(LEDGER, {"parts": "partly"}).context["cl"].result_list
    assert {row.pk for row in only} == {partly.pk, doubt.pk}
