"""The URL WeCom calls back: clicks on our cards, encrypted (``WECOM_CALLBACK_*``).

Thin: the protocol is ``reminders.callback``'s, the click's effect ``intake.clicks``'.
What is refused, and how, with nothing changed:

* a request without its query values, a body over ``MAX_BODY`` bytes, XML that does not
  parse or lacks a field: 400;
* a signature that does not sign the request with our token, a ciphertext for another
  receive id (corp), a corp or agent not ours, a timestamp further than
  ``REMINDERS_CALLBACK_MAX_SKEW_SECONDS`` from our clock, a nonce seen before (a
  replay), a click by a member who is not the run's recipient: 403;
* a card no sent run of ours has: 404.

Everything else is answered ``success`` at once: the CRM is told of an action later,
by a scheduler (``engine.announce``), so what its receivers do never delays the answer
WeCom waits for (5 seconds) nor makes WeCom retry.
"""

from __future__ import annotations

import logging
import time

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from .callback import crypto, events
from .callback.exceptions import BadSignature, CallbackRefused, WrongReceiveId
from .conf import settings as conf
from .intake import clicks

logger = logging.getLogger(__name__)

# WeCom's callbacks are a few hundred bytes; anything much larger is not one.
MAX_BODY = 64 * 1024
REFUSED = {
    clicks.Outcome.REPLAYED: (403, "replayed"),
    clicks.Outcome.NOT_RECIPIENT: (403, "not the recipient"),
    clicks.Outcome.UNKNOWN_RUN: (404, "unknown card"),
}


def _refuse(status: int, reason: str) -> HttpResponse:
    logger.warning("WeCom callback refused (%d): %s", status, reason)
    return HttpResponse(reason, status=status, content_type="text/plain; charset=utf-8")


@csrf_exempt
@require_http_methods(["GET", "POST"])
def wecom_callback(request: HttpRequest) -> HttpResponse:
    try:
        ours = conf.CALLBACK
    except ImproperlyConfigured as exc:  # system check reminders.E015 says so too
        return _refuse(404, f"the callback is not configured: {exc}")
    if ours is None:
        return _refuse(404, "the callback is not configured")
    try:
        signed = {name: request.GET[name] for name in ("msg_signature", "timestamp", "nonce")}
    except KeyError as exc:
        return _refuse(400, f"missing {exc.args[0]}")
    try:
        if request.method == "GET":
            return _verify_url(ours, signed, request.GET.get("echostr", ""))
        return _receive(ours, signed, request)
    except (BadSignature, WrongReceiveId) as exc:
        return _refuse(403, str(exc))
    except CallbackRefused as exc:
        return _refuse(400, str(exc))


def _verify_url(ours: crypto.Credentials, signed: dict[str, str], echostr: str) -> HttpResponse:
    if not echostr:
        return _refuse(400, "missing echostr")
    plain = crypto.verify_url(ours, echostr=echostr, **signed)
    return HttpResponse(plain, content_type="text/plain; charset=utf-8")


def _receive(
    ours: crypto.Credentials, signed: dict[str, str], request: HttpRequest
) -> HttpResponse:
    # Django reads at most DATA_UPLOAD_MAX_MEMORY_SIZE; a callback is much smaller.
    if len(request.body) > MAX_BODY:
        return _refuse(400, "the body is too large for a callback")
    try:
        timestamp = int(signed["timestamp"])
    except ValueError:
        return _refuse(400, "timestamp is not a number")
    if abs(time.time() - timestamp) > conf.CALLBACK_MAX_SKEW_SECONDS:
        return _refuse(403, "timestamp outside the accepted window: a replay, or a clock off")
    message = events.read_post(ours, body=request.body, **signed)
    if not isinstance(message, events.TemplateCardEvent):
        return HttpResponse("success", content_type="text/plain")  # not ours to act on
    if message.to_user_name != ours.receive_id:
        return _refuse(403, "for another corp")
    agent = str(getattr(django_settings, "WECOM_AGENT_ID", ""))
    if agent and str(message.agent_id) != agent:
        return _refuse(403, "for another app")
    applied = clicks.apply(message, nonce=signed["nonce"], timestamp=timestamp)
    if applied.outcome in REFUSED:
        return _refuse(*REFUSED[applied.outcome])
    return HttpResponse("success", content_type="text/plain")
