"""Recall in the admin: the "Recall" button on a ledger row's page and its run's, its
confirmation page (the message, its recipient, a reason required), the action on the
ledger's and the runs' lists with its mixed outcome, what the lists and pages say
afterwards; an ops operator may, an ops viewer sees nothing and a forced POST is 403.
Every recall goes through ``engine.recall`` (tests/reminders/test_recall.py)."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission
from django.contrib.messages import get_messages
from django.urls import reverse
from django.utils import timezone

from ops.roles import OPERATOR, VIEWER
from reminders.engine import dispatch
from reminders.exceptions import TransientSendError
from reminders.models import ScheduledTask, SendLog, TaskRun
from reminders.senders import get_sender
from reminders.senders.memory import MemorySender
from tests.support.jobs import tick

pytestmark = pytest.mark.django_db

LEDGER = reverse("admin:reminders_sendlog_changelist")
RUNS = reverse("admin:reminders_taskrun_changelist")
LONG = "".join(f"{n:03d} 客户跟进记录\n" for n in range(400))


@pytest.fixture(autouse=True)
def channels(settings: Any) -> None:
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        "app": {"BACKEND": "reminders.senders.memory.MemorySender", "OPTIONS": {"cards": True}},
        "app_split": {
            "BACKEND": "reminders.senders.memory.MemorySender",
            "OPTIONS": {"cards": True, "oversize": "split"},
        },
        # Recalls nothing, as a group robot.
        "group": {"BACKEND": "reminders.senders.memory.MemorySender"},
    }


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The message ids the provider was asked to recall."""
    asked: list[str] = []
    real = MemorySender.recall

    def spy(self: MemorySender, message_id: str) -> None:
        asked.append(message_id)
        real(self, message_id)

    monkeypatch.setattr(MemorySender, "recall", spy)
    return asked


@pytest.fixture
def sent(make_task: Callable[..., ScheduledTask]) -> Callable[..., SendLog]:
    """Factory: a message sent through the engine; its ledger row."""

    def send(channel: str = "app", recipient: str = "lisi", content: str = "Call ACME") -> SendLog:
        task = make_task("follow_up", recipient, channel=channel, payload={"content": content})
        assert tick() == 1
        return SendLog.objects.get(task=task, status="sent")

    return send


@pytest.fixture
def login(client, django_user_model):
    """Factory: the client logged in as an ops ``operator`` or ``viewer``."""

    def log_in(role: str):
        user = django_user_model.objects.create_user(role, is_staff=True)
        user.groups.add(Group.objects.get(name={"operator": OPERATOR, "viewer": VIEWER}[role]))
        client.force_login(user)
        return client

    return log_in


def reported(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def page_of(log: SendLog) -> str:
    return reverse("admin:reminders_sendlog_change", args=[log.pk])


def run_page(log: SendLog) -> str:
    return reverse("admin:reminders_taskrun_change", args=[log.run_id])


def recall_of(log: SendLog) -> str:
    return reverse("admin:reminders_sendlog_recall", args=[log.pk])


def offered(client, url: str) -> set[str]:
    choices = client.get(url).context["cl"].model_admin.get_action_choices
    return {name for name, _label in choices(client.get(url).wsgi_request)} - {""}


def state(log: SendLog) -> tuple[Any, ...]:
    row = SendLog.objects.get(pk=log.pk)
    return (row.recalled_at, row.recalled_by, row.recall_reason, row.recalled_ids, row.recall_error)


NOTHING = (None, "", "", None, "")


def cells(html: str, column: str) -> list[str]:
    found = re.findall(rf'<t[dh] class="field-{column}[^"]*">(.*?)</t[dh]>', html, re.S)
    return [re.sub(r"<[^>]+>", "", cell).strip() for cell in found]


# -- the button ------------------------------------------------------------------------------


def test_button__on_the_ledger_row_and_its_run_for_an_operator(login, sent):
    client = login("operator")
    log = sent()
    assert f'href="{recall_of(log)}"' in client.get(page_of(log)).content.decode()
    back = f"{recall_of(log)}?next={run_page(log).replace('/', '%2F')}"
    assert f'href="{back}"' in client.get(run_page(log)).content.decode()


def test_button__asks_why_showing_the_message_and_recipient_then_recalls_it(login, sent, calls):
    client = login("operator")
    log = sent(recipient="wang.fang", content="Quote for ACME attached")
    url = f"{recall_of(log)}?next={run_page(log)}"

    page = client.get(url)
    html = page.content.decode()
    assert page.status_code == 200 and page.templates[0].name == "admin/reminders/recall.html"
    assert "1 message will be taken back from its recipient" in html
    assert "wang.fang" in html and "Quote for ACME attached" in html
    assert 'name="reason"' in html and 'value="yes"' in html

    unexplained = client.post(url, {"post": "yes", "reason": "  "})
    assert unexplained.status_code == 200
    assert "Say why: the reason is kept with the message in the send log." in (
        unexplained.content.decode()
    )
    assert calls == [] and state(log) == NOTHING

    done = client.post(url, {"post": "yes", "reason": "Wrong customer"})
    assert done.status_code == 302 and done.url == run_page(log)
    assert reported(done) == ["The message to wang.fang was recalled."]
    assert calls == [log.provider_message_id]
    row = SendLog.objects.get(pk=log.pk)
    assert (row.recalled_by, row.recall_reason) == ("operator", "Wrong customer")
    assert f'href="{recall_of(log)}"' not in client.get(page_of(log)).content.decode()


def test_button__recalls_the_parts_a_partly_sent_message_delivered_for_an_operator_only(
    login, make_task, calls
):
    task = make_task("follow_up", "lisi", channel="app_split", payload={"content": LONG})
    MemorySender.script[:] = [None, TransientSendError("system busy", code="-1")]
    assert tick() == 0
    log = SendLog.objects.get(task=task, status="partly_sent")
    viewer = login("viewer")
    assert viewer.post(recall_of(log), {"post": "yes", "reason": "x"}).status_code == 403
    assert calls == [] and state(log) == NOTHING

    client = login("operator")
    assert f'href="{recall_of(log)}"' in client.get(page_of(log)).content.decode()
    done = client.post(recall_of(log), {"post": "yes", "reason": "Wrong customer"})

    assert done.status_code == 302 and reported(done) == ["The message to lisi was recalled."]
    assert calls == log.parts_sent
    row = SendLog.objects.get(pk=log.pk)
    assert (row.recalled_by, row.recall_reason, row.recalled_ids) == (
        "operator",
        "Wrong customer",
        log.parts_sent,
    )


def test_button__goes_back_to_the_ledger_row_and_never_off_the_site(login, sent):
    client = login("operator")
    log = sent()
    done = client.post(
        f"{recall_of(log)}?next=https://evil.example/", {"post": "yes", "reason": "typo"}
    )
    assert done.url == page_of(log)


def past_24_hours(log: SendLog) -> SendLog:
    SendLog.objects.filter(pk=log.pk).update(
        sent_at=timezone.now() - timedelta(hours=24, minutes=1)
    )
    return log


@pytest.mark.parametrize(
    ("channel", "change", "why"),
    [
        ("group", None, "its channel group cannot take a message back (a group robot cannot)"),
        ("app", past_24_hours, "it was sent more than 24 hours ago"),
    ],
    ids=["robot", "past 24 hours"],
)
def test_button__not_offered_and_a_forced_post_is_refused_with_the_reason_without_a_call(
    login, sent, calls, channel, change, why
):
    client = login("operator")
    log = sent(channel)
    if change:
        change(log)
    assert "reminders-recall" not in client.get(page_of(log)).content.decode()
    assert "reminders-recall" not in client.get(run_page(log)).content.decode()
    page = client.get(recall_of(log)).content.decode()
    assert why in page and 'name="reason"' not in page

    forced = client.post(recall_of(log), {"post": "yes", "reason": "wrong customer"})

    assert forced.status_code == 302
    assert reported(forced)[0].startswith(f"The message was not recalled: {why}")
    assert calls == [] and state(log) == NOTHING


# -- who may ---------------------------------------------------------------------------------


def test_viewer__sees_no_button_and_no_action_and_a_forced_post_is_403_calling_nothing(
    login, sent, calls
):
    client = login("viewer")
    log = sent()
    for url in (page_of(log), run_page(log)):
        response = client.get(url)
        assert response.status_code == 200
        assert "reminders-recall" not in response.content.decode()
        assert "recall/" not in response.content.decode()
    assert offered(client, LEDGER) == set() and offered(client, RUNS) == set()

    assert client.get(recall_of(log)).status_code == 403
    assert client.post(recall_of(log), {"post": "yes", "reason": "x"}).status_code == 403
    for url, pk in ((LEDGER, log.pk), (RUNS, log.run_id)):
        forced = client.post(
            url,
            {
                "action": "recall_messages",
                "_selected_action": [pk],
                "post": "yes",
                "reason": "wrong customer",
            },
        )
        assert forced.status_code == 403
    assert calls == [] and state(log) == NOTHING


def test_recall_without_seeing_the_ledger__no_button_no_action_and_a_forced_post_is_403(
    client, django_user_model, sent, calls
):
    # Allowed to recall and to see the runs, not the send log the recall acts on.
    user = django_user_model.objects.create_user("halfway", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="reminders", codename__in=["recall_sendlog", "view_taskrun"]
        )
    )
    client.force_login(user)
    log = sent()

    response = client.get(run_page(log))
    assert response.status_code == 200
    assert "recall/" not in response.content.decode()
    assert offered(client, RUNS) == set()
    assert client.get(recall_of(log)).status_code == 403
    assert client.post(recall_of(log), {"post": "yes", "reason": "x"}).status_code == 403
    forced = client.post(
        RUNS,
        {
            "action": "recall_messages",
            "_selected_action": [log.run_id],
            "post": "yes",
            "reason": "x",
        },
    )
    assert forced.status_code == 403
    assert calls == [] and state(log) == NOTHING


def test_operator__is_offered_the_action_on_both_lists(login, sent):
    client = login("operator")
    sent()
    assert "recall_messages" in offered(client, LEDGER)
    assert "recall_messages" in offered(client, RUNS)


# -- the action ------------------------------------------------------------------------------


def test_action__its_page_says_which_will_be_recalled_and_which_not_and_why(login, sent, calls):
    client = login("operator")
    fine, split = sent(recipient="lisi"), sent("app_split", "qianqi", LONG)
    robot, late = sent("group", "ops"), past_24_hours(sent(recipient="zhao"))
    failed = sent(recipient="sun")
    SendLog.objects.filter(pk=failed.pk).update(status="failed")
    data = {
        "action": "recall_messages",
        "_selected_action": [row.pk for row in (fine, split, robot, late, failed)],
    }

    page = client.post(LEDGER, data)
    html = page.content.decode()

    assert page.templates[0].name == "admin/reminders/recall.html"
    assert "2 messages will be taken back from their recipients" in html
    assert "lisi" in html and "qianqi" in html
    parts = len(split.reply_detail["msgids"])
    assert f"<td>{parts}</td>" in html
    for line in (
        "1 selected message left as it was: its channel group cannot take a message back "
        "(a group robot cannot).",
        "1 selected message left as it was: it was sent more than 24 hours ago",
        "1 selected message left as it was: it was not delivered (Failed).",
    ):
        assert line in html
    assert calls == []

    unexplained = client.post(LEDGER, {**data, "post": "yes", "reason": ""})
    assert unexplained.status_code == 200
    assert "Say why" in unexplained.content.decode()
    assert calls == [] and not SendLog.objects.filter(recalled_at__isnull=False).exists()


def test_action__recalls_each_it_can_one_failure_never_stopping_the_others(login, sent, calls):
    client = login("operator")
    broken = sent("app_split", "qianqi", LONG)  # first in the list: it fails midway
    parts = broken.reply_detail["msgids"]
    get_sender("app_split").recall(parts[1])  # taken back already: refused this time
    calls.clear()
    fine, robot = sent(recipient="lisi"), sent("group", "ops")
    data = {
        "action": "recall_messages",
        "_selected_action": [broken.pk, fine.pk, robot.pk],
        "post": "yes",
        "reason": "sent by mistake",
    }

    response = client.post(LEDGER, data)

    assert response.status_code == 302
    messages = reported(response)
    assert messages[:2] == [
        "1 message recalled.",
        "1 selected message left as it was: its channel group cannot take a message back "
        "(a group robot cannot).",
    ]
    assert messages[2].startswith(
        f"Not recalled: the message to qianqi ({broken.key}): part 2 of {len(parts)} ({parts[1]}): "
    )
    assert messages[2].endswith(
        f"1 of its {len(parts)} parts were recalled; recall it again for the rest."
    )
    assert len(messages) == 3
    assert calls == [parts[0], parts[1], fine.provider_message_id]
    assert SendLog.objects.get(pk=fine.pk).recalled_by == "operator"
    assert state(robot) == NOTHING
    row = SendLog.objects.get(pk=broken.pk)
    assert row.recalled_at is None and row.recalled_ids == parts[:1] and row.recall_error


def test_action__a_crash_on_one_message_is_reported_and_the_others_recalled(
    login, sent, calls, monkeypatch
):
    client = login("operator")
    first, second = sent(recipient="lisi"), sent(recipient="zhao")
    spy = MemorySender.recall

    def crash_on_the_first(self: MemorySender, message_id: str) -> None:
        if message_id == first.provider_message_id:
            raise RuntimeError("the sender's bug")
        spy(self, message_id)

    monkeypatch.setattr(MemorySender, "recall", crash_on_the_first)
    data = {"action": "recall_messages", "_selected_action": [first.pk, second.pk]}
    response = client.post(LEDGER, {**data, "post": "yes", "reason": "wrong day"})

    assert reported(response) == [
        "1 message recalled.",
        f"Not recalled: the message to lisi ({first.key}): RuntimeError: the sender's bug",
    ]
    assert state(first) == NOTHING
    assert SendLog.objects.get(pk=second.pk).recalled_by == "operator"


def test_action__on_the_runs_recalls_their_messages(login, sent, calls, make_task):
    client = login("operator")
    log = sent(recipient="lisi")
    waiting = make_task("follow_up", "zhao", channel="app", at=timezone.now() + timedelta(hours=2))
    dispatch.materialize(now=waiting.next_run)
    unsent = TaskRun.objects.get(task=waiting)
    data = {"action": "recall_messages", "_selected_action": [log.run_id, unsent.pk]}

    page = client.post(RUNS, data).content.decode()
    assert "1 message will be taken back from its recipient" in page
    assert "1 selected run left as it was: it sent no message." in page

    response = client.post(RUNS, {**data, "post": "yes", "reason": "wrong day"})
    assert reported(response) == [
        "1 message recalled.",
        "1 selected run left as it was: it sent no message.",
    ]
    assert calls == [log.provider_message_id]


# -- what the lists and pages say ------------------------------------------------------------


def test_lists_and_pages__say_who_recalled_when_and_why_and_how_far_a_failed_one_got(login, sent):
    client = login("operator")
    fine = sent(recipient="lisi")
    broken = sent("app_split", "qianqi", LONG)
    parts = broken.reply_detail["msgids"]
    get_sender("app_split").recall(parts[1])
    client.post(recall_of(fine), {"post": "yes", "reason": "wrong customer"})
    client.post(recall_of(broken), {"post": "yes", "reason": "wrong customer"})
    when = f"{timezone.localtime(SendLog.objects.get(pk=fine.pk).recalled_at):%Y-%m-%d %H:%M}"
    said = f"recalled by operator, {when}: wrong customer"
    failed = f"recall failed, 1 of {len(parts)} parts recalled: part 2 of {len(parts)}"

    ledger = client.get(LEDGER).content.decode()
    column = dict(zip(cells(ledger, "recipient"), cells(ledger, "recall"), strict=True))
    assert column["lisi"] == said
    assert column["qianqi"].startswith(failed)
    runs = client.get(RUNS).content.decode()
    assert sorted(cells(runs, "recalled"))[1] == said
    assert said in client.get(page_of(fine)).content.decode()
    assert said in client.get(run_page(fine)).content.decode()
    assert failed in client.get(run_page(broken)).content.decode()
    # The rows still recallable keep their button: the broken one may be tried again.
    assert "reminders-recall" in client.get(page_of(broken)).content.decode()

    recent = client.get(LEDGER, {"recall": "day"}).context["cl"].result_list
    assert [row.pk for row in recent] == [fine.pk]
    tried = client.get(LEDGER, {"recall": "failed"}).context["cl"].result_list
    assert [row.pk for row in tried] == [broken.pk]
