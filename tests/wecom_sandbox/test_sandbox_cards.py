"""The WeCom sandbox plays WeCom's part for interactive cards, over real HTTP: the
response codes of ``message/update_template_card``, ``message/recall``'s rules, the
encrypted ``template_card_event`` it posts when a button is clicked, and the page."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlencode

import pytest
from django.utils import timezone

from reminders.callback import crypto, events
from reminders.engine import planning
from reminders.models import RunAction, ScheduledTask, TaskRun
from reminders.models.acting import card_id
from tests.support.sandbox import AGENT_ID, CORP_ID, ROBOT_KEY, running_sandbox, sandbox_process
from tests.wecom_sandbox.test_sandbox import Api, text
from wecom_sandbox import CallbackTarget, ClickRefused, LedgerEntry, SandboxClient, WeComSandbox
from wecom_sandbox.management.commands.wecom_sandbox import Command

TOKEN = "sandbox-callback-token"
KEY = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG"  # 43 characters of base64
OURS = crypto.Credentials(token=TOKEN, encoding_aes_key=KEY, receive_id=CORP_ID)
UPDATE = "/cgi-bin/message/update_template_card"
RECALL = "/cgi-bin/message/recall"
DAY = 24 * 3600
CODE_TTL = 72 * 3600


# -- a callback receiver: our app's callback URL, as a plain HTTP server ----------------


@dataclass
class Received:
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """Records every POST and answers ``status`` / ``answer`` after ``delay`` seconds;
    ``hook`` runs on each POST before the answer (what it returns is kept)."""

    status: int = 200
    answer: bytes = b"success"
    delay: float = 0.0
    hook: Callable[[Received], Any] | None = None
    received: list[Received] = field(default_factory=list)
    hooked: list[Any] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/wecom/callback"

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                path, _, query = self.path.partition("?")
                request = Received(
                    path=path,
                    query=dict(parse_qsl(query)),
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=self.rfile.read(length),
                )
                receiver.received.append(request)
                if receiver.hook is not None:
                    receiver.hooked.append(receiver.hook(request))
                time.sleep(receiver.delay)
                self.send_response(receiver.status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(receiver.answer)))
                self.end_headers()
                self.wfile.write(receiver.answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        server.block_on_close = False
        self.server = server
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def event(self, index: int = -1) -> events.TemplateCardEvent:
        """The event of a POST, decrypted with our credentials (its signature checked)."""
        request = self.received[index]
        message = events.read_post(OURS, body=request.body, **signed(request))
        assert isinstance(message, events.TemplateCardEvent)
        return message


def signed(request: Received) -> dict[str, str]:
    return {name: request.query[name] for name in ("msg_signature", "timestamp", "nonce")}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    receiver.start()
    yield receiver
    receiver.stop()


@pytest.fixture
def sandbox(receiver: Receiver) -> Iterator[WeComSandbox]:
    with running_sandbox(
        callback_url=receiver.url, callback_token=TOKEN, callback_aes_key=KEY
    ) as sandbox:
        yield sandbox


@pytest.fixture
def api(sandbox: WeComSandbox) -> Iterator[Api]:
    api = Api(sandbox.base_url)
    yield api
    api.close()


# -- helpers ----------------------------------------------------------------------------


def card(
    task_id: str = "r1-0123456789", touser: str = "zhangsan", **changes: Any
) -> dict[str, Any]:
    """A message/send body of a button card, as our engine writes one."""
    template_card = {
        "card_type": "button_interaction",
        "task_id": task_id,
        "source": {"desc": "Follow-up"},
        "main_title": {"title": "Follow-up: Acme", "desc": "Call back today"},
        "sub_title_text": "Send the quote",
        "horizontal_content_list": [{"keyname": "Customer", "value": "Acme Ltd"}],
        "button_list": [
            {"text": "Done", "style": 1, "key": "done"},
            {"text": "Snooze 1h", "style": 2, "key": "snooze_1h"},
        ],
        **changes,
    }
    return {
        "touser": touser,
        "msgtype": "template_card",
        "agentid": AGENT_ID,
        "template_card": template_card,
    }


def update(api: Api, code: str, **body: Any) -> Any:
    """message/update_template_card with a fresh token (the clock may have moved)."""
    body = {"userids": ["zhangsan"], "agentid": AGENT_ID, "response_code": code, **body}
    if "button" not in body and "template_card" not in body:
        body["button"] = {"replace_name": "Done ✓"}
    body = {k: v for k, v in body.items() if v is not None}
    token = api.gettoken()["access_token"]
    return api.post(UPDATE, body, access_token=token).json()


def recall(api: Api, msgid: str) -> Any:
    return api.post(RECALL, {"msgid": msgid}, access_token=api.gettoken()["access_token"]).json()


def sent_card(api: Api, sandbox: WeComSandbox, **options: Any) -> tuple[LedgerEntry, str]:
    """A delivered button card's ledger entry, and the response code its reply carried."""
    reply = api.send(card(**options))
    assert reply["errcode"] == 0, reply
    return sandbox.ledger()[-1], reply["response_code"]


def entry(sandbox: WeComSandbox, entry_id: int) -> LedgerEntry:
    [found] = [e for e in sandbox.ledger() if e.id == entry_id]
    return found


def refusal(call: Callable[[], Any]) -> ClickRefused:
    with pytest.raises(ClickRefused) as raised:
        call()
    return raised.value


# -- message/update_template_card -------------------------------------------------------


def test_update__the_send_s_code_replaces_the_buttons_once(api: Api, sandbox: WeComSandbox) -> None:
    sent, code = sent_card(api, sandbox)

    first = update(api, code, button={"replace_name": "Done ✓"})
    again = update(api, code, button={"replace_name": "Snoozed"})

    assert first == {"errcode": 0, "errmsg": "ok", "invaliduser": []}
    assert again["errcode"] == 40058
    assert "used" in again["errmsg"]
    updated = entry(sandbox, sent.id)
    assert updated.card_update is not None
    assert updated.card_update["replace_name"] == "Done ✓"  # the second changed nothing
    assert updated.card_update["source"] == "send"
    assert updated.card_update["response_code"] == code
    assert updated.card_update["at"] == pytest.approx(time.time(), abs=60)
    assert updated.updated_for == ("zhangsan",)
    stats = sandbox.stats()
    assert stats["message/update_template_card calls"] == 2
    assert stats["message/update_template_card errcode 40058"] == 1
    assert stats["cards updated"] == 1


def test_update__a_code_never_issued_is_refused(api: Api, sandbox: WeComSandbox) -> None:
    sent, _code = sent_card(api, sandbox)

    reply = update(api, "not-a-code")

    assert reply["errcode"] == 40058
    assert entry(sandbox, sent.id).card_update is None


def test_update__a_click_s_code_updates_the_card(
    api: Api, sandbox: WeComSandbox, receiver: Receiver
) -> None:
    sent, send_code = sent_card(api, sandbox)

    click = sandbox.click(sent.id, "done")
    reply = update(api, click["response_code"])

    assert click["response_code"] != send_code
    assert receiver.event().response_code == click["response_code"]
    assert reply["errcode"] == 0
    card_update = entry(sandbox, sent.id).card_update
    assert card_update is not None
    assert (card_update["source"], card_update["response_code"]) == (
        "click",
        click["response_code"],
    )


def test_update__a_code_is_good_for_72_hours_of_the_sandbox_clock(
    api: Api, sandbox: WeComSandbox
) -> None:
    in_time, in_time_code = sent_card(api, sandbox, task_id="r1-a")
    late, late_code = sent_card(api, sandbox, task_id="r2-b")

    sandbox.advance(CODE_TTL - 1)
    just_in_time = update(api, in_time_code)
    sandbox.advance(2)  # 72 hours and 1 second after the issue
    too_late = update(api, late_code)

    assert just_in_time["errcode"] == 0
    assert entry(sandbox, in_time.id).card_update is not None
    assert too_late["errcode"] == 40058
    assert "expired" in too_late["errmsg"]
    assert entry(sandbox, late.id).card_update is None


@pytest.mark.parametrize(
    ("agentid", "errcode"), [(AGENT_ID + 1, 40056), (None, 41011)], ids=["wrong", "missing"]
)
def test_update__the_agentid_must_be_the_app_s_and_a_refusal_spends_no_code(
    api: Api, sandbox: WeComSandbox, agentid: int | None, errcode: int
) -> None:
    sent, code = sent_card(api, sandbox)

    refused = update(api, code, agentid=agentid)
    unchanged = entry(sandbox, sent.id)
    passed = update(api, code)

    assert refused["errcode"] == errcode
    assert unchanged.card_update is None
    assert passed["errcode"] == 0


def test_update__userids_not_recipients_are_invaliduser_and_not_updated(
    api: Api, sandbox: WeComSandbox
) -> None:
    sent, code = sent_card(api, sandbox, touser="zhangsan|lisi")

    reply = update(api, code, userids=["zhangsan", "wangwu"])

    assert reply == {"errcode": 0, "errmsg": "ok", "invaliduser": ["wangwu"]}
    updated = entry(sandbox, sent.id)
    assert updated.updated_for == ("zhangsan",)
    assert updated.card_update is not None
    assert updated.card_update["invaliduser"] == ["wangwu"]


def test_update__nobody_a_recipient_is_81013_and_the_code_stays_good(
    api: Api, sandbox: WeComSandbox
) -> None:
    sent, code = sent_card(api, sandbox)

    refused = update(api, code, userids=["wangwu"])
    everyone = update(api, code, userids=None, atall=1)

    assert (refused["errcode"], refused["invaliduser"]) == (81013, ["wangwu"])
    assert everyone["errcode"] == 0
    assert entry(sandbox, sent.id).updated_for == ("zhangsan",)


@pytest.mark.parametrize(
    ("replace_name", "errcode"),
    [("完" * 10, 0), ("完" * 11, 45002), ("x" * 20, 0), ("x" * 21, 45002), ("", 40058)],
    ids=["10-full-width", "11-full-width", "20-half-width", "21-half-width", "empty"],
)
def test_update__replace_name_is_held_to_a_button_s_text_length(
    api: Api, sandbox: WeComSandbox, replace_name: str, errcode: int
) -> None:
    sent, code = sent_card(api, sandbox)

    reply = update(api, code, button={"replace_name": replace_name})

    assert reply["errcode"] == errcode
    assert (entry(sandbox, sent.id).card_update is None) == (errcode != 0)


def test_update__a_whole_card_is_checked_as_message_send_checks_one(
    api: Api, sandbox: WeComSandbox
) -> None:
    sent, code = sent_card(api, sandbox)
    new = {**card()["template_card"], "main_title": {"title": "Done by zhangsan"}}

    no_buttons = update(api, code, template_card={**new, "button_list": []})
    other_task = update(api, code, template_card={**new, "task_id": "r9-other"})
    both = update(api, code, template_card=new, button={"replace_name": "Done"})
    passed = update(api, code, template_card=new)

    assert no_buttons["errcode"] == 40058
    assert other_task["errcode"] == 40058
    assert both["errcode"] == 40058
    assert passed["errcode"] == 0
    card_update = entry(sandbox, sent.id).card_update
    assert card_update is not None
    assert card_update["template_card"] == new
    assert card_update["content"].startswith("Done by zhangsan")
    assert "replace_name" not in card_update


def test_update__needs_a_valid_token_post_and_a_response_code(
    api: Api, sandbox: WeComSandbox
) -> None:
    _sent, code = sent_card(api, sandbox)
    body = {"userids": ["zhangsan"], "agentid": AGENT_ID, "response_code": code}
    body["button"] = {"replace_name": "Done"}

    no_token = api.post(UPDATE, body).json()
    bad_token = api.post(UPDATE, body, access_token="nope").json()
    get = api.session.get(f"{api.base_url}{UPDATE}", params={"access_token": api.token}).json()
    no_code = update(api, "", userids=["zhangsan"])

    assert [no_token["errcode"], bad_token["errcode"], get["errcode"]] == [41001, 40014, 43002]
    assert no_code["errcode"] == 40058
    assert update(api, code)["errcode"] == 0


def test_update__a_recalled_card_is_not_updated(api: Api, sandbox: WeComSandbox) -> None:
    sent, code = sent_card(api, sandbox)
    assert recall(api, sent.msgid)["errcode"] == 0

    reply = update(api, code)

    assert reply["errcode"] == 40058
    assert entry(sandbox, sent.id).card_update is None


# -- message/recall ---------------------------------------------------------------------


def test_recall__within_24_hours_once(api: Api, sandbox: WeComSandbox) -> None:
    early = api.send(text("first"))["msgid"]
    late = api.send(text("second"))["msgid"]

    sandbox.advance(DAY - 1)
    in_time = recall(api, early)
    again = recall(api, early)
    sandbox.advance(2)  # 24 hours and 1 second after the send
    too_late = recall(api, late)

    assert in_time == {"errcode": 0, "errmsg": "ok"}
    assert again["errcode"] == 40058
    assert "recalled" in again["errmsg"]
    assert too_late["errcode"] == 40058
    assert [e.recalled for e in sandbox.ledger()] == [True, False]
    assert sandbox.stats()["recalled"] == 1


def test_recall__each_part_of_a_split_message_is_its_own(api: Api, sandbox: WeComSandbox) -> None:
    parts = [api.send(text(f"part {n}/2"))["msgid"] for n in (1, 2)]

    assert parts[0] != parts[1]
    assert recall(api, parts[1])["errcode"] == 0
    assert [e.recalled for e in sandbox.ledger()] == [False, True]


def test_recall__a_robot_message_has_no_msgid(api: Api, sandbox: WeComSandbox) -> None:
    reply = api.robot({"msgtype": "text", "text": {"content": "x"}}, key=ROBOT_KEY)

    assert "msgid" not in reply
    assert recall(api, "")["errcode"] == 40058
    assert not sandbox.ledger()[-1].recalled


# -- clicks -----------------------------------------------------------------------------


def test_click__posts_wecom_s_event_encrypted_and_signed(
    api: Api, sandbox: WeComSandbox, receiver: Receiver
) -> None:
    sent, _code = sent_card(api, sandbox)
    before = int(time.time())

    click = sandbox.click(sent.id, "snooze_1h")

    [request] = receiver.received
    assert request.path == "/wecom/callback"
    assert request.headers["content-type"] == "text/xml"
    assert set(request.query) == {"msg_signature", "timestamp", "nonce"}
    envelope = events.parse_envelope(request.body)
    assert (envelope.to_user_name, envelope.agent_id) == (CORP_ID, str(AGENT_ID))
    assert request.query["msg_signature"] == crypto.signature(
        TOKEN, request.query["timestamp"], request.query["nonce"], envelope.encrypt
    )
    plain = events.decrypt_post(OURS, body=request.body, **signed(request))
    assert re.findall(r"<(\w+)>", plain) == [
        "xml",
        "ToUserName",
        "FromUserName",
        "CreateTime",
        "MsgType",
        "Event",
        "EventKey",
        "TaskId",
        "CardType",
        "ResponseCode",
        "AgentID",
    ]
    event = receiver.event()
    assert event.to_user_name == CORP_ID
    assert event.from_user_name == "zhangsan"
    assert before <= event.create_time <= time.time()
    assert str(event.create_time) == request.query["timestamp"]
    assert event.fields["MsgType"] == "event"
    assert event.fields["Event"] == "template_card_event"
    assert event.event_key == "snooze_1h"
    assert event.task_id == "r1-0123456789"
    assert event.card_type == "button_interaction"
    assert event.agent_id == AGENT_ID
    assert event.response_code == click["response_code"]
    assert click["status"] == 200
    assert click["body"] == "success"
    assert click["error"] is None
    assert 0 <= click["elapsed_ms"] < 5000
    assert (click["entry"], click["key"], click["user"]) == (sent.id, "snooze_1h", "zhangsan")
    assert entry(sandbox, sent.id).clicks == (click,)
    assert sandbox.stats()["clicks"] == 1


def test_click__as_another_recipient_and_never_as_a_stranger(
    api: Api, sandbox: WeComSandbox, receiver: Receiver
) -> None:
    sent, _code = sent_card(api, sandbox, touser="zhangsan|lisi")

    sandbox.click(sent.id, "done", user="lisi")
    stranger = refusal(lambda: sandbox.click(sent.id, "done", user="wangwu"))

    assert receiver.event().from_user_name == "lisi"
    assert (stranger.status, stranger.reason) == (400, "not_recipient")
    assert len(receiver.received) == 1


def test_click__on_a_card_whose_buttons_were_replaced_is_refused(
    api: Api, sandbox: WeComSandbox, receiver: Receiver
) -> None:
    sent, code = sent_card(api, sandbox)
    assert update(api, code)["errcode"] == 0

    refused = refusal(lambda: sandbox.click(sent.id, "done"))

    assert (refused.status, refused.reason) == (409, "updated")
    assert "Done ✓" in refused.error
    assert receiver.received == []


def test_click__a_card_replaced_by_another_has_the_new_card_s_buttons(
    api: Api, sandbox: WeComSandbox, receiver: Receiver
) -> None:
    sent, code = sent_card(api, sandbox)
    new = {**card()["template_card"], "button_list": [{"text": "Reopen", "key": "reopen"}]}
    assert update(api, code, template_card=new)["errcode"] == 0

    old_key = refusal(lambda: sandbox.click(sent.id, "done"))
    sandbox.click(sent.id, "reopen")

    assert (old_key.status, old_key.reason) == (400, "unknown_key")
    assert receiver.event().event_key == "reopen"


def test_click__on_a_recalled_card_is_refused(
    api: Api, sandbox: WeComSandbox, receiver: Receiver
) -> None:
    sent, _code = sent_card(api, sandbox)
    assert recall(api, sent.msgid)["errcode"] == 0

    refused = refusal(lambda: sandbox.click(sent.id, "done"))

    assert (refused.status, refused.reason) == (409, "recalled")
    assert receiver.received == []


def test_click__an_unknown_key_a_text_message_or_entry_is_refused(
    api: Api, sandbox: WeComSandbox, receiver: Receiver
) -> None:
    sent, _code = sent_card(
        api,
        sandbox,
        button_list=[
            {"text": "Done", "key": "done"},
            {"text": "Open", "type": 1, "url": "https://crm.example/1"},
        ],
    )
    api.send(text())
    message = sandbox.ledger()[-1]

    unknown_key = refusal(lambda: sandbox.click(sent.id, "nope"))
    url_button = refusal(lambda: sandbox.click(sent.id, "None"))
    not_a_card = refusal(lambda: sandbox.click(message.id, "done"))
    no_entry = refusal(lambda: sandbox.click(message.id + 100, "done"))

    assert (unknown_key.status, unknown_key.reason) == (400, "unknown_key")
    assert "'done'" in unknown_key.error
    assert url_button.reason == "unknown_key"
    assert (not_a_card.status, not_a_card.reason) == (400, "not_a_card")
    assert "text" in not_a_card.error
    assert (no_entry.status, no_entry.reason) == (404, "unknown_entry")
    assert receiver.received == []
    assert "clicks" not in sandbox.stats()


def test_click__without_a_callback_is_refused_clearly() -> None:
    with running_sandbox() as sandbox:
        api = Api(sandbox.base_url)
        try:
            sent, _code = sent_card(api, sandbox)
            refused = refusal(lambda: sandbox.click(sent.id, "done"))
            over_http = api.session.post(
                f"{sandbox.base_url}/sandbox/click", json={"entry": sent.id, "key": "done"}
            )
        finally:
            api.close()

    assert (refused.status, refused.reason) == (409, "no_callback")
    assert "--callback-url" in refused.error
    assert over_http.status_code == 409
    assert over_http.json() == {"error": refused.error, "reason": "no_callback"}


def test_click__a_callback_that_does_not_answer_is_recorded(
    api: Api, sandbox: WeComSandbox, receiver: Receiver
) -> None:
    sent, _code = sent_card(api, sandbox)
    receiver.stop()  # nothing listens there any more

    click = sandbox.click(sent.id, "done")

    assert click["status"] is None
    assert "ConnectionError" in click["error"]
    assert entry(sandbox, sent.id).clicks == (click,)
    assert sandbox.stats()["callback failures"] == 1


def test_click__waits_for_the_callback_no_longer_than_its_timeout(
    api: Api, sandbox: WeComSandbox, receiver: Receiver
) -> None:
    assert CallbackTarget(url=receiver.url, token=TOKEN, encoding_aes_key=KEY).timeout == 5.0
    sandbox.control(
        callback={"url": receiver.url, "token": TOKEN, "encoding_aes_key": KEY, "timeout": 0.3}
    )
    receiver.delay = 1.5
    sent, _code = sent_card(api, sandbox)

    started = time.monotonic()
    click = sandbox.click(sent.id, "done")

    assert time.monotonic() - started < 1.2
    assert click["error"] == "no answer within 0.3 s"
    assert click["status"] is None


def test_click__the_callback_is_posted_without_the_sandbox_s_lock(
    api: Api, sandbox: WeComSandbox, receiver: Receiver
) -> None:
    """Our receiver may call WeCom while it answers: an update with the click's code,
    made before the click is answered, is served at once (and the code already known)."""
    sent, _code = sent_card(api, sandbox)
    caller = Api(sandbox.base_url)
    receiver.hook = lambda request: update(caller, receiver.event().response_code)

    try:
        click = sandbox.click(sent.id, "done")
    finally:
        caller.close()

    assert receiver.hooked == [{"errcode": 0, "errmsg": "ok", "invaliduser": []}]
    assert click["status"] == 200
    updated = entry(sandbox, sent.id)
    assert updated.card_update is not None
    assert updated.card_update["response_code"] == click["response_code"]


def test_click__over_http_as_json_and_from_the_page_s_form(
    api: Api, sandbox: WeComSandbox, receiver: Receiver
) -> None:
    sent, _code = sent_card(api, sandbox, touser="zhangsan|lisi")
    url = f"{sandbox.base_url}/sandbox/click"

    as_json = api.session.post(url, json={"entry": sent.id, "key": "done"})
    as_form = api.session.post(
        url, data={"entry": str(sent.id), "key": "snooze_1h", "user": "lisi"}, allow_redirects=False
    )
    bad_form = api.session.post(url, data={"entry": str(sent.id), "key": "nope"})
    bad_json = api.session.post(url, json={"entry": "one", "key": "done"})

    assert as_json.status_code == 200
    assert as_json.json()["user"] == "zhangsan"
    assert as_form.status_code == 303
    assert as_form.headers["Location"] == f"/sandbox/#entry-{sent.id}"
    assert [e.from_user_name for e in map(receiver.event, (0, 1))] == ["zhangsan", "lisi"]
    assert bad_form.status_code == 400
    assert bad_form.headers["Content-Type"].startswith("text/html")
    assert (bad_json.status_code, bad_json.json()["reason"]) == (400, "bad_request")
    assert api.session.get(url).status_code == 405
    assert [c["key"] for c in entry(sandbox, sent.id).clicks] == ["done", "snooze_1h"]


def test_client__clicks_and_tells_a_refusal(
    api: Api, sandbox: WeComSandbox, receiver: Receiver
) -> None:
    sent, _code = sent_card(api, sandbox)

    with SandboxClient(sandbox.base_url) as client:
        click = client.click(sent.id, "done", user="zhangsan")
        refused = refusal(lambda: client.click(sent.id, "nope"))
        [read] = [e for e in client.ledger() if e.id == sent.id]

    assert click["status"] == 200
    assert receiver.event().response_code == click["response_code"]
    assert (refused.status, refused.reason) == (400, "unknown_key")
    assert read.clicks == (click,)


@pytest.mark.django_db
def test_click__our_callback_view_acts_on_what_the_sandbox_posts(
    receiver: Receiver, client: Any, settings: Any, make_task: Callable[..., ScheduledTask]
) -> None:
    """What the sandbox posted, replayed to our view (in the test's thread, which holds
    the test's database): every check of the protocol passes and the click is acted on."""
    settings.WECOM_CALLBACK_TOKEN = TOKEN
    settings.WECOM_CALLBACK_AES_KEY = KEY
    settings.WECOM_CORP_ID = CORP_ID
    settings.WECOM_AGENT_ID = str(AGENT_ID)
    run = planning.new_run(make_task("follow_up", "zhangsan"), timezone.now())
    run.status = TaskRun.Status.SENT
    run.save()
    with running_sandbox(
        callback_url=receiver.url, callback_token=TOKEN, callback_aes_key=KEY
    ) as sandbox:
        api = Api(sandbox.base_url)
        try:
            sent, _code = sent_card(api, sandbox, task_id=card_id(run))
            click = sandbox.click(sent.id, "done")
        finally:
            api.close()
    [request] = receiver.received

    response = client.post(
        f"/reminders/wecom/callback?{urlencode(request.query)}",
        data=request.body,
        content_type=request.headers["content-type"],
    )

    assert (response.status_code, response.content) == (200, b"success")
    action = RunAction.objects.get(run=run)
    assert (action.action, action.member) == ("done", "zhangsan")
    assert action.response_code == click["response_code"]


# -- configuring the callback -----------------------------------------------------------


def test_control__sets_and_clears_the_callback_never_showing_its_secrets(
    receiver: Receiver,
) -> None:
    with running_sandbox() as sandbox:
        api = Api(sandbox.base_url)
        try:
            sent, _code = sent_card(api, sandbox)
            settings = sandbox.control(
                callback={"url": receiver.url, "token": TOKEN, "encoding_aes_key": KEY}
            )
            click = sandbox.click(sent.id, "done")
            shown = [
                api.session.get(f"{sandbox.base_url}{path}").text
                for path in ("/sandbox/", "/sandbox/control", "/sandbox/messages")
            ]
            bad_key = api.post(
                "/sandbox/control",
                {"callback": {**settings["callback"], "token": TOKEN, "encoding_aes_key": "short"}},
            )
            sandbox.control(callback=None)
            off = refusal(lambda: sandbox.click(sent.id, "done"))
        finally:
            api.close()

    assert settings["callback"] == {"url": receiver.url, "timeout": 5.0}
    assert click["status"] == 200
    assert bad_key.status_code == 400
    assert "EncodingAESKey" in bad_key.json()["error"]
    assert off.reason == "no_callback"
    for page in shown:
        assert TOKEN not in page
        assert KEY not in page


def test_sandbox__a_callback_url_needs_its_token_and_key() -> None:
    with pytest.raises(ValueError, match="token"):
        WeComSandbox(callback_url="http://127.0.0.1:9/cb")
    with pytest.raises(ValueError, match="EncodingAESKey"):
        WeComSandbox(
            callback_url="http://127.0.0.1:9/cb", callback_token=TOKEN, callback_aes_key="x" * 42
        )
    with pytest.raises(ValueError, match="http"):
        WeComSandbox(callback_url="ftp://x/cb", callback_token=TOKEN, callback_aes_key=KEY)


def test_command__token_and_key_default_to_the_settings(settings: Any) -> None:
    settings.WECOM_CALLBACK_TOKEN = TOKEN
    settings.WECOM_CALLBACK_AES_KEY = KEY
    options = {"callback_url": "http://127.0.0.1:9/cb", "callback_token": None}

    taken = Command()._callback({**options, "callback_aes_key": None})
    given = Command()._callback({**options, "callback_aes_key": "k" * 43})

    assert taken == {
        "callback_url": "http://127.0.0.1:9/cb",
        "callback_token": TOKEN,
        "callback_aes_key": KEY,
    }
    assert given["callback_aes_key"] == "k" * 43
    assert (
        Command()._callback(
            {"callback_url": None, "callback_token": None, "callback_aes_key": None}
        )
        == {}
    )


@pytest.mark.processes
def test_command__posts_clicks_to_the_callback_url(receiver: Receiver) -> None:
    options = ["--callback-url", receiver.url, "--callback-token", TOKEN]
    with sandbox_process(*options, "--callback-aes-key", KEY) as process:
        api = Api(process.base_url)
        try:
            reply = api.send(card())
            [sent] = process.client.delivered()
            click = process.client.click(sent.id, "done")
        finally:
            api.close()
        process.popen.terminate()
        process.popen.wait(10)
        output = process.popen.stdout.read() if process.popen.stdout else ""

    assert reply["errcode"] == 0
    assert receiver.event().response_code == click["response_code"]
    assert f"posted to {receiver.url}" in output
    assert TOKEN not in output
    assert KEY not in output


# -- the page ---------------------------------------------------------------------------


def page(api: Api) -> str:
    response = api.session.get(f"{api.base_url}/sandbox/")
    assert response.headers["Content-Type"].startswith("text/html")
    return response.text


def row(html: str, entry_id: int) -> str:
    match = re.search(rf'<tr id="entry-{entry_id}"[^>]*>.*?</tr>', html, re.DOTALL)
    assert match, f"no row of entry {entry_id}"
    return match.group(0)


def test_page__shows_a_card_its_update_its_clicks_and_its_recall(
    api: Api, sandbox: WeComSandbox, receiver: Receiver
) -> None:
    sent, code = sent_card(api, sandbox)

    fresh = row(page(api), sent.id)
    sandbox.click(sent.id, "snooze_1h")
    assert update(api, code, button={"replace_name": "Snoozed"})["errcode"] == 0
    updated = row(page(api), sent.id)
    assert recall(api, sent.msgid)["errcode"] == 0
    recalled = row(page(api), sent.id)

    for shown in ("Follow-up", "Follow-up: Acme", "Call back today", "Send the quote"):
        assert f">{shown}<" in fresh
    assert "<dt>Customer</dt><dd>Acme Ltd</dd>" in fresh
    assert '<form class="card-buttons" method="post" action="/sandbox/click">' in fresh
    assert f'name="entry" value="{sent.id}"' in fresh
    assert re.search(r'<button type="submit" name="key" value="done" data-key="done">Done<', fresh)
    assert 'data-key="snooze_1h"' in fresh
    assert "card-update" not in fresh

    assert 'class="card-update"' in updated
    assert re.search(r'<button type="button" class="replaced" disabled>Snoozed</button>', updated)
    assert 'type="submit"' not in updated  # the buttons are gone for everyone it went to
    assert re.search(r'<li class="click ok" data-key="snooze_1h" data-status="200">', updated)
    assert "success" in updated

    assert recalled.startswith(f'<tr id="entry-{sent.id}" class="recalled">')
    assert "recalled" in recalled.split("</td>")[4]


def test_page__without_a_callback_the_buttons_are_disabled_with_a_hint() -> None:
    with running_sandbox() as sandbox:
        api = Api(sandbox.base_url)
        try:
            sent, _code = sent_card(api, sandbox)
            shown = row(page(api), sent.id)
        finally:
            api.close()

    assert re.search(r'data-key="done" disabled>Done<', shown)
    assert 'class="no-callback' in shown
    assert "--callback-url" in shown


def test_page__escapes_everything_of_a_card(api: Api, sandbox: WeComSandbox) -> None:
    script = "<script>alert(1)</script>"
    sent, _code = sent_card(
        api,
        sandbox,
        sub_title_text=f"{script} call back",
        horizontal_content_list=[{"keyname": "<b>x</b>", "value": script}],
        button_list=[{"text": "<i>Do</i>", "key": '"><script>'}],
    )

    shown = row(page(api), sent.id)

    assert "<script>" not in shown
    assert "&lt;script&gt;alert(1)&lt;/script&gt; call back" in shown
    assert "&lt;b&gt;x&lt;/b&gt;" in shown
    assert 'data-key="&quot;&gt;&lt;script&gt;"' in shown
    assert "&lt;i&gt;Do&lt;/i&gt;" in shown


def test_page__keeps_refreshing_itself(api: Api) -> None:
    assert '<meta http-equiv="refresh" content="2">' in page(api)
