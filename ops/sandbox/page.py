"""The page at ``/sandbox/``: what arrived, newest first, refreshing itself."""

from __future__ import annotations

import time
from html import escape
from typing import Any

from .ledger import LedgerEntry

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;width:100%}th,td{border-bottom:1px solid #ddd;padding:4px 8px;
text-align:left;vertical-align:top}th{background:#f4f4f4}
.delivered{color:#0a0}.suppressed{color:#a60}.rejected{color:#c00}
pre{margin:0;white-space:pre-wrap;word-break:break-word;max-width:60em}
code{background:#f4f4f4;padding:0 3px}.muted{color:#777}
"""

CLIP = 1500


def render(
    base_url: str,
    settings: dict[str, Any],
    counters: dict[str, int],
    entries: list[LedgerEntry],
    refresh: int,
) -> bytes:
    faults = {k: v for k, v in settings["faults"].items() if v not in (0, 0.0, [], None, 500)}
    rates = {k: v for k, v in faults.pop("rates", {}).items() if v and k != "seed"}
    if rates:
        faults["random"] = {**rates, "seed": settings["faults"]["rates"]["seed"]}
    head = f'<meta http-equiv="refresh" content="{refresh}">' if refresh > 0 else ""
    summary = ", ".join(f"{escape(k)}: {v}" for k, v in counters.items()) or "nothing yet"
    rows = "\n".join(_row(entry) for entry in entries) or (
        '<tr><td colspan="6" class="muted">No messages yet.</td></tr>'
    )
    html = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>WeCom sandbox</title>{head}<style>{STYLE}</style></head>
<body>
<h1>WeCom sandbox</h1>
<p>Point the sender at it with <code>WECOM_API_BASE={escape(base_url)}</code>.
Corp id <code>{escape(settings["corp_id"])}</code>, agent id <code>{settings["agent_id"]}</code>,
robots {escape(", ".join(settings["robots"]) or "none")}; rate limit
{escape(str(settings["rate_limit"] or "none"))}/s; member limits
{escape(", ".join(settings["user_limits"]) or "none")}; token TTL {settings["token_ttl"]:g} s.</p>
<p>Faults pending: {escape(repr(faults)) if faults else "none"}.
Invalid users: {escape(", ".join(settings["invalid_users"]) or "none")}.</p>
<p class="muted">{summary}. JSON: <a href="/sandbox/messages">messages</a>,
<a href="/sandbox/stats">stats</a>, <a href="/sandbox/control">control</a>.</p>
<table><tr><th>#</th><th>time</th><th>to</th><th>type</th><th>outcome</th><th>content</th></tr>
{rows}
</table></body></html>"""
    return html.encode()


def _row(entry: LedgerEntry) -> str:
    when = time.strftime("%H:%M:%S", time.localtime(entry.at))
    if entry.endpoint == "webhook/send":
        to = f"robot {entry.robot}"
        if entry.mentioned_list:
            to += f" (@{', @'.join(entry.mentioned_list)})"
    else:
        to = "|".join(entry.delivered_to or entry.suppressed_to or entry.touser) or "-"
    outcome = entry.status
    if entry.errcode not in (None, 0):
        outcome += f" {entry.errcode}"
    if entry.http_status != 200:
        outcome += f" HTTP {entry.http_status}"
    notes = [
        note
        for flag, note in (
            (entry.invaliduser, f"invalid: {'|'.join(entry.invaliduser)}"),
            (
                entry.suppressed_to and entry.delivered,
                f"suppressed: {'|'.join(entry.suppressed_to)}",
            ),
            (entry.truncated, "truncated"),
            (entry.reply_lost, "reply lost"),
            (entry.reply_delay, f"reply after {entry.reply_delay:g} s"),
            (entry.recalled, "recalled"),
        )
        if flag
    ]
    content = entry.content if len(entry.content) <= CLIP else entry.content[:CLIP] + "…"
    if not entry.delivered and entry.status != "suppressed":
        content = entry.errmsg
    return (
        f"<tr><td>{entry.id}</td><td>{when}</td><td>{escape(to)}</td>"
        f"<td>{escape(entry.msgtype or entry.endpoint)}</td>"
        f'<td class="{entry.status}">{escape(outcome)}'
        f"{'<br><span class=muted>' + escape('; '.join(notes)) + '</span>' if notes else ''}</td>"
        f"<td><pre>{escape(content)}</pre></td></tr>"
    )
