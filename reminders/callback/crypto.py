"""WeCom's callback crypto ("WXBizMsgCrypt"): the signature, AES, the padding, the frame.

A message travels as base64 of AES-256-CBC (key: the EncodingAESKey decoded, IV: the
key's first 16 bytes) over a frame of 16 random bytes, the message's length in 4
big-endian bytes, the message in UTF-8 and the receive id (our corp id), padded by
PKCS#7 to a multiple of 32 bytes. Its ``msg_signature`` is the SHA-1 hex of the token,
the timestamp, the nonce and the base64 text, sorted and joined.

Invariants, and why:

* The signature is checked before anything is decrypted, and compared in constant time
  (``hmac.compare_digest``). Only WeCom and we hold the token, so nobody else gets a
  ciphertext of their choosing as far as the decryption, and its refusals (padding,
  frame, receive id) are no oracle for anyone; that is also why ``unpad`` need not run
  in constant time.
* Decryption accepts only what WeCom's encryption produces, and raises for anything
  else, never returning a part: standard base64 with its padding, whole 32-byte
  blocks, padding of 1 to 32 bytes each worth their count (WeCom's Python reference
  ignores a bad one; we refuse it), a frame whose length holds, a receive id that is
  exactly ours, a message in UTF-8.
* Encryption is WeCom's reference exactly: given the same 16 random bytes it gives
  Tencent's published ciphertexts byte for byte (the tests hold it to them), so WeCom,
  and any client built on its reference code, reads what we encrypt.
* The EncodingAESKey is 43 characters of standard base64, 32 bytes once decoded with
  the "=" WeCom leaves off; anything else is ``BadEncodingAESKey`` when ``Credentials``
  are made, not at the first callback. No message and no repr quotes the token or the key.
* The GET that verifies the URL is answered with its ``echostr`` decrypted, and only
  with an echostr: WeCom's are up to 32 ASCII digits (``ECHOSTR``). Anything else signed
  with our token (a click captured on its way, replayed as a GET) is ``NotAnEchostr``,
  its plaintext never returned: the URL decrypts nothing for anyone.
* AES is ``cryptography``'s: nothing here implements a cipher.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
import struct
import time
from dataclasses import dataclass, field

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from .exceptions import (
    BadCiphertext,
    BadEncodingAESKey,
    BadSignature,
    NotAnEchostr,
    WrongReceiveId,
)

BLOCK_SIZE = 32  # bytes: WeCom pads to 32, twice AES's block
RANDOM_SIZE = 16  # bytes of random prefix in every frame
LENGTH_SIZE = 4  # bytes of the message's length, big-endian
KEY_LENGTH = 43  # characters of an EncodingAESKey
_ENCODING_AES_KEY = re.compile(r"[A-Za-z0-9+/]{43}")
# What an echostr decrypts to: WeCom's is a random number ("1616140317555161061").
ECHOSTR = re.compile(r"[0-9]{1,32}")
_SHOWN = 64  # characters of a foreign receive id quoted in a refusal


def aes_key(encoding_aes_key: str) -> bytes:
    """The 32-byte AES key an EncodingAESKey encodes: base64 without its final "="."""
    if not _ENCODING_AES_KEY.fullmatch(encoding_aes_key):
        raise BadEncodingAESKey(
            "An EncodingAESKey is 43 characters of base64 (A-Z, a-z, 0-9, + and /), as "
            f"WeCom's admin console shows it; this one has {len(encoding_aes_key)} "
            "characters, or others than those."
        )
    key = base64.b64decode(encoding_aes_key + "=")
    if len(key) != 32:  # pragma: no cover - 43 characters of base64 are 32 bytes
        raise BadEncodingAESKey("An EncodingAESKey decodes to 32 bytes.")
    return key


@dataclass(frozen=True, kw_only=True)
class Credentials:
    """What our side of the callback holds: the token and EncodingAESKey set in WeCom's
    admin console for the app's callback, and our receive id (the corp id).

    ``key`` is the AES key, decoded (and checked) when the credentials are made. The
    repr shows the receive id alone.
    """

    token: str = field(repr=False)
    encoding_aes_key: str = field(repr=False)
    receive_id: str
    key: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", aes_key(self.encoding_aes_key))


@dataclass(frozen=True, kw_only=True)
class Sealed:
    """A message encrypted and signed: the four values WeCom's envelopes carry."""

    encrypt: str
    msg_signature: str
    timestamp: str
    nonce: str


def signature(token: str, timestamp: str, nonce: str, encrypted: str) -> str:
    """WeCom's ``msg_signature``: SHA-1 hex of the four values sorted and joined."""
    joined = "".join(sorted((token, timestamp, nonce, encrypted)))
    return hashlib.sha1(joined.encode()).hexdigest()  # noqa: S324 - WeCom's protocol fixes SHA-1


def check_signature(
    credentials: Credentials, *, msg_signature: str, timestamp: str, nonce: str, encrypted: str
) -> None:
    """Raise ``BadSignature`` unless ``msg_signature`` signs the other three with our token."""
    expected = signature(credentials.token, timestamp, nonce, encrypted)
    if not hmac.compare_digest(expected.encode(), msg_signature.encode()):
        raise BadSignature(
            "The msg_signature does not sign the timestamp, nonce and ciphertext with our "
            "token: not from WeCom, or not for this callback."
        )


def pad(data: bytes) -> bytes:
    """``data`` padded by PKCS#7 to a multiple of 32 bytes: 1 to 32 bytes, each worth
    their count (32 of them when ``data`` is already a multiple)."""
    count = BLOCK_SIZE - len(data) % BLOCK_SIZE
    return data + bytes([count]) * count


def unpad(padded: bytes) -> bytes:
    """``padded`` without its PKCS#7 padding to 32 bytes; ``BadCiphertext`` unless that
    padding is exactly what ``pad`` writes."""
    if not padded or len(padded) % BLOCK_SIZE:
        raise BadCiphertext(
            f"The plaintext is {len(padded)} bytes, not whole 32-byte blocks: bad padding."
        )
    count = padded[-1]
    if not 1 <= count <= BLOCK_SIZE:
        raise BadCiphertext(f"Bad padding: its last byte says {count}, not 1 to 32.")
    if padded[-count:] != bytes([count]) * count:
        raise BadCiphertext(f"Bad padding: the last {count} bytes are not all {count}.")
    return padded[:-count]


def frame(message: bytes, receive_id: bytes, random: bytes) -> bytes:
    """The plaintext WeCom encrypts, before padding: ``random`` (16 bytes), the
    message's length (4 bytes, big-endian), the message, the receive id."""
    if len(random) != RANDOM_SIZE:
        raise ValueError(f"The random prefix is {RANDOM_SIZE} bytes, not {len(random)}.")
    return random + struct.pack(">I", len(message)) + message + receive_id


def unframe(plaintext: bytes) -> tuple[bytes, bytes]:
    """The message and the receive id of an unpadded ``plaintext``."""
    start = RANDOM_SIZE + LENGTH_SIZE
    if len(plaintext) < start:
        raise BadCiphertext(
            f"The plaintext is {len(plaintext)} bytes, too short for the random prefix "
            "and the message's length."
        )
    (length,) = struct.unpack_from(">I", plaintext, RANDOM_SIZE)
    if start + length > len(plaintext):
        raise BadCiphertext(
            f"The frame says the message is {length} bytes, but {len(plaintext) - start} follow."
        )
    return plaintext[start : start + length], plaintext[start + length :]


def encrypt(credentials: Credentials, message: str, *, random: bytes | None = None) -> str:
    """``message`` encrypted for ``credentials``' receive id, in base64.

    ``random`` is the 16-byte prefix, fresh from ``secrets`` unless given (tests give
    one to reproduce published ciphertexts).
    """
    prefix = secrets.token_bytes(RANDOM_SIZE) if random is None else random
    plaintext = pad(frame(message.encode(), credentials.receive_id.encode(), prefix))
    encryptor = _cipher(credentials.key).encryptor()
    return base64.b64encode(encryptor.update(plaintext) + encryptor.finalize()).decode("ascii")


def decrypt(credentials: Credentials, encrypted: str) -> str:
    """The message ``encrypted`` holds, if it was encrypted for our receive id.

    Raises ``BadCiphertext`` (base64, blocks, padding, frame, UTF-8) or
    ``WrongReceiveId``. The signature is the caller's to check first: ``verify_url``
    and ``events.decrypt_post`` do.
    """
    ciphertext = _ciphertext(encrypted)
    decryptor = _cipher(credentials.key).decryptor()
    message, receive_id = unframe(unpad(decryptor.update(ciphertext) + decryptor.finalize()))
    if not hmac.compare_digest(receive_id, credentials.receive_id.encode()):
        shown = receive_id.decode("utf-8", "backslashreplace")[:_SHOWN]
        raise WrongReceiveId(
            f"The message is framed for receive id {shown!r}, not ours "
            f"({credentials.receive_id!r})."
        )
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BadCiphertext("The decrypted message is not UTF-8 text.") from error


def verify_url(
    credentials: Credentials, *, msg_signature: str, timestamp: str, nonce: str, echostr: str
) -> str:
    """The answer to WeCom's GET that verifies the callback URL: ``echostr`` decrypted,
    once its signature is checked (the four values as the query string gives them);
    ``NotAnEchostr`` if it decrypts to anything but an echostr's digits."""
    check_signature(
        credentials,
        msg_signature=msg_signature,
        timestamp=timestamp,
        nonce=nonce,
        encrypted=echostr,
    )
    plain = decrypt(credentials, echostr)
    if not ECHOSTR.fullmatch(plain):
        raise NotAnEchostr(
            f"The echostr decrypts to {len(plain)} characters that are not WeCom's echostr "
            "(1 to 32 digits): a message replayed to have it decrypted."
        )
    return plain


def seal(
    credentials: Credentials,
    message: str,
    *,
    timestamp: str | None = None,
    nonce: str | None = None,
    random: bytes | None = None,
) -> Sealed:
    """``message`` encrypted and signed, as WeCom's reference ``EncryptMsg`` does.

    ``timestamp`` defaults to now (seconds), ``nonce`` to ten random digits, as WeCom's
    own look.
    """
    timestamp = str(int(time.time())) if timestamp is None else timestamp
    nonce = str(10**9 + secrets.randbelow(9 * 10**9)) if nonce is None else nonce
    encrypted = encrypt(credentials, message, random=random)
    return Sealed(
        encrypt=encrypted,
        msg_signature=signature(credentials.token, timestamp, nonce, encrypted),
        timestamp=timestamp,
        nonce=nonce,
    )


def _ciphertext(encrypted: str) -> bytes:
    """``encrypted`` decoded from base64; ``BadCiphertext`` unless whole 32-byte blocks."""
    try:
        ciphertext = base64.b64decode(encrypted, validate=True)
    except (binascii.Error, ValueError) as error:
        raise BadCiphertext(
            "The ciphertext is not base64 (standard alphabet, with its padding): "
            "truncated, or not WeCom's."
        ) from error
    if not ciphertext or len(ciphertext) % BLOCK_SIZE:
        raise BadCiphertext(
            f"The ciphertext is {len(ciphertext)} bytes, not whole 32-byte blocks: "
            "truncated, or not WeCom's."
        )
    return ciphertext


def _cipher(key: bytes) -> Cipher[modes.CBC]:
    return Cipher(algorithms.AES(key), modes.CBC(key[:16]))
