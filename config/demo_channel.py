"""Whether a channel is safe for demo data: one that reaches no real person.

Two are: the console (``ConsoleSender``, which only logs), and a WeCom channel whose
server is the local WeCom sandbox holding this very app. The sandbox is recognised by
asking it (``GET /sandbox/control`` answers its state, with the corp id it serves), never
by a name or a port: a channel whose server does not answer so is refused, and WeCom's
own server is refused without being asked. The question carries no credential.

Anything else (a CRM's own sender, a test double, WeCom itself) is refused: the demo's
every-minute message must never reach a real member.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import requests
from django.utils.translation import gettext as _

from reminders.senders import get_sender
from reminders.senders.console import ConsoleSender
from reminders.senders.robot import WeComRobotSender
from reminders.senders.wecom import DEFAULT_API_BASE, WeComSender

PROBE_PATH = "/sandbox/control"
PROBE_TIMEOUT = 3.0
WECOM_HOST = urlsplit(DEFAULT_API_BASE).hostname


def refusal(alias: str) -> str | None:
    """Why channel ``alias`` must not carry demo data; None when it is safe."""
    sender = get_sender(alias)
    if type(sender) is ConsoleSender:
        return None
    if isinstance(sender, WeComSender | WeComRobotSender):
        corp_id = sender.corp_id if isinstance(sender, WeComSender) else None
        return _sandbox_refusal(sender.api_base, corp_id)
    backend = f"{type(sender).__module__}.{type(sender).__qualname__}"
    return _("its sender %(backend)s is neither the console nor the WeCom sandbox") % {
        "backend": backend
    }


def _sandbox_refusal(api_base: str, corp_id: str | None) -> str | None:
    if urlsplit(api_base).hostname == WECOM_HOST:
        return _("it sends to WeCom's own server (%(url)s), not to the WeCom sandbox") % {
            "url": api_base
        }
    try:
        response = requests.get(api_base + PROBE_PATH, timeout=PROBE_TIMEOUT, allow_redirects=False)
        state = response.json() if response.status_code == 200 else None
    except (requests.RequestException, ValueError):
        state = None
    if not isinstance(state, dict) or not {"corp_id", "faults", "invalid_users"} <= set(state):
        return _(
            "the server at %(url)s is not the WeCom sandbox (it does not answer %(path)s); "
            "start the sandbox first (manage.py wecom_sandbox)"
        ) % {"url": api_base, "path": PROBE_PATH}
    if corp_id is not None and state["corp_id"] != corp_id:
        return _(
            "the WeCom sandbox at %(url)s serves corp %(served)r, not this channel's %(corp)r"
        ) % {"url": api_base, "served": state["corp_id"], "corp": corp_id}
    return None
