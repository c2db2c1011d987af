"""The callback URL as WeCom calls it: signed, encrypted requests through Django's test
client, against the real database. Each refusal changes nothing; each click acts once."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from reminders import api, checks, signals
from reminders.callback import crypto, events
from reminders.engine import announce, planning
from reminders.models import CallbackNonce, RunAction, ScheduledTask, TaskRun
from reminders.models.acting import card_id
from tests.crm.models import Inquiry

pytestmark = pytest.mark.django_db

TOKEN = "QDG6eK"
KEY = "jWmYm7qr5nMoAUwZRjGtBxmz3KA1tkAj3ykkR6q2B2C"
CORP = "wwcorp0001"
AGENT = "1000002"
OURS = crypto.Credentials(token=TOKEN, encoding_aes_key=KEY, receive_id=CORP)
URL = "/reminders/wecom/callback"


@pytest.fixture(autouse=True)
def callback_settings(settings: Any) -> None:
    settings.WECOM_CALLBACK_TOKEN = TOKEN
    settings.WECOM_CALLBACK_AES_KEY = KEY
    settings.WECOM_CORP_ID = CORP
    settings.WECOM_AGENT_ID = AGENT


def sent_run(task: ScheduledTask) -> TaskRun:
    run = planning.new_run(task, timezone.now().replace(microsecond=0))
    run.status = TaskRun.Status.SENT
    run.finished_at = timezone.now()
    run.save()
    return run


def event_xml(run: TaskRun | None = None, **values: str) -> str:
    fields = {
        "ToUserName": CORP,
        "FromUserName": run.task.recipient if run else "alice",
        "CreateTime": str(int(time.time())),
        "MsgType": "event",
        "Event": "template_card_event",
        "EventKey": "done",
        "TaskId": card_id(run) if run else "r1-0000000000",
        "CardType": "button_interaction",
        "ResponseCode": "rc-123",
        "AgentID": AGENT,
    }
    fields.update(values)
    inner = "".join(f"<{name}><![CDATA[{value}]]></{name}>" for name, value in fields.items())
    return f"<xml>{inner}</xml>"


def post(
    client: Client,
    message: str,
    *,
    credentials: crypto.Credentials = OURS,
    timestamp: str | None = None,
    nonce: str | None = None,
    signature: str | None = None,
    body: str | None = None,
) -> Any:
    sealed = crypto.seal(credentials, message, timestamp=timestamp, nonce=nonce)
    xml = body if body is not None else events.post_xml(sealed, to_user_name=CORP, agent_id=AGENT)
    query = (
        f"?msg_signature={signature or sealed.msg_signature}"
        f"&timestamp={sealed.timestamp}&nonce={sealed.nonce}"
    )
    return client.post(URL + query, data=xml, content_type="text/xml")


def nothing_changed(run: TaskRun) -> bool:
    return not RunAction.objects.filter(run=run).exists()


# --- URL verification ------------------------------------------------------------------


def test_get__verifies_the_url_with_the_echostr_decrypted(client: Client) -> None:
    sealed = crypto.seal(OURS, "1616140317555161061")
    response = client.get(
        URL,
        {
            "msg_signature": sealed.msg_signature,
            "timestamp": sealed.timestamp,
            "nonce": sealed.nonce,
            "echostr": sealed.encrypt,
        },
    )
    assert (response.status_code, response.content) == (200, b"1616140317555161061")


def test_get__a_bad_signature_is_403(client: Client) -> None:
    sealed = crypto.seal(OURS, "123")
    response = client.get(
        URL,
        {
            "msg_signature": "0" * 40,
            "timestamp": sealed.timestamp,
            "nonce": "1",
            "echostr": sealed.encrypt,
        },
    )
    assert response.status_code == 403


def test_not_configured__404(client: Client, settings: Any) -> None:
    settings.WECOM_CALLBACK_TOKEN = ""
    assert (
        client.get(URL, {"msg_signature": "x", "timestamp": "1", "nonce": "1"}).status_code == 404
    )


# --- A click -------------------------------------------------------------------------


def test_done__records_who_acted_how_and_when_and_answers_success(client, make_task) -> None:
    run = sent_run(make_task("follow_up", "alice"))
    response = post(client, event_xml(run))
    assert (response.status_code, response.content) == (200, b"success")
    action = RunAction.objects.get(run=run)
    assert (action.action, action.member, action.response_code) == ("done", "alice", "rc-123")
    assert abs((action.acted_at - timezone.now()).total_seconds()) < 5
    assert action.announced_at is None  # the CRM hears of it from a scheduler


def test_done__the_same_click_again_changes_nothing_and_answers_success(client, make_task) -> None:
    run = sent_run(make_task("follow_up", "alice"))
    assert post(client, event_xml(run)).status_code == 200
    first = RunAction.objects.get(run=run)
    # A double click (a new request) and then another button: the first action stands.
    assert post(client, event_xml(run)).content == b"success"
    assert post(client, event_xml(run, EventKey="snooze_1h")).content == b"success"
    assert list(RunAction.objects.filter(run=run)) == [first]
    assert not TaskRun.objects.filter(task=run.task, is_manual=True).exists()


def test_run_acted__is_sent_once_by_a_scheduler_after_the_click(
    client, make_task, django_capture_on_commit_callbacks
) -> None:
    run = sent_run(make_task("follow_up", "alice"))
    heard: list[dict[str, Any]] = []

    def receiver(sender: type, **kwargs: Any) -> None:
        heard.append(kwargs)

    signals.run_acted.connect(receiver)
    try:
        post(client, event_xml(run))
        assert heard == []  # not within WeCom's request
        with django_capture_on_commit_callbacks(execute=True):
            assert announce.announce() == 1
        with django_capture_on_commit_callbacks(execute=True):
            assert announce.announce() == 0
    finally:
        signals.run_acted.disconnect(receiver)
    assert [(h["run"].pk, h["action"], h["member"]) for h in heard] == [(run.pk, "done", "alice")]
    assert RunAction.objects.get(run=run).announced_at is not None


@pytest.mark.parametrize("key", ["done", "take"])
def test_done_on_an_inquiry__cancels_its_escalation(client, make_task, key: str) -> None:
    inquiry = Inquiry.objects.create(subject="500 units, price?")
    first, escalation = api.schedule_inquiry_timeout(
        "alice",
        arrived_at=timezone.now(),
        minutes=30,
        about=inquiry,
        escalate_to="bob",
        escalate_after_minutes=30,
    )
    run = sent_run(first)
    assert post(client, event_xml(run, EventKey=key)).status_code == 200
    escalation.refresh_from_db()
    assert escalation.status == ScheduledTask.Status.CANCELLED


def test_snooze__makes_a_run_an_hour_later_linked_to_the_click(client, make_task) -> None:
    run = sent_run(make_task("follow_up", "alice"))
    before = timezone.now()
    assert post(client, event_xml(run, EventKey="snooze_1h")).status_code == 200
    action = RunAction.objects.get(run=run)
    later = action.follow_up
    assert later is not None and later.task_id == run.task_id
    assert later.status == TaskRun.Status.SCHEDULED
    assert timedelta(minutes=59) < later.due_at - before < timedelta(minutes=61)
    assert later.ledger_key != run.ledger_key


# --- Refusals: nothing changed ---------------------------------------------------------


def test_a_bad_signature__403(client, make_task) -> None:
    run = sent_run(make_task("follow_up", "alice"))
    assert post(client, event_xml(run), signature="0" * 40).status_code == 403
    assert nothing_changed(run) and not CallbackNonce.objects.exists()


def test_another_token__403(client, make_task) -> None:
    run = sent_run(make_task("follow_up", "alice"))
    theirs = crypto.Credentials(token="other", encoding_aes_key=KEY, receive_id=CORP)
    assert post(client, event_xml(run), credentials=theirs).status_code == 403
    assert nothing_changed(run)


def test_a_ciphertext_for_another_corp__403(client, make_task) -> None:
    run = sent_run(make_task("follow_up", "alice"))
    theirs = crypto.Credentials(token=TOKEN, encoding_aes_key=KEY, receive_id="wwsomeoneelse")
    assert post(client, event_xml(run), credentials=theirs).status_code == 403
    assert nothing_changed(run)


@pytest.mark.parametrize("field", ["ToUserName", "AgentID"])
def test_a_corp_or_agent_not_ours__403(client, make_task, field: str) -> None:
    run = sent_run(make_task("follow_up", "alice"))
    assert post(client, event_xml(run, **{field: "999"})).status_code == 403
    assert nothing_changed(run)


@pytest.mark.parametrize("skew", [-3600, 3600])
def test_a_timestamp_outside_the_window__403(client, make_task, skew: int) -> None:
    run = sent_run(make_task("follow_up", "alice"))
    response = post(client, event_xml(run), timestamp=str(int(time.time()) + skew))
    assert response.status_code == 403
    assert nothing_changed(run)


def test_a_replayed_request__403(client, make_task) -> None:
    done = sent_run(make_task("follow_up", "alice"))
    other = sent_run(make_task("follow_up", "alice"))
    assert post(client, event_xml(done), nonce="424242").status_code == 200
    # The same nonce again, even for another card: refused, nothing done.
    assert post(client, event_xml(other), nonce="424242").status_code == 403
    assert nothing_changed(other)


def test_a_click_by_someone_else__403(client, make_task) -> None:
    run = sent_run(make_task("follow_up", "alice"))
    assert post(client, event_xml(run, FromUserName="mallory")).status_code == 403
    assert nothing_changed(run)


@pytest.mark.parametrize(
    "body", ["<xml><Encrypt>", "not xml at all", '<!DOCTYPE x [<!ENTITY a "b">]><xml/>']
)
def test_unparseable_xml__400(client, make_task, body: str) -> None:
    run = sent_run(make_task("follow_up", "alice"))
    assert post(client, event_xml(run), body=body).status_code == 400
    assert nothing_changed(run)


def test_an_unknown_run__404(client, make_task) -> None:
    run = sent_run(make_task("follow_up", "alice"))
    assert post(client, event_xml(run, TaskId="r999999-0123456789")).status_code == 404
    # A card id of a real run under another digest is no card of ours either.
    assert post(client, event_xml(run, TaskId=f"r{run.pk}-0123456789")).status_code == 404
    assert nothing_changed(run)


def test_a_run_not_sent__404(client, make_task) -> None:
    task = make_task("follow_up", "alice")
    run = planning.new_run(task, timezone.now().replace(microsecond=0))
    run.save()
    assert post(client, event_xml(run)).status_code == 404
    assert nothing_changed(run)


def test_another_event__answered_success_and_ignored(client, make_task) -> None:
    run = sent_run(make_task("follow_up", "alice"))
    response = post(client, event_xml(run, Event="enter_agent"))
    assert (response.status_code, response.content) == (200, b"success")
    assert nothing_changed(run)


# --- The system check ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("token", "key", "corp", "wrong"),
    [
        (TOKEN, "", CORP, "together"),
        ("", KEY, CORP, "together"),
        (TOKEN, KEY, "", "WECOM_CORP_ID"),
        (TOKEN, KEY[:-1], CORP, "43 characters"),
    ],
)
def test_check__a_callback_half_set_up_is_e015(
    settings: Any, token: str, key: str, corp: str, wrong: str
) -> None:
    settings.WECOM_CALLBACK_TOKEN, settings.WECOM_CALLBACK_AES_KEY = token, key
    settings.WECOM_CORP_ID = corp
    found = [m for m in checks.check_settings() if m.id == "reminders.E015"]
    assert len(found) == 1 and wrong in found[0].msg


def test_check__a_whole_callback_or_none_is_fine(settings: Any) -> None:
    assert not [m for m in checks.check_settings() if m.id == "reminders.E015"]
    settings.WECOM_CALLBACK_TOKEN = settings.WECOM_CALLBACK_AES_KEY = ""
    assert not [m for m in checks.check_settings() if m.id == "reminders.E015"]


# --- What ops see ----------------------------------------------------------------------


def test_admin__the_run_list_and_page_say_who_acted_how_and_when(
    client: Client, admin_client: Client, make_task
) -> None:
    run = sent_run(make_task("follow_up", "alice"))
    untouched = sent_run(make_task("follow_up", "bob"))
    post(client, event_xml(run, EventKey="snooze_1h"))
    acted = timezone.localtime(RunAction.objects.get(run=run).acted_at)

    listing = admin_client.get("/admin/reminders/taskrun/").content.decode()
    said = f"remind me in 1 hour by alice, {acted:%Y-%m-%d %H:%M}"
    assert said in listing
    page = admin_client.get(f"/admin/reminders/taskrun/{run.pk}/change/").content.decode()
    assert said in page
    other = admin_client.get(f"/admin/reminders/taskrun/{untouched.pk}/change/").content.decode()
    assert "remind me in 1 hour by" not in other


def test_nonces__are_forgotten_once_their_requests_would_be_refused_by_age() -> None:
    now = timezone.now()
    window = timedelta(seconds=300)
    CallbackNonce.objects.create(nonce="old", timestamp=1)
    CallbackNonce.objects.create(nonce="recent", timestamp=2)
    CallbackNonce.objects.filter(nonce="old").update(received_at=now - 2 * window - timedelta(1))
    assert announce.forget_nonces(now) == 1
    assert announce.forget_nonces(now) == 0
    assert list(CallbackNonce.objects.values_list("nonce", flat=True)) == ["recent"]


def test_a_body_larger_than_a_callback__400(client, make_task) -> None:
    run = sent_run(make_task("follow_up", "alice"))
    padding = "<Padding>" + "x" * (70 * 1024) + "</Padding>"
    body = f"<xml><Encrypt>abc</Encrypt>{padding}</xml>"
    assert post(client, event_xml(run), body=body).status_code == 400
    assert nothing_changed(run)


def test_a_callback_set_up_wrong__404_saying_why(client: Client, settings: Any) -> None:
    settings.WECOM_CALLBACK_AES_KEY = KEY[:-1]  # 42 characters: no key WeCom gives
    response = client.get(URL, {"msg_signature": "x", "timestamp": "1", "nonce": "1"})
    assert response.status_code == 404
    assert b"43 characters" in response.content
