"""The URL WeCom calls back: clicks on our cards, encrypted (``WECOM_CALLBACK_*``).

Thin: the protocol is ``reminders.callback``'s, the click's effect ``intake.clicks``'.
The GET that verifies the URL and the POST of a message pass the same checks, in the
same order: the query's values (``callback.query``), the time window, the signature,
the ciphertext, then the nonce, kept so that the same request again is a replay. The
GET answers an ``echostr`` only, never another message's plaintext. What is refused,
and how, with nothing changed:

* a request without its query values or with one WeCom never sends (a timestamp that
  is not 1 to 12 digits, a nonce that is not 1 to 64 printable ASCII characters), a GET
  without ``echostr``, a body over ``MAX_BODY`` bytes, XML that does not parse or lacks
  a field: 400, naming what;
* a signature that does not sign the request with our token, a ciphertext for another
  receive id (corp), a corp or agent not ours (``WECOM_AGENT_ID``, else the one agent
  the channels name: ``conf.CALLBACK_AGENT_ID``), a timestamp further than
  ``REMINDERS_CALLBACK_MAX_SKEW_SECONDS`` from our clock, a nonce seen before (a
  replay), an ``echostr`` that decrypts to something else than WeCom's digits, a click
  by a member other than the one the card went to (the run's send log's recipient,
  whatever the task names now; member ids compared whatever their case, as WeCom
  does: ``intake.clicks``): 403;
* a card no sent run of ours has, nor a card another app registered (``card_owners``)
  knows: 404;
* nothing at all while the callback is not set up (neither ``WECOM_CALLBACK_TOKEN`` nor
  ``WECOM_CALLBACK_AES_KEY``): 404;
* anything while a setting the callback reads cannot work (a half set-up, a time window
  that is not a positive number, a setting a click's action reads, such as the tick a
  snooze is due within): 503, naming the setting and why, logged as an error; the
  system checks say so first (``reminders.E015``, ``reminders.E004``). A request met
  with it keeps nothing, its nonce neither, so WeCom's retry is judged again.

Everything else is answered ``success`` at once, a click another app's card owner
declined (the member may not act: recorded, and the card says so) among them: the CRM
is told of an action later, by a scheduler (``engine.announce``), so what its receivers
do never delays the answer WeCom waits for (5 seconds) nor makes WeCom retry. WeCom logs
in nowhere: the view is ``login_not_required``, for a project that adds Django's
``LoginRequiredMiddleware``.
"""

from __future__ import annotations

import logging
import time

from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from .callback import crypto, events, query
from .callback.exceptions import (
    BadSignature,
    CallbackRefused,
    NotAnEchostr,
    StaleRequest,
    WrongReceiveId,
)
from .conf import settings as conf
from .intake import clicks
from .models import CallbackNonce

logger = logging.getLogger(__name__)

# WeCom's callbacks are a few hundred bytes; anything much larger is not one.
MAX_BODY = 64 * 1024
REFUSED = {
    clicks.Outcome.REPLAYED: (403, "replayed"),
    clicks.Outcome.NOT_RECIPIENT: (403, "not the member the card went to"),
    clicks.Outcome.UNKNOWN_RUN: (404, "unknown card"),
    clicks.Outcome.RECALLED: (410, "the card was recalled"),
}
# Refusals of a request that is well-formed but not ours to take: 403 (the rest, 400).
FORBIDDEN = (BadSignature, WrongReceiveId, StaleRequest, NotAnEchostr)


def _refuse(status: int, reason: str) -> HttpResponse:
    logger.warning("WeCom callback refused (%d): %s", status, reason)
    return HttpResponse(reason, status=status, content_type="text/plain; charset=utf-8")


@csrf_exempt
@login_not_required
@require_http_methods(["GET", "POST"])
def wecom_callback(request: HttpRequest) -> HttpResponse:
    try:
        return _answer(request)
    except ImproperlyConfigured as exc:  # a system check says so too (E004, E015, ...)
        logger.error("WeCom callback cannot work (503): %s", exc)
        return HttpResponse(
            f"the callback cannot work as configured: {exc}",
            status=503,
            content_type="text/plain; charset=utf-8",
        )


def _answer(request: HttpRequest) -> HttpResponse:
    ours = conf.CALLBACK
    if ours is None:
        return _refuse(404, "the callback is not configured")
    agent = conf.CALLBACK_AGENT_ID
    window = conf.CALLBACK_MAX_SKEW_SECONDS
    try:
        signed = query.read(request.GET)
        query.check_fresh(signed, now=time.time(), window=window)
        if request.method == "GET":
            return _verify_url(ours, signed, request.GET.get("echostr", ""))
        return _receive(ours, agent, signed, request)
    except FORBIDDEN as exc:
        return _refuse(403, str(exc))
    except CallbackRefused as exc:
        return _refuse(400, str(exc))


def _verify_url(ours: crypto.Credentials, signed: query.Signed, echostr: str) -> HttpResponse:
    if not echostr:
        return _refuse(400, "missing echostr")
    plain = crypto.verify_url(ours, echostr=echostr, **signed.as_kwargs())
    if not CallbackNonce.objects.spend(signed.nonce, signed.seconds):
        return _refuse(*REFUSED[clicks.Outcome.REPLAYED])
    return HttpResponse(plain, content_type="text/plain; charset=utf-8")


def _receive(
    ours: crypto.Credentials, agent: str, signed: query.Signed, request: HttpRequest
) -> HttpResponse:
    # Django reads at most DATA_UPLOAD_MAX_MEMORY_SIZE; a callback is much smaller.
    if len(request.body) > MAX_BODY:
        return _refuse(400, "the body is too large for a callback")
    message = events.read_post(ours, body=request.body, **signed.as_kwargs())
    if not isinstance(message, events.TemplateCardEvent):
        return HttpResponse("success", content_type="text/plain")  # not ours to act on
    if message.to_user_name != ours.receive_id:
        return _refuse(403, "for another corp")
    if agent and str(message.agent_id) != agent:
        return _refuse(403, "for another app")
    applied = clicks.apply(message, nonce=signed.nonce, timestamp=signed.seconds)
    if applied.outcome in REFUSED:
        return _refuse(*REFUSED[applied.outcome])
    return HttpResponse("success", content_type="text/plain")
