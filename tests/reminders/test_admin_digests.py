"""What the admin says of digests is what the engine did: a run carried in a digest names
its digest and the ledger row of the message that carried it (it has none of its own), a
digest's run and its ledger row list the runs it carried with their status now, and the
runs' list tells digests apart and filters the runs waiting in one (``folded``). The
digests are made by the engine itself, at frozen times, as tests/reminders/test_digests.py
makes them."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from reminders.engine import actions, dispatch
from reminders.exceptions import ActionRefused, PermanentSendError, TransientSendError
from reminders.models import DIGEST_KEY, SendLog, TaskRun
from reminders.senders.memory import MemorySender
from tests.support.digests import THURSDAY, at, follow_up, release, tick_at

pytestmark = pytest.mark.django_db

RUNS = "admin:reminders_taskrun_changelist"
CUSTOMERS = ("ACME", "Globex", "Initech")


@pytest.fixture(autouse=True)
def digested(settings: Any) -> None:
    settings.REMINDERS_KINDS = {
        "follow_up": {"digest_seconds": 900, "max_lateness_seconds": 400 * 24 * 3600}
    }
    # A channel that takes a message back, as WeCom's app does.
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        "app": {"BACKEND": "reminders.senders.memory.MemorySender", "OPTIONS": {"cards": True}},
    }


def fold(
    recipient: str = "alice", *, fail_first: bool = False, channel: str = "memory"
) -> tuple[TaskRun, list[TaskRun]]:
    """Three follow-ups of one window, folded by the engine into one digest, sent at the
    window's end (or, ``fail_first``, waiting to retry, its items ``folded``)."""
    tasks = [
        follow_up(recipient, at(THURSDAY, 9, n * 5), customer, channel)
        for n, customer in enumerate(CUSTOMERS)
    ]
    if fail_first:
        MemorySender.script.append(TransientSendError("busy", code="-1"))
    tick_at(release(recipient, at(THURSDAY, 9, 15)))
    digest = TaskRun.objects.get(task__payload__has_key=DIGEST_KEY, task__recipient=recipient)
    items = [TaskRun.objects.get(task=task) for task in tasks]
    return digest, items


@pytest.fixture
def sent() -> tuple[TaskRun, list[TaskRun]]:
    digest, items = fold()
    assert digest.status == TaskRun.Status.SENT
    assert {item.status for item in items} == {TaskRun.Status.SENT}
    return digest, items


@pytest.fixture
def pending() -> tuple[TaskRun, list[TaskRun]]:
    digest, items = fold(fail_first=True)
    assert digest.status == TaskRun.Status.RETRYING
    assert {item.status for item in items} == {TaskRun.Status.FOLDED}
    return digest, items


def run_page(client: Any, run: TaskRun) -> str:
    response = client.get(reverse("admin:reminders_taskrun_change", args=[run.pk]))
    assert response.status_code == 200
    return response.content.decode()


def ledger_page(client: Any, log: SendLog) -> str:
    response = client.get(reverse("admin:reminders_sendlog_change", args=[log.pk]))
    assert response.status_code == 200
    return response.content.decode()


def field(html: str, name: str) -> str:
    """The read-only field ``name`` of a change page, as HTML ("" when not shown)."""
    found = re.search(
        rf'<div class="form-row field-{name}">.*?<div class="readonly">(.*?)</div>', html, re.S
    )
    return found.group(1) if found else ""


def listed(client: Any, **params: str) -> list[int]:
    response = client.get(reverse(RUNS), params)
    assert response.status_code == 200
    return sorted(run.pk for run in response.context["cl"].result_list)


def cells(html: str, column: str) -> list[str]:
    found = re.findall(rf'<t[dh] class="field-{column}[^"]*">(.*?)</t[dh]>', html, re.S)
    return [cell.strip() for cell in found]


# A run carried in a digest --------------------------------------------------------------


def test_item_page__names_its_digest_and_the_ledger_row_of_its_message(admin_client, sent):
    digest, items = sent
    log = SendLog.objects.get(run=digest)
    assert log.provider_message_id
    assert not SendLog.objects.filter(run__in=items).exists()  # none of its own

    shown = field(run_page(admin_client, items[0]), "in_digest")

    assert reverse("admin:reminders_taskrun_change", args=[digest.pk]) in shown
    assert f"run {digest.pk}: Sent" in shown
    assert reverse("admin:reminders_sendlog_change", args=[log.pk]) in shown
    assert log.key in shown and log.provider_message_id in shown


def test_item_page__of_a_pending_digest_says_where_its_message_stands(admin_client, pending):
    digest, items = pending
    html = run_page(admin_client, items[1])
    shown = field(html, "in_digest")

    assert f"run {digest.pk}: Waiting to retry" in shown
    assert "In a digest" in field(html, "status")
    # The attempt that failed reserved the digest's key: the row says so, unsent.
    log = SendLog.objects.get(run=digest)
    assert log.key in shown and f"({log.get_status_display()})" in shown
    assert log.status != SendLog.Status.SENT


def test_item_page__of_a_digest_that_reserved_no_key_says_it_sent_nothing(admin_client, pending):
    digest, items = pending
    SendLog.objects.filter(run=digest).delete()

    shown = field(run_page(admin_client, items[0]), "in_digest")

    assert "No ledger row: the digest has sent nothing." in shown


# A digest -------------------------------------------------------------------------------


def test_digest_page__lists_the_runs_it_carried_with_their_status(admin_client, pending):
    digest, items = pending
    shown = field(run_page(admin_client, digest), "digest_items")

    for item, customer in zip(items, CUSTOMERS, strict=True):
        assert reverse("admin:reminders_taskrun_change", args=[item.pk]) in shown
        assert customer in shown  # as the digest listed it
    assert shown.count("In a digest") == 3
    assert field(run_page(admin_client, digest), "in_digest") == ""  # it went in none

    tick_at(digest.next_attempt_at)  # sent on its retry: its items with it

    assert field(run_page(admin_client, digest), "digest_items").count("<td>Sent</td>") == 3


def test_pages__are_read_only_and_a_plain_run_shows_no_digest(admin_client, sent):
    digest, items = sent
    plain = follow_up("bob", at(THURSDAY, 9, 0), "Alone")
    tick_at(release("bob", at(THURSDAY, 9, 15)))
    alone = TaskRun.objects.get(task=plain)
    assert (alone.status, alone.digest) == (TaskRun.Status.SENT, None)

    html = run_page(admin_client, alone)

    assert field(html, "in_digest") == "" and field(html, "digest_items") == ""
    assert "field-digest" not in html
    for run in (digest, items[0]):
        assert 'name="_save"' not in run_page(admin_client, run)


# The runs' list -------------------------------------------------------------------------


def test_run_list__filters_the_runs_waiting_in_a_digest_by_their_status(admin_client, pending):
    _digest, items = pending
    later = follow_up("bob", at(THURSDAY, 10, 0), "Later")
    dispatch.materialize(now=at(THURSDAY, 10, 0))
    assert TaskRun.objects.get(task=later).status == TaskRun.Status.SCHEDULED

    assert listed(admin_client, status__exact="folded") == sorted(item.pk for item in items)
    html = admin_client.get(reverse(RUNS)).content.decode()
    assert "?status__exact=folded" in html and "In a digest" in html


def test_run_list__tells_digests_from_the_runs_they_carried_and_the_others(admin_client, sent):
    digest, items = sent
    plain = follow_up("bob", at(THURSDAY, 9, 0), "Alone")
    tick_at(release("bob", at(THURSDAY, 9, 15)))
    alone = TaskRun.objects.get(task=plain)

    assert listed(admin_client, digest="yes") == [digest.pk]
    assert listed(admin_client, digest="no") == sorted([alone.pk, *(i.pk for i in items)])
    assert listed(admin_client, digest="items") == sorted(item.pk for item in items)


def test_run_list__digest_column_links_a_digest_to_its_runs_and_each_run_to_it(admin_client, sent):
    digest, items = sent
    html = admin_client.get(reverse(RUNS)).content.decode()
    column = cells(html, "digest_cell")

    to_items = f"{reverse(RUNS)}?digest__id__exact={digest.pk}"
    assert f'<a href="{to_items}">digest of 3 runs</a>' in column
    to_digest = reverse("admin:reminders_taskrun_change", args=[digest.pk])
    assert column.count(f'<a href="{to_digest}">in run {digest.pk}</a>') == 3
    assert listed(admin_client, digest__id__exact=str(digest.pk)) == sorted(i.pk for i in items)


def test_run_list__costs_no_query_per_digest(admin_client, sent):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            admin_client.get(reverse(RUNS))
        return len(captured)

    first = queries()
    fold("carol")
    fold("dave")
    assert TaskRun.objects.filter(task__payload__has_key=DIGEST_KEY).count() == 3
    assert queries() == first


# The ledger -----------------------------------------------------------------------------


def test_ledger_page__of_a_digest_lists_the_runs_it_carried(admin_client, sent):
    digest, items = sent
    plain = follow_up("bob", at(THURSDAY, 9, 0), "Alone")
    tick_at(release("bob", at(THURSDAY, 9, 15)))
    log = SendLog.objects.get(run=digest)

    shown = field(ledger_page(admin_client, log), "digest_items")

    for item, customer in zip(items, CUSTOMERS, strict=True):
        assert reverse("admin:reminders_taskrun_change", args=[item.pk]) in shown
        assert customer in shown
    assert shown.count(">Sent<") == 3
    other = ledger_page(admin_client, SendLog.objects.get(task=plain))
    assert "field-digest_items" not in other


def test_recall__of_the_digests_message_from_its_run_leaves_its_runs_saying_so(admin_client):
    digest, items = fold(channel="app")
    log = SendLog.objects.get(run=digest)
    selected = {"action": "recall_messages", "_selected_action": [items[0].pk, digest.pk]}

    html = admin_client.post(reverse(RUNS), selected).content.decode()

    assert "1 message will be taken back" in html
    assert (
        "1 selected run left as it was: its message is its digest&#x27;s, recalled from the "
        "digest&#x27;s run." in html
    )
    assert "it sent no message" not in html

    admin_client.post(reverse(RUNS), {**selected, "post": "yes", "reason": "wrong list"})

    assert [message.body["content"] for message in MemorySender.recalled] == [
        message.body["content"] for message in MemorySender.outbox
    ]
    log.refresh_from_db()
    assert log.recalled_at is not None
    for item in items:  # each names the message taken back
        assert "recalled by admin" in field(run_page(admin_client, item), "in_digest")


# Run now and retry: no line twice -------------------------------------------------------


def _reported(response: Any) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


@pytest.mark.parametrize("ends", ["sent", "failed"])
def test_run_now__a_digests_task_is_refused_like_its_retry(admin_client, ends):
    if ends == "failed":
        MemorySender.script.append(PermanentSendError("refused", code="40003"))
    digest, _items = fold()
    assert digest.status == ends
    url = reverse("admin:reminders_scheduledtask_run_now", args=[digest.task_id])
    page = admin_client.get(url).content.decode()
    assert "0 tasks will get a run due now" in page
    assert "a digest that ended is not sent again" in page
    response = admin_client.post(url, {"post": "yes"})
    assert _reported(response)[0] == "0 tasks have a run due now."
    with pytest.raises(ActionRefused) as refused:
        actions.run_now(digest.task)
    assert refused.value.code == "digest"
    assert TaskRun.objects.filter(task=digest.task_id).count() == 1


def test_retry__a_failed_digests_runs_go_again_each_line_once(admin_client, outbox):
    MemorySender.script.append(PermanentSendError("refused", code="40003"))
    digest, items = fold()
    tick_at(at(THURSDAY, 9, 30))  # its runs end as it did
    assert {TaskRun.objects.get(pk=item.pk).status for item in items} == {TaskRun.Status.FAILED}
    # Ops select the digest and its runs, retry them all, and run the digest's task now.
    selected = [digest.pk, *(item.pk for item in items)]
    admin_client.post(
        reverse(RUNS), {"action": "retry_runs", "_selected_action": selected, "post": "yes"}
    )
    admin_client.post(
        reverse("admin:reminders_scheduledtask_run_now", args=[digest.task_id]), {"post": "yes"}
    )
    for moment in (timezone.now(), timezone.now() + timedelta(minutes=5)):
        tick_at(moment)
    listed = "".join(message.body["content"] for message in outbox)
    assert [listed.count(f"{customer} (") for customer in CUSTOMERS] == [1, 1, 1]
    assert {TaskRun.objects.get(pk=item.pk).status for item in items} == {TaskRun.Status.SENT}
    assert TaskRun.objects.get(pk=digest.pk).status == TaskRun.Status.FAILED
