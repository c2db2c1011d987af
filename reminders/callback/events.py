"""WeCom's callback envelopes, and the messages inside them: the template_card_event first.

WeCom posts ``<xml><ToUserName/><AgentID/><Encrypt/></xml>`` with ``msg_signature``,
``timestamp`` and ``nonce`` in the query string; ``Encrypt`` holds the message, itself
XML: a ``template_card_event`` when a member clicks a button of a template card.

Invariants, and why:

* XML is parsed by ``defusedxml`` with DTDs forbidden, and with them every entity and
  external reference: the billion laughs, XXE and their kin are refused at the
  ``<!DOCTYPE``, before anything is expanded or fetched. WeCom never sends a DTD. The
  standard library's parser has no switch that forbids one (its expat only caps how far
  entities expand); defusedxml is the maintained library that adds it to that same parser,
  where doing it ourselves would mean handlers set on a private attribute.
* Of the envelope, only ``Encrypt`` counts: ``ToUserName`` and ``AgentID`` lie outside the
  signature, kept for information. What is trusted is inside the ciphertext: the frame's
  receive id (``crypto`` checks it) and the message's own fields.
* A message is read strictly, and a refused one gives nothing: the root is ``<xml>``, no
  field comes twice, no field holds elements where WeCom sends text, numbers are
  numbers, and a field WeCom always sends is there (``MissingField`` names it). Fields
  we do not know are kept, in ``fields``.
* A field is read whole, never cut: an ``EventKey`` is a button's key, at most 1,024
  bytes (``KEY_BYTES``, WeCom's limit, which ``senders.template_card`` holds our cards
  to), and a longer one is refused naming it; the ``ResponseCode``, of no published
  length, is kept as it came.
* Replies are written exactly as WeCom's reference ``EncryptMsg`` writes them, and posts
  as WeCom sends them: the sandbox plays WeCom with the functions we read it with.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from xml.etree.ElementTree import Element, ParseError
from xml.sax.saxutils import escape

# No stubs and no py.typed: ``fromstring`` returns the standard library's Element.
import defusedxml
import defusedxml.ElementTree

from .crypto import Credentials, Sealed, check_signature, decrypt, seal
from .exceptions import MalformedXml, MissingField

TEMPLATE_CARD_EVENT = "template_card_event"
KEY_BYTES = 1024  # a button's key, in UTF-8: WeCom's limit (``senders.template_card``'s)
_SHOWN = 40  # characters of a bad value quoted in a refusal


@dataclass(frozen=True, kw_only=True)
class Envelope:
    """What WeCom posts: the ciphertext, and (outside the signature) whom it is for."""

    encrypt: str
    to_user_name: str = ""
    agent_id: str = ""


@dataclass(frozen=True, kw_only=True)
class CallbackMessage:
    """A decrypted message that is not a template_card_event: its type, its event name
    (``""`` unless ``msg_type`` is ``"event"``), and its fields of text by tag."""

    msg_type: str
    event: str
    fields: Mapping[str, str] = field(hash=False)


@dataclass(frozen=True, kw_only=True)
class SelectedItem:
    """One question of a vote or multiple-choice card, and the options chosen."""

    question_key: str
    option_ids: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class TemplateCardEvent:
    """A member clicked a button of a template card WeCom delivered for us.

    ``to_user_name`` is the corp id, ``from_user_name`` the clicking member's id,
    ``event_key`` the button's key and ``task_id`` the card's, as we sent them;
    ``response_code`` lets the card be updated (once, within 72 hours). ``fields`` holds
    every field of text, known or not.
    """

    to_user_name: str
    from_user_name: str
    create_time: int
    agent_id: int
    event_key: str
    task_id: str
    card_type: str
    response_code: str
    selected_items: tuple[SelectedItem, ...] = ()
    fields: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), hash=False)

    @property
    def created_at(self) -> datetime:
        return datetime.fromtimestamp(self.create_time, tz=UTC)


def parse_envelope(body: str | bytes) -> Envelope:
    """The envelope of a POST body (or of a reply: it has no ``ToUserName``)."""
    fields = _Fields(_parse(body, "the body"), "the body")
    return Envelope(
        encrypt=fields.text("Encrypt"),
        to_user_name=fields.text("ToUserName", default=""),
        agent_id=fields.text("AgentID", default=""),
    )


def decrypt_post(
    credentials: Credentials, *, msg_signature: str, timestamp: str, nonce: str, body: str | bytes
) -> str:
    """The message a POST from WeCom carries, once its signature over ``Encrypt`` is
    checked; the three values as the query string gives them."""
    envelope = parse_envelope(body)
    check_signature(
        credentials,
        msg_signature=msg_signature,
        timestamp=timestamp,
        nonce=nonce,
        encrypted=envelope.encrypt,
    )
    return decrypt(credentials, envelope.encrypt)


def read_post(
    credentials: Credentials, *, msg_signature: str, timestamp: str, nonce: str, body: str | bytes
) -> CallbackMessage | TemplateCardEvent:
    """The message a POST from WeCom carries, decrypted and read (``parse_message``)."""
    return parse_message(
        decrypt_post(
            credentials, msg_signature=msg_signature, timestamp=timestamp, nonce=nonce, body=body
        )
    )


def parse_message(xml: str) -> CallbackMessage | TemplateCardEvent:
    """A decrypted message: a ``TemplateCardEvent`` for ``MsgType`` event and ``Event``
    template_card_event, a ``CallbackMessage`` for anything else."""
    fields = _Fields(_parse(xml, "the message"), "the message")
    msg_type = fields.text("MsgType")
    event = fields.text("Event") if msg_type == "event" else fields.text("Event", default="")
    if msg_type == "event" and event == TEMPLATE_CARD_EVENT:
        return _template_card_event(_Fields(fields.root, f"the {TEMPLATE_CARD_EVENT}"))
    return CallbackMessage(msg_type=msg_type, event=event, fields=fields.texts)


def reply_xml(sealed: Sealed) -> str:
    """A reply to WeCom, exactly as its reference ``EncryptMsg`` writes one."""
    return (
        "<xml>\n"
        f"<Encrypt>{_cdata(sealed.encrypt)}</Encrypt>\n"
        f"<MsgSignature>{_cdata(sealed.msg_signature)}</MsgSignature>\n"
        f"<TimeStamp>{escape(sealed.timestamp)}</TimeStamp>\n"
        f"<Nonce>{_cdata(sealed.nonce)}</Nonce>\n"
        "</xml>"
    )


def post_xml(sealed: Sealed, *, to_user_name: str, agent_id: str) -> str:
    """The body of a POST as WeCom sends it; ``sealed``'s signature, timestamp and nonce
    go in the query string."""
    return (
        f"<xml><ToUserName>{_cdata(to_user_name)}</ToUserName>"
        f"<AgentID>{_cdata(agent_id)}</AgentID>"
        f"<Encrypt>{_cdata(sealed.encrypt)}</Encrypt></xml>"
    )


def encrypt_reply(
    credentials: Credentials,
    message: str,
    *,
    timestamp: str | None = None,
    nonce: str | None = None,
    random: bytes | None = None,
) -> str:
    """``message`` encrypted, signed and wrapped as WeCom's reference ``EncryptMsg``
    does (``crypto.seal`` says what the defaults are)."""
    return reply_xml(seal(credentials, message, timestamp=timestamp, nonce=nonce, random=random))


def parse_reply(body: str | bytes) -> Sealed:
    """The four values of a reply written as ``reply_xml`` writes them."""
    fields = _Fields(_parse(body, "the reply"), "the reply")
    return Sealed(
        encrypt=fields.text("Encrypt"),
        msg_signature=fields.text("MsgSignature"),
        timestamp=fields.text("TimeStamp"),
        nonce=fields.text("Nonce"),
    )


def read_reply(credentials: Credentials, body: str | bytes) -> str:
    """The message of a reply, once the signature it carries is checked (what WeCom
    does with our replies, and the sandbox with them)."""
    sealed = parse_reply(body)
    check_signature(
        credentials,
        msg_signature=sealed.msg_signature,
        timestamp=sealed.timestamp,
        nonce=sealed.nonce,
        encrypted=sealed.encrypt,
    )
    return decrypt(credentials, sealed.encrypt)


def _parse(text: str | bytes, what: str) -> Element:
    """The root of ``text``, an ``<xml>`` element; DTDs (so entities) refused."""
    try:
        root: Element = defusedxml.ElementTree.fromstring(
            text, forbid_dtd=True, forbid_entities=True, forbid_external=True
        )
    except defusedxml.DefusedXmlException as error:
        raise MalformedXml(
            f"{what.capitalize()} declares a DTD ({type(error).__name__}), which WeCom never "
            "sends: refused before anything in it is expanded."
        ) from error
    except ParseError as error:
        raise MalformedXml(f"{what.capitalize()} is not well-formed XML: {error}.") from error
    if root.tag != "xml":
        raise MalformedXml(
            f"{what.capitalize()} is <{str(root.tag)[:_SHOWN]}>, where WeCom sends <xml>."
        )
    return root


class _Fields:
    """The children of ``root`` by tag: text where WeCom sends text, elements where it
    nests them; a tag that comes twice is refused."""

    def __init__(self, root: Element, what: str) -> None:
        self.root = root
        self.what = what
        texts: dict[str, str] = {}
        self.nested: dict[str, Element] = {}
        for child in root:
            name = str(child.tag)
            if name in texts or name in self.nested:
                raise MalformedXml(f"{what.capitalize()} gives {name} more than once.")
            if len(child):
                self.nested[name] = child
            else:
                texts[name] = child.text or ""
        self.texts: Mapping[str, str] = MappingProxyType(texts)

    def text(self, name: str, *, default: str | None = None, max_bytes: int = 0) -> str:
        """The text of ``name``; ``MissingField`` if absent and no ``default``;
        ``MalformedXml`` if over ``max_bytes`` in UTF-8 (when given)."""
        if name in self.nested:
            raise MalformedXml(f"In {self.what}, {name} holds elements where WeCom sends text.")
        if name not in self.texts:
            if default is None:
                raise MissingField(f"{self.what.capitalize()} has no {name}.", field=name)
            return default
        value = self.texts[name]
        if max_bytes and len(value.encode()) > max_bytes:
            raise MalformedXml(
                f"In {self.what}, {name} is {len(value.encode()):,} bytes, over WeCom's "
                f"{max_bytes:,}."
            )
        return value

    def integer(self, name: str) -> int:
        value = self.text(name)
        if not (value.isascii() and value.strip().isdigit()):
            raise MalformedXml(f"In {self.what}, {name} is {value[:_SHOWN]!r}, not a whole number.")
        return int(value)


def _template_card_event(fields: _Fields) -> TemplateCardEvent:
    return TemplateCardEvent(
        to_user_name=fields.text("ToUserName"),
        from_user_name=fields.text("FromUserName"),
        create_time=fields.integer("CreateTime"),
        agent_id=fields.integer("AgentID"),
        event_key=fields.text("EventKey", max_bytes=KEY_BYTES),
        task_id=fields.text("TaskId"),
        card_type=fields.text("CardType"),
        response_code=fields.text("ResponseCode"),
        selected_items=_selected_items(fields.nested.get("SelectedItems")),
        fields=fields.texts,
    )


def _selected_items(element: Element | None) -> tuple[SelectedItem, ...]:
    """The ``SelectedItem``s of a vote or multiple-choice card's ``SelectedItems``."""
    if element is None:
        return ()
    items = []
    for item in element.iterfind("SelectedItem"):
        question_key = item.find("QuestionKey")
        if question_key is None:
            raise MissingField("A SelectedItem has no QuestionKey.", field="QuestionKey")
        option_ids = item.find("OptionIds")
        if option_ids is None:
            raise MissingField("A SelectedItem has no OptionIds.", field="OptionIds")
        items.append(
            SelectedItem(
                question_key=question_key.text or "",
                option_ids=tuple(option.text or "" for option in option_ids.iterfind("OptionId")),
            )
        )
    return tuple(items)


def _cdata(value: str) -> str:
    if "]]>" in value:
        raise ValueError("A value written in CDATA cannot hold ']]>'.")
    return f"<![CDATA[{value}]]>"
