"""The callback URL as WeCom calls it: signed, encrypted requests through Django's test
client, against the real database. Each refusal changes nothing; each click acts once."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode
from zoneinfo import ZoneInfo

import pytest
from django.conf import settings as django_settings
from django.test import Client, override_settings
from django.utils import timezone
from hypothesis import HealthCheck, example, given
from hypothesis import settings as examples
from hypothesis import strategies as st

from reminders import api, checks, signals
from reminders.callback import crypto, events
from reminders.engine import announce, planning
from reminders.models import CallbackNonce, RunAction, ScheduledTask, TaskRun
from reminders.models.acting import card_id
from tests.crm.models import Inquiry

pytestmark = pytest.mark.django_db

# What a query string can carry once decoded: any character but a surrogate.
QUERY_TEXT = st.characters(blacklist_categories=["Cs"])

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


@pytest.fixture
def frozen(time_machine: Any) -> None:
    """The clock stopped, so that a timestamp is as far from it as the test says."""
    time_machine.move_to(datetime(2027, 1, 9, 15, 30, tzinfo=ZoneInfo("Asia/Shanghai")), tick=False)


@pytest.fixture
def lenient_client() -> Client:
    """A test client that answers a view's exception with a 500, as production does."""
    return Client(raise_request_exception=False)


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
    query = {
        "msg_signature": signature or sealed.msg_signature,
        "timestamp": sealed.timestamp,
        "nonce": sealed.nonce,
    }
    return client.post(f"{URL}?{urlencode(query)}", data=xml, content_type="text/xml")


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


def verify(client: Client, sealed: crypto.Sealed, **query: str) -> Any:
    """WeCom's GET that verifies the URL, with the values of ``sealed`` unless given."""
    values = {
        "msg_signature": sealed.msg_signature,
        "timestamp": sealed.timestamp,
        "nonce": sealed.nonce,
        "echostr": sealed.encrypt,
    }
    return client.get(URL, {**values, **query})


@pytest.mark.parametrize("skew", [-301, 301])
def test_get__a_timestamp_outside_the_window_is_403(client: Client, frozen, skew: int) -> None:
    sealed = crypto.seal(OURS, "1616140317555161061", timestamp=str(int(time.time()) + skew))
    response = verify(client, sealed)
    assert response.status_code == 403
    assert b"1616140317555161061" not in response.content


def test_get__a_timestamp_not_a_number_is_400(client: Client) -> None:
    sealed = crypto.seal(OURS, "1616140317555161061", timestamp="9" * 400)
    assert verify(client, sealed).status_code == 400


def test_get__the_same_request_again_is_403(client: Client) -> None:
    sealed = crypto.seal(OURS, "1616140317555161061")
    assert verify(client, sealed).status_code == 200
    response = verify(client, sealed)
    assert response.status_code == 403
    assert b"1616140317555161061" not in response.content


def test_get__a_nonce_a_click_used_is_403(client: Client, make_task) -> None:
    run = sent_run(make_task("follow_up", "alice"))
    assert post(client, event_xml(run), nonce="777").status_code == 200
    echo = crypto.seal(OURS, "1616140317555161061", nonce="777")
    assert verify(client, echo).status_code == 403


@pytest.mark.parametrize("posted_first", [True, False], ids=["after-the-post", "before-it"])
def test_get__a_captured_click_replayed_as_a_get_reveals_nothing(
    client: Client, make_task, posted_first: bool
) -> None:
    run = sent_run(make_task("follow_up", "alice"))
    captured = crypto.seal(OURS, event_xml(run))
    if posted_first:
        body = events.post_xml(captured, to_user_name=CORP, agent_id=AGENT)
        query = urlencode(
            {k: getattr(captured, k) for k in ("msg_signature", "timestamp", "nonce")}
        )
        assert client.post(f"{URL}?{query}", data=body, content_type="text/xml").status_code == 200
    response = verify(client, captured)
    assert response.status_code == 403
    assert b"template_card_event" not in response.content
    assert card_id(run).encode() not in response.content


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


@pytest.mark.parametrize("method", ["get", "post"])
def test_login_required_middleware__the_callback_needs_no_login(
    client: Client, make_task, method: str
) -> None:
    login_required = "django.contrib.auth.middleware.LoginRequiredMiddleware"
    with override_settings(MIDDLEWARE=[*django_settings.MIDDLEWARE, login_required]):
        answered(client, make_task, method)


def answered(client: Client, make_task: Any, method: str) -> None:
    """The URL verified (GET) or a click taken (POST), as WeCom asks them."""
    if method == "get":
        response = verify(client, crypto.seal(OURS, "1616140317555161061"))
        assert (response.status_code, response.content) == (200, b"1616140317555161061")
    else:
        run = sent_run(make_task("follow_up", "alice"))
        assert post(client, event_xml(run)).content == b"success"
        assert RunAction.objects.filter(run=run).exists()


def test_not_configured__404(client: Client, settings: Any) -> None:
    settings.WECOM_CALLBACK_TOKEN = settings.WECOM_CALLBACK_AES_KEY = ""
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


class Killed(BaseException):
    """The scheduler's process ending (a deploy's SIGTERM) while a receiver runs."""


def test_run_acted__a_scheduler_that_dies_while_telling__leaves_it_to_the_next(
    client, make_task, django_capture_on_commit_callbacks
) -> None:
    run = sent_run(make_task("follow_up", "alice"))
    post(client, event_xml(run))
    heard: list[int] = []

    def dies(sender: type, **kwargs: Any) -> None:
        heard.append(kwargs["run"].pk)
        raise Killed

    def hears(sender: type, **kwargs: Any) -> None:
        heard.append(kwargs["run"].pk)

    signals.run_acted.connect(dies)
    try:
        with pytest.raises(Killed), django_capture_on_commit_callbacks(execute=True):
            announce.announce()
    finally:
        signals.run_acted.disconnect(dies)
    assert RunAction.objects.get(run=run).announced_at is None  # not told: not marked
    signals.run_acted.connect(hears)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            # Another scheduler takes it over once the dead one's lease is over.
            assert announce.announce() == 0
            later = timezone.now() + announce.LEASE + timedelta(seconds=1)
            assert announce.announce(later) == 1
            assert announce.announce(later) == 0
    finally:
        signals.run_acted.disconnect(hears)
    assert heard == [run.pk, run.pk]
    assert RunAction.objects.get(run=run).announced_at is not None


def test_run_acted__a_receiver_that_raises_is_logged_and_the_action_not_told_again(
    client, make_task, caplog, django_capture_on_commit_callbacks
) -> None:
    run = sent_run(make_task("follow_up", "alice"))
    post(client, event_xml(run))
    heard: list[str] = []

    def fails(sender: type, **kwargs: Any) -> None:
        raise RuntimeError("the CRM is down")

    def hears(sender: type, **kwargs: Any) -> None:
        heard.append(kwargs["action"])

    signals.run_acted.connect(fails)
    signals.run_acted.connect(hears)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            assert announce.announce() == 1
        later = timezone.now() + announce.LEASE + timedelta(seconds=1)
        with django_capture_on_commit_callbacks(execute=True):
            assert announce.announce(later) == 0
    finally:
        signals.run_acted.disconnect(fails)
        signals.run_acted.disconnect(hears)
    assert heard == ["done"]  # the other receivers all the same, once
    assert "fails" in caplog.text and "the CRM is down" in caplog.text
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


@pytest.mark.parametrize("skew", [-301, 301])
def test_a_timestamp_outside_the_window__403(client, make_task, frozen, skew: int) -> None:
    run = sent_run(make_task("follow_up", "alice"))
    response = post(client, event_xml(run), timestamp=str(int(time.time()) + skew))
    assert response.status_code == 403
    assert nothing_changed(run)


@pytest.mark.parametrize("skew", [-300, 300])
def test_a_timestamp_at_the_windows_edge__is_taken(client, make_task, frozen, skew: int) -> None:
    run = sent_run(make_task("follow_up", "alice"))
    assert post(client, event_xml(run), timestamp=str(int(time.time()) + skew)).status_code == 200
    assert not nothing_changed(run)


@pytest.mark.parametrize(
    "timestamp",
    [
        "9" * 400,
        "-1",
        "-0",
        "soon",
        "1e9",
        "",
        "+{now}",
        " {now}",
        "{now}.5",
        "{now_underscored}",
        "{now_arabic}",
    ],
)
def test_a_timestamp_not_a_sane_whole_number__400_naming_it(
    client, make_task, timestamp: str
) -> None:
    run = sent_run(make_task("follow_up", "alice"))
    now = str(int(time.time()))
    arabic = now.translate(str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩"))
    shown = timestamp.format(now=now, now_underscored=f"{now[:4]}_{now[4:]}", now_arabic=arabic)
    response = post(client, event_xml(run), timestamp=shown)
    assert response.status_code == 400
    assert b"timestamp" in response.content
    assert nothing_changed(run) and not CallbackNonce.objects.exists()


@pytest.mark.parametrize("nonce", ["n" * 65, "a\x00b", "a b", "\u96ea"])
def test_a_nonce_wecom_never_sends__400_naming_it(client, make_task, nonce: str) -> None:
    run = sent_run(make_task("follow_up", "alice"))
    response = post(client, event_xml(run), nonce=nonce)
    assert response.status_code == 400
    assert b"nonce" in response.content
    assert nothing_changed(run) and not CallbackNonce.objects.exists()


@examples(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    timestamp=st.one_of(st.none(), st.text(alphabet=QUERY_TEXT)),
    nonce=st.text(alphabet=QUERY_TEXT),
    signature=st.one_of(st.none(), st.text(alphabet=QUERY_TEXT)),
    echostr=st.one_of(st.none(), st.text(alphabet=QUERY_TEXT)),
    method=st.sampled_from(["get", "post"]),
)
@example(timestamp="9" * 400, nonce="1", signature=None, echostr=None, method="post")
@example(timestamp="9" * 400, nonce="1", signature=None, echostr=None, method="get")
@example(timestamp=None, nonce="a\x00b", signature=None, echostr=None, method="post")
@example(timestamp=None, nonce="a\x00b", signature=None, echostr=None, method="get")
@example(timestamp=None, nonce="1", signature=None, echostr="\u96ea==", method="get")
def test_arbitrary_query_values__never_a_500(
    lenient_client: Client,
    timestamp: str | None,
    nonce: str,
    signature: str | None,
    echostr: str | None,
    method: str,
) -> None:
    """Signed with our token unless the signature is given: whatever the timestamp, nonce,
    signature or echostr, the answer is WeCom's success or a refusal, never an error of
    ours."""
    sealed = crypto.seal(OURS, event_xml(), timestamp=timestamp, nonce=nonce)
    encrypted = sealed.encrypt if echostr is None or method == "post" else echostr
    query = {
        "msg_signature": signature
        if signature is not None
        else crypto.signature(TOKEN, sealed.timestamp, sealed.nonce, encrypted),
        "timestamp": sealed.timestamp,
        "nonce": sealed.nonce,
    }
    if method == "get":
        response = lenient_client.get(URL, {**query, "echostr": encrypted})
    else:
        body = events.post_xml(sealed, to_user_name=CORP, agent_id=AGENT)
        response = lenient_client.post(
            f"{URL}?{urlencode(query)}", data=body, content_type="text/xml"
        )
    assert response.status_code in (200, 400, 403, 404), response.content


def test_a_replayed_request__403(client, make_task) -> None:
    done = sent_run(make_task("follow_up", "alice"))
    other = sent_run(make_task("follow_up", "alice"))
    assert post(client, event_xml(done), nonce="424242").status_code == 200
    # The same nonce again, even for another card: refused, nothing done.
    assert post(client, event_xml(other), nonce="424242").status_code == 403
    assert nothing_changed(other)


def test_a_click_by_someone_else__403_saying_the_card_went_to_another(client, make_task) -> None:
    run = sent_run(make_task("follow_up", "alice"))
    response = post(client, event_xml(run, FromUserName="mallory"))
    assert response.status_code == 403
    assert response.content == b"not the member the card went to"
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


def test_a_crms_long_key_and_wecoms_response_code__are_kept_whole(client, make_task) -> None:
    run = sent_run(make_task("follow_up", "alice"))
    key, code = "键" * 341 + "k", "rc-" + "7" * 997  # 1,024 bytes; 1,000 characters
    assert post(client, event_xml(run, EventKey=key, ResponseCode=code)).status_code == 200
    action = RunAction.objects.get(run=run)
    assert (action.action, action.response_code) == (key, code)


def test_a_key_longer_than_a_button_takes__400_naming_it(client, make_task) -> None:
    run = sent_run(make_task("follow_up", "alice"))
    response = post(client, event_xml(run, EventKey="k" * 1025))
    assert response.status_code == 400 and b"EventKey" in response.content
    assert nothing_changed(run) and not CallbackNonce.objects.exists()


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


def app_channels(settings: Any, *agents: str) -> None:
    """WeCom app channels, one naming each of ``agents``, and no WECOM_AGENT_ID."""
    settings.WECOM_AGENT_ID = ""
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        **{
            f"app{agent}": {
                "BACKEND": "reminders.senders.wecom.WeComSender",
                "OPTIONS": {"corp_id": CORP, "corp_secret": "s", "agent_id": agent},
            }
            for agent in agents
        },
    }


def test_agent_id_unset__the_callback_checks_the_agent_the_channels_name(
    client, make_task, settings: Any
) -> None:
    app_channels(settings, AGENT)
    run = sent_run(make_task("follow_up", "alice"))
    assert post(client, event_xml(run, AgentID="1000999")).status_code == 403
    assert nothing_changed(run)
    assert post(client, event_xml(run)).content == b"success"


def test_check__agent_id_unset_while_the_channels_name_two_agents_is_e015(
    settings: Any,
) -> None:
    app_channels(settings, AGENT, "1000003")
    found = [m for m in checks.check_settings() if m.id == "reminders.E015"]
    assert len(found) == 1 and "WECOM_AGENT_ID" in found[0].msg
    assert AGENT in found[0].msg and "1000003" in found[0].msg


def test_check__agent_id_unset_while_one_agent_is_named_is_fine(settings: Any) -> None:
    app_channels(settings, AGENT, AGENT)
    assert not [m for m in checks.check_settings() if m.id == "reminders.E015"]


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


def test_nonces__are_kept_for_twice_the_window_plus_a_margin_for_the_hosts_clocks() -> None:
    # A request taken at t carries a timestamp within the window of t, and a replay of it
    # is taken while its timestamp is within the window of the replay's time: until
    # t + 2 windows on the web host's clock. The scheduler that forgets nonces reads its
    # own clock, which may be behind or ahead: the nonce is kept a margin longer
    # (``announce.NONCE_CLOCK_MARGIN``, 60 s), and forgotten a second after that.
    now = timezone.now()
    window = timedelta(seconds=300)
    margin = timedelta(seconds=60)
    second = timedelta(seconds=1)
    for nonce, received in [
        ("old", now - 2 * window - margin - second),
        ("kept", now - 2 * window - margin + second),
    ]:
        CallbackNonce.objects.create(nonce=nonce, timestamp=1)
        CallbackNonce.objects.filter(nonce=nonce).update(received_at=received)
    assert announce.forget_nonces(now) == 1
    assert announce.forget_nonces(now) == 0
    assert list(CallbackNonce.objects.values_list("nonce", flat=True)) == ["kept"]
    assert margin == announce.NONCE_CLOCK_MARGIN


def test_a_body_larger_than_a_callback__400(client, make_task) -> None:
    run = sent_run(make_task("follow_up", "alice"))
    padding = "<Padding>" + "x" * (70 * 1024) + "</Padding>"
    body = f"<xml><Encrypt>abc</Encrypt>{padding}</xml>"
    assert post(client, event_xml(run), body=body).status_code == 400
    assert nothing_changed(run)


def test_a_callback_set_up_wrong__503_saying_why(client: Client, settings: Any) -> None:
    settings.WECOM_CALLBACK_AES_KEY = KEY[:-1]  # 42 characters: no key WeCom gives
    response = client.get(URL, {"msg_signature": "x", "timestamp": "1", "nonce": "1"})
    assert response.status_code == 503
    assert b"43 characters" in response.content


@pytest.mark.parametrize("window", ["abc", -5, 0])
def test_a_callback_time_window_that_cannot_work__503_saying_why_with_nothing_kept(
    lenient_client: Client, make_task: Any, settings: Any, window: Any
) -> None:
    settings.REMINDERS_CALLBACK_MAX_SKEW_SECONDS = window
    run = sent_run(make_task("follow_up", "alice"))
    response = post(lenient_client, event_xml(run))
    assert response.status_code == 503
    assert b"REMINDERS_CALLBACK_MAX_SKEW_SECONDS" in response.content
    assert nothing_changed(run)
    assert not CallbackNonce.objects.exists()


def test_a_click_whose_action_reads_a_setting_that_cannot_work__503_with_nothing_kept(
    lenient_client: Client, make_task: Any, settings: Any
) -> None:
    run = sent_run(make_task("follow_up", "alice"))
    # A snooze reads the scheduler's tick (reminders.E004 says it cannot work).
    settings.REMINDERS_TICK_SECONDS = 0
    response = post(lenient_client, event_xml(run, EventKey="snooze_1h"))
    assert response.status_code == 503
    assert b"REMINDERS_TICK_SECONDS" in response.content
    assert nothing_changed(run)
    assert not CallbackNonce.objects.exists()
    assert TaskRun.objects.filter(task=run.task).count() == 1
