"""WeCom's callback crypto: the published examples reproduced, and every refusal.

What a test crafts by hand (a plaintext with bad padding, a ciphertext with a flipped
bit) it encrypts with ``cryptography`` directly, so a refusal is the decryption's own
and not an artefact of our encryption.
"""

from __future__ import annotations

import base64
import hashlib
import struct

import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from django.core.exceptions import ImproperlyConfigured, SuspiciousOperation

from reminders.callback import crypto
from reminders.callback.crypto import Credentials
from reminders.callback.exceptions import (
    BadCiphertext,
    BadEncodingAESKey,
    BadSignature,
    CallbackError,
    CallbackRefused,
    NotAnEchostr,
    WrongReceiveId,
)
from reminders.exceptions import RemindersError

from . import vectors as v

QDG6EK = Credentials(
    token=v.QDG6EK_TOKEN,
    encoding_aes_key=v.QDG6EK_ENCODING_AES_KEY,
    receive_id=v.QDG6EK_CORP_ID,
)
PY = Credentials(token=v.PY_TOKEN, encoding_aes_key=v.PY_ENCODING_AES_KEY, receive_id=v.PY_CORP_ID)
MP = Credentials(token=v.MP_TOKEN, encoding_aes_key=v.MP_ENCODING_AES_KEY, receive_id=v.MP_APP_ID)


def raw_encrypt(key: bytes, plaintext: bytes) -> str:
    """``plaintext`` (already padded, or deliberately not) under WeCom's AES-256-CBC."""
    encryptor = Cipher(algorithms.AES(key), modes.CBC(key[:16])).encryptor()
    return base64.b64encode(encryptor.update(plaintext) + encryptor.finalize()).decode()


def raw_decrypt(key: bytes, encrypted: str) -> bytes:
    decryptor = Cipher(algorithms.AES(key), modes.CBC(key[:16])).decryptor()
    return decryptor.update(base64.b64decode(encrypted)) + decryptor.finalize()


def framed(message: bytes, receive_id: bytes, random: bytes = b"r" * 16) -> bytes:
    return random + struct.pack(">I", len(message)) + message + receive_id


def flip(encrypted: str, position: int) -> str:
    """``encrypted`` with one bit of its ciphertext byte at ``position`` flipped: CBC
    flips the same bit of the plaintext byte 16 further on (and garbles the block
    holding ``position``)."""
    data = bytearray(base64.b64decode(encrypted))
    data[position] ^= 0x01
    return base64.b64encode(bytes(data)).decode()


def signed(credentials: Credentials, encrypted: str) -> dict[str, str]:
    """Query parameters that sign ``encrypted`` with the right token: what only WeCom,
    or someone holding our token, can produce."""
    timestamp, nonce = "1700000000", "42"
    return {
        "msg_signature": crypto.signature(credentials.token, timestamp, nonce, encrypted),
        "timestamp": timestamp,
        "nonce": nonce,
    }


# --- WeCom's published examples ---------------------------------------------------------


def test_signature__reproduces_the_published_url_example() -> None:
    assert (
        crypto.signature(
            v.QDG6EK_TOKEN,
            v.QDG6EK_VERIFY_TIMESTAMP,
            v.QDG6EK_VERIFY_NONCE,
            v.QDG6EK_VERIFY_ECHOSTR,
        )
        == v.QDG6EK_VERIFY_MSG_SIGNATURE
    )


def test_signature__reproduces_the_published_post_examples() -> None:
    assert (
        crypto.signature(
            v.QDG6EK_TOKEN, v.QDG6EK_POST_TIMESTAMP, v.QDG6EK_POST_NONCE, v.QDG6EK_POST_ENCRYPT
        )
        == v.QDG6EK_POST_MSG_SIGNATURE
    )


def test_signature__is_sha1_of_the_four_values_sorted_and_joined() -> None:
    expected = hashlib.sha1(b"".join(sorted([b"tok", b"123", b"n0nce", b"ENC"]))).hexdigest()  # noqa: S324

    assert crypto.signature("tok", "123", "n0nce", "ENC") == expected


def test_verify_url__returns_the_published_echostr_plaintext() -> None:
    echo = crypto.verify_url(
        QDG6EK,
        msg_signature=v.QDG6EK_VERIFY_MSG_SIGNATURE,
        timestamp=v.QDG6EK_VERIFY_TIMESTAMP,
        nonce=v.QDG6EK_VERIFY_NONCE,
        echostr=v.QDG6EK_VERIFY_ECHOSTR,
    )

    assert echo == v.QDG6EK_VERIFY_ECHO_PLAINTEXT


def test_verify_url__the_python_samples_example() -> None:
    echo = crypto.verify_url(
        PY,
        msg_signature=v.PY_VERIFY_MSG_SIGNATURE,
        timestamp=v.PY_VERIFY_TIMESTAMP,
        nonce=v.PY_VERIFY_NONCE,
        echostr=v.PY_VERIFY_ECHOSTR,
    )

    assert echo == v.PY_VERIFY_ECHO_PLAINTEXT


def test_decrypt__gives_the_published_post_plaintext() -> None:
    assert crypto.decrypt(QDG6EK, v.QDG6EK_POST_ENCRYPT) == v.QDG6EK_POST_PLAINTEXT


def test_encrypt__reproduces_tencents_known_answers_with_their_random_prefix() -> None:
    assert crypto.encrypt(MP, v.MP_REPLY, random=v.MP_RANDOM) == v.MP_REPLY_ENCRYPTED
    assert crypto.encrypt(MP, v.MP_REPLY2, random=v.MP_RANDOM) == v.MP_REPLY2_ENCRYPTED


def test_decrypt__reads_tencents_known_answers() -> None:
    assert crypto.decrypt(MP, v.MP_REPLY_ENCRYPTED) == v.MP_REPLY
    assert crypto.decrypt(MP, v.MP_REPLY2_ENCRYPTED) == v.MP_REPLY2


# --- Round trips --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "message",
    [
        "",
        "a",
        "我是中文abcd123",
        # Lengths around the 32-byte block, framing included (16 + 4 + 18 bytes of id).
        "x" * (32 - 38 % 32),
        "x" * (32 - 38 % 32 - 1),
        "x" * (32 - 38 % 32 + 1),
        "<xml>" + "长" * 700 + "</xml>",
    ],
)
def test_encrypt_then_decrypt__gives_the_message(message: str) -> None:
    encrypted = crypto.encrypt(QDG6EK, message)

    assert len(base64.b64decode(encrypted)) % 32 == 0
    assert crypto.decrypt(QDG6EK, encrypted) == message


def test_encrypt__frames_as_wecom_does() -> None:
    """16 random bytes, the message's length in 4 big-endian bytes, the message (UTF-8),
    the receive id, then PKCS#7 padding to 32 bytes (32 of them when already even)."""
    message = "提醒".encode()
    encrypted = crypto.encrypt(QDG6EK, "提醒", random=b"0123456789abcdef")

    plain = raw_decrypt(QDG6EK.key, encrypted)
    body = b"0123456789abcdef" + struct.pack(">I", len(message)) + message + b"wx5823bf96d3bd56c7"
    padding = 32 - len(body) % 32
    assert plain == body + bytes([padding]) * padding


def test_encrypt__pads_a_whole_block_when_the_plaintext_fills_its_blocks() -> None:
    message = "x" * (64 - 16 - 4 - len(v.QDG6EK_CORP_ID))

    plain = raw_decrypt(QDG6EK.key, crypto.encrypt(QDG6EK, message))

    assert len(plain) == 96
    assert plain[-32:] == bytes([32]) * 32


def test_encrypt__a_fresh_random_prefix_each_time() -> None:
    assert crypto.encrypt(QDG6EK, "same") != crypto.encrypt(QDG6EK, "same")


def test_seal__signs_what_it_encrypts() -> None:
    sealed = crypto.seal(QDG6EK, "hello", timestamp="1409659813", nonce="1372623149")

    assert sealed.timestamp == "1409659813"
    assert sealed.nonce == "1372623149"
    assert sealed.msg_signature == crypto.signature(
        QDG6EK.token, "1409659813", "1372623149", sealed.encrypt
    )
    crypto.check_signature(
        QDG6EK,
        msg_signature=sealed.msg_signature,
        timestamp=sealed.timestamp,
        nonce=sealed.nonce,
        encrypted=sealed.encrypt,
    )
    assert crypto.decrypt(QDG6EK, sealed.encrypt) == "hello"


def test_seal__makes_up_a_timestamp_and_a_nonce_when_not_given() -> None:
    sealed = crypto.seal(QDG6EK, "8526339617929397596")

    assert sealed.timestamp.isdigit()
    assert sealed.nonce.isdigit()
    assert (
        crypto.verify_url(
            QDG6EK,
            msg_signature=sealed.msg_signature,
            timestamp=sealed.timestamp,
            nonce=sealed.nonce,
            echostr=sealed.encrypt,
        )
        == "8526339617929397596"
    )


@pytest.mark.parametrize(
    "plaintext",
    ["hello", "<xml><MsgType>event</MsgType></xml>", "1" * 33, "", "\uff11\uff12\uff13"],
)
def test_verify_url__decrypts_only_an_echostr(plaintext: str) -> None:
    sealed = crypto.seal(QDG6EK, plaintext)
    with pytest.raises(NotAnEchostr) as refused:
        crypto.verify_url(
            QDG6EK,
            msg_signature=sealed.msg_signature,
            timestamp=sealed.timestamp,
            nonce=sealed.nonce,
            echostr=sealed.encrypt,
        )
    assert "echostr" in str(refused.value)
    assert not plaintext or plaintext not in str(refused.value)


# --- Refusals: the signature --------------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        {"msg_signature": "0" * 40},
        {"msg_signature": v.QDG6EK_VERIFY_MSG_SIGNATURE.upper()},
        {"msg_signature": ""},
        {"msg_signature": "签名"},
        {"timestamp": "1409659590"},
        {"nonce": "263014781"},
        {"echostr": v.QDG6EK_VERIFY_ECHOSTR[:-4] + "AAA="},
    ],
    ids=["zeros", "upper-case", "empty", "not-ascii", "timestamp", "nonce", "echostr"],
)
def test_verify_url__refuses_a_wrong_signature(change: dict[str, str]) -> None:
    arguments = {
        "msg_signature": v.QDG6EK_VERIFY_MSG_SIGNATURE,
        "timestamp": v.QDG6EK_VERIFY_TIMESTAMP,
        "nonce": v.QDG6EK_VERIFY_NONCE,
        "echostr": v.QDG6EK_VERIFY_ECHOSTR,
    } | change

    with pytest.raises(BadSignature):
        crypto.verify_url(QDG6EK, **arguments)


def test_verify_url__refuses_another_token() -> None:
    other = Credentials(
        token="QDG6eL", encoding_aes_key=v.QDG6EK_ENCODING_AES_KEY, receive_id=v.QDG6EK_CORP_ID
    )

    with pytest.raises(BadSignature):
        crypto.verify_url(
            other,
            msg_signature=v.QDG6EK_VERIFY_MSG_SIGNATURE,
            timestamp=v.QDG6EK_VERIFY_TIMESTAMP,
            nonce=v.QDG6EK_VERIFY_NONCE,
            echostr=v.QDG6EK_VERIFY_ECHOSTR,
        )


def test_verify_url__checks_the_signature_before_decrypting() -> None:
    """A ciphertext nobody signed is refused for its signature, whatever it holds: the
    decryption's refusals are no oracle for someone without our token."""
    with pytest.raises(BadSignature):
        crypto.verify_url(
            QDG6EK,
            msg_signature=v.QDG6EK_VERIFY_MSG_SIGNATURE,
            timestamp=v.QDG6EK_VERIFY_TIMESTAMP,
            nonce=v.QDG6EK_VERIFY_NONCE,
            echostr=flip(v.QDG6EK_VERIFY_ECHOSTR, 47),
        )


# --- Refusals: the ciphertext -------------------------------------------------------------


def test_verify_url__refuses_a_tampered_padding_byte() -> None:
    # The echostr's plaintext is 64 bytes, the last 7 of them padding: flipping byte 47
    # of the ciphertext flips the last one (7 becomes 6, over bytes that say 7).
    tampered = flip(v.QDG6EK_VERIFY_ECHOSTR, 47)

    with pytest.raises(BadCiphertext, match="padding"):
        crypto.verify_url(QDG6EK, **signed(QDG6EK, tampered), echostr=tampered)


def test_verify_url__refuses_a_tampered_receive_id() -> None:
    # Byte 56 of the plaintext is the corp id's last ("7"): flip it through byte 40.
    tampered = flip(v.QDG6EK_VERIFY_ECHOSTR, 40)

    with pytest.raises(WrongReceiveId):
        crypto.verify_url(QDG6EK, **signed(QDG6EK, tampered), echostr=tampered)


def test_decrypt__refuses_a_tampered_length() -> None:
    # Bytes 16 to 19 hold the message's length (19): flipping the low bit of byte 19,
    # through byte 3, makes it 18 (and garbles the random prefix). The message's last
    # byte then reads as the receive id's first.
    tampered = flip(v.QDG6EK_VERIFY_ECHOSTR, 3)

    with pytest.raises(WrongReceiveId):
        crypto.decrypt(QDG6EK, tampered)


def test_decrypt__refuses_another_receive_id() -> None:
    other = Credentials(
        token=v.QDG6EK_TOKEN,
        encoding_aes_key=v.QDG6EK_ENCODING_AES_KEY,
        receive_id="wx5823bf96d3bd56c8",
    )

    with pytest.raises(WrongReceiveId) as refused:
        crypto.decrypt(other, v.QDG6EK_POST_ENCRYPT)

    assert "wx5823bf96d3bd56c7" in str(refused.value)


@pytest.mark.parametrize("receive_id", ["", "wx5823bf96d3bd56c", "wx5823bf96d3bd56c77"])
def test_decrypt__refuses_a_receive_id_that_only_starts_or_ends_alike(receive_id: str) -> None:
    other = Credentials(
        token=v.QDG6EK_TOKEN, encoding_aes_key=v.QDG6EK_ENCODING_AES_KEY, receive_id=receive_id
    )

    with pytest.raises(WrongReceiveId):
        crypto.decrypt(other, v.QDG6EK_POST_ENCRYPT)


def test_decrypt__refuses_another_key() -> None:
    other = Credentials(
        token=v.QDG6EK_TOKEN, encoding_aes_key=v.PY_ENCODING_AES_KEY, receive_id=v.QDG6EK_CORP_ID
    )

    with pytest.raises((BadCiphertext, WrongReceiveId)):
        crypto.decrypt(other, v.QDG6EK_POST_ENCRYPT)


def padded_by_hand(tail: bytes) -> bytes:
    """A 64-byte plaintext: a well-framed message, then ``tail`` as its last bytes."""
    body = framed(b"m" * 5, QDG6EK.receive_id.encode())
    return body + b"\x00" * (64 - len(body) - len(tail)) + tail


@pytest.mark.parametrize(
    ("plaintext", "why"),
    [
        (padded_by_hand(b"\x00"), "a padding byte of 0"),
        (padded_by_hand(b"\x21"), "a padding byte over 32"),
        (padded_by_hand(b"\xff"), "a padding byte over 32"),
        (padded_by_hand(b"\x04\x04\x03\x04"), "inconsistent padding bytes"),
        (padded_by_hand(b"\x05" * 4), "too few padding bytes"),
    ],
)
def test_decrypt__refuses_bad_padding(plaintext: bytes, why: str) -> None:
    encrypted = raw_encrypt(QDG6EK.key, plaintext)

    with pytest.raises(BadCiphertext, match="padding"):
        crypto.decrypt(QDG6EK, encrypted)


def test_decrypt__refuses_padding_to_16_bytes_only() -> None:
    """WeCom pads to 32 bytes: a plaintext of an odd number of AES blocks is not its."""
    body = framed(b"m" * 5, QDG6EK.receive_id.encode())  # 43 bytes
    encrypted = raw_encrypt(QDG6EK.key, body + bytes([5]) * 5)  # 48: PKCS#7 for 16

    with pytest.raises(BadCiphertext):
        crypto.decrypt(QDG6EK, encrypted)


def test_decrypt__accepts_padding_built_by_hand_as_wecom_does() -> None:
    body = framed("一条消息".encode(), QDG6EK.receive_id.encode())
    padding = 32 - len(body) % 32

    assert crypto.decrypt(QDG6EK, raw_encrypt(QDG6EK.key, body + bytes([padding]) * padding)) == (
        "一条消息"
    )


@pytest.mark.parametrize(
    ("plaintext", "why"),
    [
        (b"r" * 16 + struct.pack(">I", 1000) + b"m" * 5 + b"wx5823bf96d3bd56c7", "too long"),
        (b"r" * 16 + b"\x00\x00", "no length"),
        (b"r" * 10, "no random prefix"),
    ],
)
def test_decrypt__refuses_a_frame_that_does_not_hold_together(plaintext: bytes, why: str) -> None:
    padding = 32 - len(plaintext) % 32

    with pytest.raises(BadCiphertext):
        crypto.decrypt(QDG6EK, raw_encrypt(QDG6EK.key, plaintext + bytes([padding]) * padding))


def test_decrypt__refuses_a_message_that_is_not_utf8() -> None:
    body = framed(b"\xff\xfe", QDG6EK.receive_id.encode())
    padding = 32 - len(body) % 32

    with pytest.raises(BadCiphertext, match="UTF-8"):
        crypto.decrypt(QDG6EK, raw_encrypt(QDG6EK.key, body + bytes([padding]) * padding))


@pytest.mark.parametrize(
    "encrypted",
    [
        v.QDG6EK_VERIFY_ECHOSTR[:-2],  # its "==" cut off
        v.QDG6EK_VERIFY_ECHOSTR[:-1],
        v.QDG6EK_VERIFY_ECHOSTR[:-4],  # valid base64, 61 bytes: not whole blocks
        v.QDG6EK_VERIFY_ECHOSTR[:44],  # valid base64, 33 bytes
        v.QDG6EK_VERIFY_ECHOSTR[:-24] + "==",  # one AES block short: 48 bytes
        "",
        "not base64 at all!",
        v.QDG6EK_VERIFY_ECHOSTR.replace("+", " "),  # a "+" that a query string made a space
        v.QDG6EK_VERIFY_ECHOSTR.replace("+", "-").replace("/", "_"),  # URL-safe alphabet
    ],
    ids=["cut-padding", "cut-1", "cut-4", "33-bytes", "48-bytes", "empty", "junk", "space", "url"],
)
def test_decrypt__refuses_truncated_or_malformed_base64(encrypted: str) -> None:
    with pytest.raises(BadCiphertext):
        crypto.decrypt(QDG6EK, encrypted)


def test_verify_url__refuses_truncated_base64_even_when_signed() -> None:
    truncated = v.QDG6EK_VERIFY_ECHOSTR[:-2]

    with pytest.raises(BadCiphertext):
        crypto.verify_url(QDG6EK, **signed(QDG6EK, truncated), echostr=truncated)


# --- Padding on its own -------------------------------------------------------------------


@pytest.mark.parametrize("size", range(65))
def test_pad_then_unpad__gives_the_data(size: int) -> None:
    data = bytes(range(size))

    padded = crypto.pad(data)

    assert len(padded) % 32 == 0
    assert 1 <= len(padded) - size <= 32
    assert crypto.unpad(padded) == data


@pytest.mark.parametrize(
    "padded",
    [
        b"",
        b"x" * 31 + b"\x01" + b"y",  # not whole blocks
        b"x" * 31 + b"\x00",
        b"x" * 31 + b"\x21",
        b"\x20" * 31 + b"\x1f",  # 31 bytes of 0x1f claimed, 30 of them are 0x20
        b"x" * 30 + b"\x01\x02",
        b"\x40" * 64,
    ],
)
def test_unpad__refuses_bad_padding(padded: bytes) -> None:
    with pytest.raises(BadCiphertext):
        crypto.unpad(padded)


def test_unpad__a_whole_block_of_padding() -> None:
    assert crypto.unpad(b"d" * 32 + b"\x20" * 32) == b"d" * 32


# --- The EncodingAESKey and the credentials -----------------------------------------------


def test_aes_key__is_the_43_characters_decoded_with_their_missing_padding() -> None:
    key = crypto.aes_key(v.QDG6EK_ENCODING_AES_KEY)

    assert len(key) == 32
    assert key == base64.b64decode(v.QDG6EK_ENCODING_AES_KEY + "=")
    assert QDG6EK.key == key


@pytest.mark.parametrize(
    "encoding_aes_key",
    [
        "",
        "abcde",
        v.QDG6EK_ENCODING_AES_KEY[:-1],  # 42 characters
        v.QDG6EK_ENCODING_AES_KEY + "A",  # 44 characters
        v.QDG6EK_ENCODING_AES_KEY + "=",  # 44, padded
        v.QDG6EK_ENCODING_AES_KEY[:-1] + "!",
        v.QDG6EK_ENCODING_AES_KEY[:-1] + "=",
        v.QDG6EK_ENCODING_AES_KEY[:-1] + "-",  # URL-safe alphabet
        v.QDG6EK_ENCODING_AES_KEY[:-1] + " ",
        "键" * 43,
    ],
    ids=["empty", "short", "42", "44", "padded", "bang", "equals", "dash", "space", "cjk"],
)
def test_aes_key__refuses_anything_but_43_characters_of_base64(encoding_aes_key: str) -> None:
    with pytest.raises(BadEncodingAESKey, match="43"):
        crypto.aes_key(encoding_aes_key)


def test_credentials__refuse_a_bad_key_when_made() -> None:
    with pytest.raises(BadEncodingAESKey):
        Credentials(token="t", encoding_aes_key="abcde", receive_id="ww1")


def test_bad_encoding_aes_key__never_quotes_the_key() -> None:
    secret_key = v.QDG6EK_ENCODING_AES_KEY[:-1] + "!"

    with pytest.raises(BadEncodingAESKey) as refused:
        crypto.aes_key(secret_key)

    assert secret_key not in str(refused.value)
    assert secret_key[:20] not in str(refused.value)


def test_credentials__repr_shows_the_receive_id_and_no_secret() -> None:
    shown = repr(QDG6EK)

    assert v.QDG6EK_CORP_ID in shown
    assert v.QDG6EK_TOKEN not in shown
    assert v.QDG6EK_ENCODING_AES_KEY not in shown
    assert repr(QDG6EK.key) not in shown


def test_credentials__are_frozen() -> None:
    with pytest.raises(AttributeError):
        QDG6EK.receive_id = "ww2"  # type: ignore[misc]


# --- The exception tree -------------------------------------------------------------------


def test_refusals__share_one_base_under_the_apps() -> None:
    for refusal in (BadSignature, BadCiphertext, WrongReceiveId):
        assert issubclass(refusal, CallbackRefused)
        assert issubclass(refusal, SuspiciousOperation)
        assert issubclass(refusal, CallbackError)
        assert issubclass(refusal, RemindersError)
    assert issubclass(BadEncodingAESKey, CallbackError)
    assert issubclass(BadEncodingAESKey, ImproperlyConfigured)
    assert not issubclass(BadEncodingAESKey, CallbackRefused)
