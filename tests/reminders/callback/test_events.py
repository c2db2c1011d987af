"""WeCom's callback envelopes and the template_card_event, read as WeCom sends them.

The event's plaintext follows the example of WeCom's "模板卡片事件推送" (template card
event push); it travels encrypted and signed as WeCom sends it, through the same
functions the sandbox uses to play WeCom's part.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from reminders.callback import crypto, events
from reminders.callback.crypto import Credentials
from reminders.callback.events import CallbackMessage, SelectedItem, TemplateCardEvent
from reminders.callback.exceptions import (
    BadCiphertext,
    BadSignature,
    CallbackRefused,
    MalformedXml,
    MissingField,
)

from . import vectors as v

QDG6EK = Credentials(
    token=v.QDG6EK_TOKEN,
    encoding_aes_key=v.QDG6EK_ENCODING_AES_KEY,
    receive_id=v.QDG6EK_CORP_ID,
)
PY = Credentials(token=v.PY_TOKEN, encoding_aes_key=v.PY_ENCODING_AES_KEY, receive_id=v.PY_CORP_ID)

EVENT_FIELDS: dict[str, str] = {
    "ToUserName": "<![CDATA[wx5823bf96d3bd56c7]]>",
    "FromUserName": "<![CDATA[zhangsan]]>",
    "CreateTime": "1700000123",
    "MsgType": "<![CDATA[event]]>",
    "Event": "<![CDATA[template_card_event]]>",
    "EventKey": "<![CDATA[done:task-42]]>",
    "TaskId": "<![CDATA[reminder-42-20240101]]>",
    "CardType": "<![CDATA[button_interaction]]>",
    "ResponseCode": "<![CDATA[rc-4f1d]]>",
    "AgentID": "1000002",
}
SELECTED_ITEMS = (
    "<SelectedItems>"
    "<SelectedItem><QuestionKey><![CDATA[q1]]></QuestionKey>"
    "<OptionIds><OptionId><![CDATA[o1]]></OptionId><OptionId><![CDATA[o2]]></OptionId>"
    "</OptionIds></SelectedItem>"
    "<SelectedItem><QuestionKey><![CDATA[q2]]></QuestionKey>"
    "<OptionIds><OptionId><![CDATA[o3]]></OptionId></OptionIds></SelectedItem>"
    "</SelectedItems>"
)


def event_xml(*, without: str = "", extra: str = "", **values: str) -> str:
    """The plaintext of a template_card_event, a field left out or changed on request."""
    fields = EVENT_FIELDS | values
    inner = "\n".join(
        f"<{name}>{value}</{name}>" for name, value in fields.items() if name != without
    )
    return f"<xml>\n{inner}\n{extra}</xml>"


def posted(message: str, credentials: Credentials = QDG6EK) -> dict[str, str]:
    """What WeCom sends for ``message``: the query's three values and the body."""
    sealed = crypto.seal(credentials, message, timestamp="1700000124", nonce="1372623149")
    return {
        "msg_signature": sealed.msg_signature,
        "timestamp": sealed.timestamp,
        "nonce": sealed.nonce,
        "body": events.post_xml(sealed, to_user_name=credentials.receive_id, agent_id="1000002"),
    }


BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE xml [
 <!ENTITY lol "lol">
 <!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
 <!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
 <!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
 <!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
 <!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">
]>
<xml><ToUserName>ww1</ToUserName><Encrypt>&lol9;</Encrypt><AgentID>1</AgentID></xml>"""

EXTERNAL_ENTITY = """<?xml version="1.0"?>
<!DOCTYPE xml [<!ENTITY secret SYSTEM "file:///etc/passwd">]>
<xml><ToUserName>ww1</ToUserName><Encrypt>&secret;</Encrypt><AgentID>1</AgentID></xml>"""

BARE_DTD = """<?xml version="1.0"?>
<!DOCTYPE xml SYSTEM "http://example.invalid/wecom.dtd">
<xml><ToUserName>ww1</ToUserName><Encrypt>abc</Encrypt><AgentID>1</AgentID></xml>"""


# --- The envelope ---------------------------------------------------------------------------


def test_parse_envelope__reads_the_published_post_bodies() -> None:
    php = events.parse_envelope(v.QDG6EK_POST_BODY)
    python = events.parse_envelope(v.PY_POST_BODY.encode())

    assert php == events.Envelope(
        encrypt=v.QDG6EK_POST_ENCRYPT, to_user_name="wx5823bf96d3bd56c7", agent_id="218"
    )
    assert python.to_user_name == "ww1436e0e65a779aee"
    assert python.agent_id == "1000002"
    assert python.encrypt.startswith("Kl7kjoSf6DMD1zh7") and python.encrypt.endswith("iypE+")


def test_parse_envelope__without_to_user_name_or_agent_id() -> None:
    """They are outside the signature, so nothing hangs on them: WeCom's replies carry
    neither, and the sandbox reads those with the same function."""
    envelope = events.parse_envelope("<xml><Encrypt><![CDATA[abc]]></Encrypt></xml>")

    assert envelope == events.Envelope(encrypt="abc", to_user_name="", agent_id="")


@pytest.mark.parametrize(
    "body",
    [
        "<xml><ToUserName>ww1</ToUserName><AgentID>1</AgentID></xml>",
        "<xml><ToUserName>ww1</ToUserName><Other><Encrypt>abc</Encrypt></Other></xml>",
    ],
    ids=["absent", "nested"],
)
def test_parse_envelope__refuses_a_body_without_encrypt(body: str) -> None:
    with pytest.raises(MissingField, match="Encrypt") as refused:
        events.parse_envelope(body)

    assert refused.value.field == "Encrypt"


@pytest.mark.parametrize(
    "body",
    [
        "",
        "not xml",
        "<xml><Encrypt>abc</Encrypt>",
        "<xml><Encrypt>abc</Encrypt></xml><xml/>",
        b"<xml><Encrypt>\xff\xfe</Encrypt></xml>",
        "<notxml><Encrypt>abc</Encrypt></notxml>",
        "<xml><Encrypt>abc</Encrypt><Encrypt>def</Encrypt></xml>",
        "<xml><Encrypt>a<b/>c</Encrypt></xml>",
    ],
    ids=["empty", "text", "unclosed", "two-roots", "not-utf8", "root", "twice", "nested"],
)
def test_parse_envelope__refuses_malformed_xml(body: str | bytes) -> None:
    with pytest.raises(MalformedXml):
        events.parse_envelope(body)


@pytest.mark.parametrize(
    "body", [BILLION_LAUGHS, EXTERNAL_ENTITY, BARE_DTD], ids=["laughs", "external", "dtd"]
)
def test_parse_envelope__refuses_a_dtd_and_its_entities(body: str) -> None:
    with pytest.raises(MalformedXml, match="DTD"):
        events.parse_envelope(body)

    with pytest.raises(MalformedXml):
        events.parse_envelope(body.encode())


def test_decrypt_post__refuses_the_billion_laughs_before_anything_else() -> None:
    with pytest.raises(MalformedXml):
        events.decrypt_post(
            QDG6EK, msg_signature="0" * 40, timestamp="1", nonce="2", body=BILLION_LAUGHS
        )


# --- The published POST examples ------------------------------------------------------------


def test_decrypt_post__gives_the_published_plaintext() -> None:
    plaintext = events.decrypt_post(
        QDG6EK,
        msg_signature=v.QDG6EK_POST_MSG_SIGNATURE,
        timestamp=v.QDG6EK_POST_TIMESTAMP,
        nonce=v.QDG6EK_POST_NONCE,
        body=v.QDG6EK_POST_BODY,
    )

    assert plaintext == v.QDG6EK_POST_PLAINTEXT


def test_decrypt_post__the_python_samples_example() -> None:
    plaintext = events.decrypt_post(
        PY,
        msg_signature=v.PY_POST_MSG_SIGNATURE,
        timestamp=v.PY_POST_TIMESTAMP,
        nonce=v.PY_POST_NONCE,
        body=v.PY_POST_BODY,
    )

    assert plaintext == v.PY_POST_PLAINTEXT


def test_read_post__the_published_text_message_is_a_callback_message() -> None:
    message = events.read_post(
        QDG6EK,
        msg_signature=v.QDG6EK_POST_MSG_SIGNATURE,
        timestamp=v.QDG6EK_POST_TIMESTAMP,
        nonce=v.QDG6EK_POST_NONCE,
        body=v.QDG6EK_POST_BODY,
    )

    assert isinstance(message, CallbackMessage)
    assert message.msg_type == "text"
    assert message.event == ""
    assert message.fields["Content"] == "hello"
    assert message.fields["FromUserName"] == "mycreate"
    assert message.fields["MsgId"] == "4561255354251345929"


def test_decrypt_post__refuses_a_wrong_signature() -> None:
    with pytest.raises(BadSignature):
        events.decrypt_post(
            QDG6EK,
            msg_signature=v.QDG6EK_VERIFY_MSG_SIGNATURE,
            timestamp=v.QDG6EK_POST_TIMESTAMP,
            nonce=v.QDG6EK_POST_NONCE,
            body=v.QDG6EK_POST_BODY,
        )


def test_decrypt_post__signs_the_encrypt_text_not_the_body() -> None:
    """What is around Encrypt is outside the signature: changing it changes nothing."""
    body = v.QDG6EK_POST_BODY.replace("[218]", "[219]")

    plaintext = events.decrypt_post(
        QDG6EK,
        msg_signature=v.QDG6EK_POST_MSG_SIGNATURE,
        timestamp=v.QDG6EK_POST_TIMESTAMP,
        nonce=v.QDG6EK_POST_NONCE,
        body=body,
    )

    assert plaintext == v.QDG6EK_POST_PLAINTEXT


# --- The template_card_event ----------------------------------------------------------------


def test_read_post__a_template_card_event() -> None:
    event = events.read_post(QDG6EK, **posted(event_xml(extra=SELECTED_ITEMS)))

    assert isinstance(event, TemplateCardEvent)
    assert event.to_user_name == "wx5823bf96d3bd56c7"
    assert event.from_user_name == "zhangsan"
    assert event.create_time == 1700000123
    assert event.created_at == datetime(2023, 11, 14, 22, 15, 23, tzinfo=UTC)
    assert event.agent_id == 1000002
    assert event.event_key == "done:task-42"
    assert event.task_id == "reminder-42-20240101"
    assert event.card_type == "button_interaction"
    assert event.response_code == "rc-4f1d"
    assert event.selected_items == (
        SelectedItem(question_key="q1", option_ids=("o1", "o2")),
        SelectedItem(question_key="q2", option_ids=("o3",)),
    )
    assert event.fields["MsgType"] == "event"
    assert event.fields["Event"] == "template_card_event"


def test_parse_message__keeps_the_other_fields() -> None:
    event = events.parse_message(event_xml(extra="<NewField><![CDATA[kept]]></NewField>"))

    assert isinstance(event, TemplateCardEvent)
    assert event.fields["NewField"] == "kept"
    assert "SelectedItems" not in event.fields
    assert event.selected_items == ()


def test_parse_message__keeps_text_as_sent() -> None:
    event = events.parse_message(event_xml(EventKey="<![CDATA[ a key <with> & spaces ]]>"))

    assert isinstance(event, TemplateCardEvent)
    assert event.event_key == " a key <with> & spaces "


def test_parse_message__another_event_is_a_callback_message() -> None:
    message = events.parse_message(
        event_xml(Event="<![CDATA[enter_agent]]>", without="ResponseCode")
    )

    assert isinstance(message, CallbackMessage)
    assert message.msg_type == "event"
    assert message.event == "enter_agent"


@pytest.mark.parametrize(
    "field",
    [
        "ToUserName",
        "FromUserName",
        "CreateTime",
        "AgentID",
        "EventKey",
        "TaskId",
        "CardType",
        "ResponseCode",
    ],
)
def test_parse_message__refuses_a_template_card_event_without_a_field(field: str) -> None:
    with pytest.raises(MissingField, match=field) as refused:
        events.parse_message(event_xml(without=field))

    assert refused.value.field == field


def test_read_post__refuses_a_signed_template_card_event_without_event_key() -> None:
    with pytest.raises(MissingField, match="EventKey"):
        events.read_post(QDG6EK, **posted(event_xml(without="EventKey")))


def test_parse_message__refuses_a_message_without_its_type() -> None:
    with pytest.raises(MissingField, match="MsgType"):
        events.parse_message(event_xml(without="MsgType"))


def test_parse_message__refuses_an_event_without_its_name() -> None:
    with pytest.raises(MissingField, match="Event"):
        events.parse_message(event_xml(without="Event"))


@pytest.mark.parametrize(
    ("field", "value"),
    [("CreateTime", "soon"), ("CreateTime", ""), ("AgentID", "1e3"), ("AgentID", "-")],
)
def test_parse_message__refuses_a_number_that_is_not_one(field: str, value: str) -> None:
    with pytest.raises(MalformedXml, match=field):
        events.parse_message(event_xml(**{field: value}))


@pytest.mark.parametrize(
    "extra",
    [
        "<SelectedItems><SelectedItem><OptionIds/></SelectedItem></SelectedItems>",
        "<SelectedItems><SelectedItem><QuestionKey>q</QuestionKey></SelectedItem></SelectedItems>",
    ],
    ids=["no-question-key", "no-option-ids"],
)
def test_parse_message__refuses_a_selected_item_without_its_parts(extra: str) -> None:
    with pytest.raises(MissingField):
        events.parse_message(event_xml(extra=extra))


def test_parse_message__a_key_of_wecoms_1024_bytes_is_read_whole() -> None:
    key = "键" * 341 + "k"  # 1,024 bytes in UTF-8
    event = events.parse_message(event_xml(EventKey=key, ResponseCode="c" * 2000))
    assert isinstance(event, TemplateCardEvent)
    assert (event.event_key, event.response_code) == (key, "c" * 2000)


def test_parse_message__refuses_a_key_longer_than_a_button_takes() -> None:
    with pytest.raises(MalformedXml, match=r"EventKey.*1,025 bytes"):
        events.parse_message(event_xml(EventKey="键" * 341 + "kk"))


def test_parse_message__refuses_a_field_given_twice() -> None:
    with pytest.raises(MalformedXml, match="EventKey"):
        events.parse_message(event_xml(extra="<EventKey>other</EventKey>"))


def test_parse_message__refuses_elements_where_text_is_expected() -> None:
    with pytest.raises(MalformedXml, match="EventKey"):
        events.parse_message(event_xml(EventKey="<a>b</a>"))


@pytest.mark.parametrize(
    "plaintext", [BILLION_LAUGHS, EXTERNAL_ENTITY, BARE_DTD], ids=["laughs", "external", "dtd"]
)
def test_read_post__refuses_a_dtd_inside_the_ciphertext(plaintext: str) -> None:
    with pytest.raises(MalformedXml, match="DTD"):
        events.read_post(QDG6EK, **posted(plaintext))


def test_read_post__refuses_a_plaintext_that_is_not_xml() -> None:
    with pytest.raises(MalformedXml):
        events.read_post(QDG6EK, **posted("1616140317555161061"))


def test_read_post__refuses_a_signed_body_whose_encrypt_was_cut() -> None:
    encrypt = events.parse_envelope(posted(event_xml())["body"]).encrypt[:-3]
    sealed = crypto.Sealed(
        encrypt=encrypt,
        msg_signature=crypto.signature(QDG6EK.token, "1", "2", encrypt),
        timestamp="1",
        nonce="2",
    )

    with pytest.raises(BadCiphertext):
        events.read_post(
            QDG6EK,
            msg_signature=sealed.msg_signature,
            timestamp=sealed.timestamp,
            nonce=sealed.nonce,
            body=events.post_xml(sealed, to_user_name="ww1", agent_id="1"),
        )


# --- Replies and WeCom's posts, as WeCom's reference writes them ----------------------------


def test_encrypt_reply__is_the_reference_template() -> None:
    reply = events.encrypt_reply(QDG6EK, "<xml/>", timestamp="1409659813", nonce="1372623149")

    match = re.fullmatch(
        r"<xml>\n"
        r"<Encrypt><!\[CDATA\[(?P<encrypt>[A-Za-z0-9+/=]+)\]\]></Encrypt>\n"
        r"<MsgSignature><!\[CDATA\[(?P<signature>[0-9a-f]{40})\]\]></MsgSignature>\n"
        r"<TimeStamp>1409659813</TimeStamp>\n"
        r"<Nonce><!\[CDATA\[1372623149\]\]></Nonce>\n"
        r"</xml>",
        reply,
    )
    assert match is not None
    assert match["signature"] == crypto.signature(
        QDG6EK.token, "1409659813", "1372623149", match["encrypt"]
    )
    assert crypto.decrypt(QDG6EK, match["encrypt"]) == "<xml/>"


def test_encrypt_reply_then_read_reply__gives_the_message() -> None:
    message = "<xml><Content><![CDATA[收到]]></Content></xml>"

    assert events.read_reply(QDG6EK, events.encrypt_reply(QDG6EK, message)) == message


def test_read_reply__refuses_a_reply_signed_with_another_token() -> None:
    other = Credentials(
        token="another", encoding_aes_key=v.QDG6EK_ENCODING_AES_KEY, receive_id=v.QDG6EK_CORP_ID
    )

    with pytest.raises(BadSignature):
        events.read_reply(QDG6EK, events.encrypt_reply(other, "<xml/>"))


@pytest.mark.parametrize("field", ["MsgSignature", "TimeStamp", "Nonce", "Encrypt"])
def test_read_reply__refuses_a_reply_without_a_field(field: str) -> None:
    reply = events.encrypt_reply(QDG6EK, "<xml/>")
    reply = re.sub(rf"<{field}>.*?</{field}>\n", "", reply)

    with pytest.raises(MissingField, match=field):
        events.read_reply(QDG6EK, reply)


def test_post_xml__is_what_wecom_posts() -> None:
    sealed = crypto.Sealed(encrypt="ENC", msg_signature="SIG", timestamp="1", nonce="2")

    assert events.post_xml(sealed, to_user_name="ww1", agent_id="1000002") == (
        "<xml><ToUserName><![CDATA[ww1]]></ToUserName>"
        "<AgentID><![CDATA[1000002]]></AgentID>"
        "<Encrypt><![CDATA[ENC]]></Encrypt></xml>"
    )


def test_refusals__are_callback_refusals() -> None:
    assert issubclass(MalformedXml, CallbackRefused)
    assert issubclass(MissingField, MalformedXml)
