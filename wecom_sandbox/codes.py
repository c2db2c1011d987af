"""The errcodes the sandbox answers with, and WeCom's errmsg for each.

Senders must classify by ``errcode`` only; the messages are here so that a person
reading the ledger recognises them.
"""

from __future__ import annotations

OK = 0
BUSY = -1
INVALID_SECRET = 40001
INVALID_MSGTYPE = 40008
INVALID_CORPID = 40013
INVALID_TOKEN = 40014
INVALID_AGENTID = 40056
INVALID_PARAMETER = 40058
MISSING_TOKEN = 41001
MISSING_CORPID = 41002
MISSING_SECRET = 41004
MISSING_AGENTID = 41011
TOKEN_EXPIRED = 42001
TASK_ID_INVALID = 42014
REQUIRE_POST = 43002
EMPTY_CONTENT = 44004
CONTENT_TOO_LARGE = 45002
FREQUENCY_LIMIT = 45009
DATA_FORMAT_ERROR = 47001
IP_NOT_ALLOWED = 60020
ALL_RECIPIENTS_INVALID = 81013
INVALID_WEBHOOK_KEY = 93000

MESSAGES: dict[int, str] = {
    OK: "ok",
    BUSY: "system busy",
    INVALID_SECRET: "invalid credential",
    INVALID_MSGTYPE: "invalid message type",
    INVALID_CORPID: "invalid corpid",
    INVALID_TOKEN: "invalid access_token",
    INVALID_AGENTID: "invalid agentid",
    INVALID_PARAMETER: "invalid Request Parameter",
    MISSING_TOKEN: "access_token missing",
    MISSING_CORPID: "corpid missing",
    MISSING_SECRET: "corpsecret missing",
    MISSING_AGENTID: "agentid missing",
    TOKEN_EXPIRED: "access_token expired",
    TASK_ID_INVALID: "taskid has existed or empty or exceed max len",
    REQUIRE_POST: "require POST method",
    EMPTY_CONTENT: "empty content",
    CONTENT_TOO_LARGE: "content size out of limit",
    FREQUENCY_LIMIT: "api freq out of limit",
    DATA_FORMAT_ERROR: "data format error",
    IP_NOT_ALLOWED: "not allow to access from your ip",
    ALL_RECIPIENTS_INVALID: "user & party & tag all invalid",
    INVALID_WEBHOOK_KEY: "invalid webhook url",
    45033: "api concurrent out of limit",
    6000: "data version conflict",
    40091: "secret is invalid",
    50003: "application is disabled",
    48002: "api forbidden",
    301002: "not allow operate another agent with this accesstoken",
    82001: "all touser invalid",
}


def message(errcode: int, detail: str = "") -> str:
    """WeCom's errmsg for ``errcode``, with ``detail`` first as WeCom words it."""
    base = MESSAGES.get(errcode, "sandbox injected error")
    return f"{detail}. {base}" if detail else base
