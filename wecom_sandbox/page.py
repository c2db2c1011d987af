"""The page at ``/sandbox/``: what arrived, newest first, refreshing itself.

A button card is shown as a card (its source, title, description, sub-title text,
horizontal lines and buttons); its buttons are a form posting to ``/sandbox/click``
(disabled, with a hint, while no callback is configured or once the message was
recalled). An update shows what the card became (``class="card-update"``), a recalled
message is struck through (``class="recalled"`` on its row), and the clicks made are
listed under the card with what the callback answered.

Above the messages, the limits that hold and the faults pending, in words
(``wecom_sandbox.words``): never a Python dict or ``COUNT/SECONDS``.

Everything that comes from a request or a callback's answer is escaped, and nothing of
a card becomes a link: a card's URL is shown as text.

Stable hooks for browser tests: each row ``id="entry-<id>"`` (with ``class="recalled"``
once recalled); a card ``div.card`` with ``data-task-id``; its buttons in one
``form.card-buttons`` per card (fields ``entry``, ``user`` and the clicked button's
``key``), each submit button with ``data-key="<key>"``; ``div.no-callback`` for the
hint when clicks are off; ``div.card-update`` for an update (``button.replaced`` for a
``replace_name``, or the new ``div.card``); ``ul.clicks > li.click`` with ``ok`` or
``failed``, ``data-key`` and ``data-status``; ``ul.limits`` and ``ul.faults`` (absent
when none is pending), one ``li`` each.
"""

from __future__ import annotations

import time
from html import escape
from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import pgettext

from . import words
from .ledger import LedgerEntry

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;width:100%}th,td{border-bottom:1px solid #ddd;padding:4px 8px;
text-align:left;vertical-align:top}th{background:#f4f4f4}
.delivered{color:#0a0}.suppressed{color:#a60}.rejected{color:#c00}
pre{margin:0;white-space:pre-wrap;word-break:break-word;max-width:60em}
code{background:#f4f4f4;padding:0 3px}.muted{color:#777}
.card,.card-update{border:1px solid #ccd;border-radius:6px;padding:6px 10px;max-width:36em;
background:#fafbff}.card-update{margin-top:6px;background:#f4fff4}
.card-source{color:#777;font-size:12px}.card-title{font-weight:bold}.card-desc{color:#555}
.card-sub{white-space:pre-wrap;margin:4px 0}.card-lines{margin:4px 0;display:grid;
grid-template-columns:max-content 1fr;gap:0 10px}.card-lines dt{color:#777}.card-lines dd{margin:0}
.card-buttons{margin:6px 0 0}.card-buttons button{margin-right:4px}
.recalled .card,.recalled pre{text-decoration:line-through;opacity:.6}
.clicks{margin:4px 0 0;padding-left:1.2em;font-size:12px}.click.failed{color:#c00}
"""

CLIP = 1500


def render(
    base_url: str,
    settings: dict[str, Any],
    counters: dict[str, int],
    entries: list[LedgerEntry],
    refresh: int,
) -> bytes:
    head = f'<meta http-equiv="refresh" content="{refresh}">' if refresh > 0 else ""
    summary = ", ".join(f"{escape(k)}: {v}" for k, v in counters.items()) or escape(
        _("nothing yet")
    )
    clickable = bool(settings.get("callback"))
    rows = "\n".join(_row(entry, clickable) for entry in entries) or (
        f'<tr><td colspan="6" class="muted">{escape(_("No messages yet."))}</td></tr>'
    )
    none = _("none")
    title = escape(_("WeCom sandbox"))
    point = escape(_("Point the sender at it with %(setting)s.")).replace(
        "%(setting)s", f"<code>WECOM_API_BASE={escape(base_url)}</code>"
    )
    who = (
        escape(_("Corp id %(corp)s, agent id %(agent)s, robots %(robots)s."))
        .replace("%(corp)s", f"<code>{escape(settings['corp_id'])}</code>")
        .replace("%(agent)s", f"<code>{settings['agent_id']}</code>")
        .replace("%(robots)s", escape(", ".join(settings["robots"]) or none))
    )
    invalid = escape(
        _("Invalid users: %(users)s.") % {"users": ", ".join(settings["invalid_users"]) or none}
    )
    callback = escape(_("Callback: %(callback)s.")).replace(
        "%(callback)s", _callback(settings.get("callback"))
    )
    heads = "".join(
        f"<th>{escape(head)}</th>"
        for head in (
            "#",
            pgettext("sandbox messages column", "time"),
            pgettext("sandbox messages column", "to"),
            pgettext("sandbox messages column", "type"),
            pgettext("sandbox messages column", "outcome"),
            pgettext("sandbox messages column", "content"),
        )
    )
    html = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>{head}<style>{STYLE}</style></head>
<body>
<h1>{title}</h1>
<p>{point}
{who}</p>
<p>{escape(_("Limits:"))}</p>{_listed("limits", words.limits(settings))}
<p>{escape(_("Faults pending:"))}{_pending(words.faults(settings))}
<p>{invalid}
{callback}</p>
<p class="muted">{summary}. JSON: <a href="/sandbox/messages">messages</a>,
<a href="/sandbox/stats">stats</a>, <a href="/sandbox/control">control</a>.</p>
<table><tr>{heads}</tr>
{rows}
</table></body></html>"""
    return html.encode()


def refused(status: int, error: str) -> bytes:
    """The answer to a click from the page's form that the sandbox refused."""
    return (
        '<!doctype html><html><head><meta charset="utf-8"><title>Click refused</title>'
        f'</head><body><h1>Click refused ({status})</h1><p class="error">{escape(error)}</p>'
        '<p><a href="/sandbox/">Back to the sandbox</a></p></body></html>'
    ).encode()


def _listed(css: str, phrases: list[str]) -> str:
    # A phrase as a sentence: its stop is the language's ("." or "。").
    items = "".join(
        f"<li>{escape(_('%(phrase)s.') % {'phrase': phrase})}</li>" for phrase in phrases
    )
    return f'<ul class="{css}">{items}</ul>'


def _pending(faults: list[str]) -> str:
    """The rest of the "Faults pending:" paragraph: none, or the list of them."""
    if not faults:
        return f" {escape(_('none; every send is answered as WeCom answers it.'))}</p>"
    return f"</p>{_listed('faults', faults)}"


def _callback(callback: dict[str, Any] | None) -> str:
    if not callback:
        return escape(_("none (start the sandbox with --callback-url to click a card's buttons)"))
    return f"<code>{escape(str(callback['url']))}</code>"


def _row(entry: LedgerEntry, clickable: bool = False) -> str:
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
            (entry.card_update, "card updated"),
        )
        if flag
    ]
    content = entry.content if len(entry.content) <= CLIP else entry.content[:CLIP] + "…"
    if not entry.delivered and entry.status != "suppressed":
        content = entry.errmsg
    card = (entry.request or {}).get("template_card")
    if entry.delivered and entry.msgtype == "template_card" and isinstance(card, dict):
        shown = _card_cell(entry, card, clickable)
    else:
        shown = f"<pre>{escape(content)}</pre>"
    recalled = ' class="recalled"' if entry.recalled else ""
    return (
        f'<tr id="entry-{entry.id}"{recalled}><td>{entry.id}</td><td>{when}</td>'
        f"<td>{escape(to)}</td>"
        f"<td>{escape(entry.msgtype or entry.endpoint)}</td>"
        f'<td class="{entry.status}">{escape(outcome)}'
        f"{'<br><span class=muted>' + escape('; '.join(notes)) + '</span>' if notes else ''}</td>"
        f"<td>{shown}</td></tr>"
    )


def _card_cell(entry: LedgerEntry, card: dict[str, Any], clickable: bool) -> str:
    """The card as its recipients see it now: the card sent (with its buttons for those
    no update covered), what an update made of it, and the clicks."""
    update = entry.card_update
    members = [r for r in entry.delivered_to if ":" not in r]
    via_group = len(members) < len(entry.delivered_to)
    covered = [m for m in members if m in entry.updated_for]
    rest = [m for m in members if m not in entry.updated_for]
    everyone = update is not None and set(entry.delivered_to) <= set(entry.updated_for)
    why_not = ""
    if entry.recalled:
        why_not = _("recalled: nothing to click")
    elif not clickable:
        why_not = _("no callback configured: start the sandbox with --callback-url to click")
    parts = []
    new_card = update.get("template_card") if update else None
    if not (everyone and isinstance(new_card, dict)):
        buttons = ""
        if not everyone:
            users = rest if update else members
            anyone = via_group and not any(":" in r for r in entry.updated_for)
            buttons = _buttons(entry.id, card, users, anyone, why_not)
        parts.append(_card(card, buttons))
    if update is not None:
        parts.append(_update(entry, update, covered, via_group, why_not))
    if entry.clicks:
        parts.append(_clicks(entry.clicks))
    return "".join(parts)


def _card(card: dict[str, Any], buttons: str) -> str:
    source = card.get("source")
    title = card.get("main_title")
    source = source if isinstance(source, dict) else {}
    title = title if isinstance(title, dict) else {}
    html = [f'<div class="card" data-task-id="{escape(str(card.get("task_id", "")))}">']
    for css, value in (
        ("card-source", source.get("desc")),
        ("card-title", title.get("title")),
        ("card-desc", title.get("desc")),
        ("card-sub", card.get("sub_title_text")),
    ):
        if value:
            html.append(f'<div class="{css}">{escape(str(value))}</div>')
    lines = card.get("horizontal_content_list")
    if isinstance(lines, list) and lines:
        html.append('<dl class="card-lines">')
        for line in lines:
            if isinstance(line, dict):
                value = escape(str(line.get("value") or ""))
                if line.get("url"):
                    value += f' <span class="muted">({escape(str(line["url"]))})</span>'
                html.append(f"<dt>{escape(str(line.get('keyname', '')))}</dt><dd>{value}</dd>")
        html.append("</dl>")
    html.append(buttons)
    html.append("</div>")
    return "".join(html)


def _buttons(
    entry_id: int, card: dict[str, Any], users: list[str], anyone: bool, why_not: str
) -> str:
    """The card's buttons as one form posting to ``/sandbox/click``: the clicked
    button's ``key``, the entry, and who clicks (one of ``users``, or any member id
    for a card sent to a department or tag)."""
    disabled = " disabled" if why_not else ""
    html = [
        '<form class="card-buttons" method="post" action="/sandbox/click">'
        f'<input type="hidden" name="entry" value="{entry_id}">'
    ]
    if anyone:
        first = escape(users[0]) if users else ""
        html.append(
            f'<input name="user" value="{first}" placeholder="member id" required{disabled}> '
        )
    elif len(users) > 1:
        options = "".join(f"<option>{escape(u)}</option>" for u in users)
        html.append(f'<select name="user"{disabled}>{options}</select> ')
    elif users:
        html.append(f'<input type="hidden" name="user" value="{escape(users[0])}">')
    buttons = card.get("button_list")
    for button in buttons if isinstance(buttons, list) else ():
        if not isinstance(button, dict):
            continue
        text = escape(str(button.get("text", "")))
        if button.get("type", 0) == 1:
            url = escape(str(button.get("url", "")))
            html.append(f'<button type="button" disabled title="opens {url}">{text} ↗</button>')
            continue
        key = escape(str(button.get("key", "")))
        html.append(
            f'<button type="submit" name="key" value="{key}" data-key="{key}"{disabled}>'
            f"{text}</button>"
        )
    html.append("</form>")
    if why_not:
        css = "no-callback" if "--callback-url" in why_not else "hint"
        html.append(f'<div class="{css} muted">{escape(why_not)}</div>')
    return "".join(html)


def _update(
    entry: LedgerEntry,
    update: dict[str, Any],
    covered: list[str],
    via_group: bool,
    why_not: str,
) -> str:
    when = time.strftime("%H:%M:%S", time.localtime(float(update.get("at", 0))))
    everyone = set(entry.delivered_to) <= set(entry.updated_for)
    whom = "everyone" if everyone else "|".join(entry.updated_for)
    source = escape(str(update.get("source", "")))
    note = (
        f'<div class="muted">updated at {when} for {escape(whom)} '
        f"(a response code of the {source})</div>"
    )
    new_card = update.get("template_card")
    if isinstance(new_card, dict):
        anyone = via_group and any(":" in r for r in entry.updated_for)
        buttons = _buttons(entry.id, new_card, covered, anyone, why_not)
        return f'<div class="card-update">{note}{_card(new_card, buttons)}</div>'
    name = escape(str(update.get("replace_name", "")))
    return (
        f'<div class="card-update"><button type="button" class="replaced" disabled>{name}'
        f"</button>{note}</div>"
    )


def _clicks(clicks: tuple[dict[str, Any], ...]) -> str:
    items = []
    for click in clicks:
        when = time.strftime("%H:%M:%S", time.localtime(float(click.get("at", 0))))
        status = click.get("status")
        ok = click.get("error") is None and isinstance(status, int) and 200 <= status < 300
        if click.get("error"):
            outcome = f"failed: {click['error']}"
        else:
            body = str(click.get("body", ""))
            outcome = f"HTTP {status}" + (f" {body[:200]!r}" if body else "")
        key = escape(str(click.get("key")))
        items.append(
            f'<li class="click {"ok" if ok else "failed"}" data-key="{key}" '
            f'data-status="{escape(str(status or ""))}">{when} {escape(str(click.get("user")))} '
            f"clicked <code>{key}</code> → {escape(outcome)} "
            f"in {float(click.get('elapsed_ms', 0)):g} ms</li>"
        )
    return f'<ul class="clicks">{"".join(items)}</ul>'
