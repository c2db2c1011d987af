"""The sandbox's limits and pending faults in words, for its page, in the language the
page is asked in (``wecom_sandbox.server`` activates the browser's, else
``LANGUAGE_CODE``).

Both read what ``/sandbox/control`` answers (``SandboxState.describe()``), so the page
and the JSON never disagree. Each is a list of phrases, one per limit or fault, in the
order the sandbox applies them to a send (an HTTP error before busy before an errcode);
an empty list of faults means every send is answered as WeCom answers it. Limits are
said as counts a period ("30 messages a minute"), never as ``COUNT/SECONDS``; rates as
percentages; nothing is a Python literal. Plain text: the page escapes it. Every phrase
is one message of the catalog, whole (its numbers as placeholders), so that a language
whose order differs from English's says it in its own.
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from .limits import Window

FREQUENCY = "errcode 45009"


def limits(settings: dict[str, Any]) -> list[str]:
    """What the sandbox refuses beyond WeCom's own checks of a request."""
    robot = [settings["robot_limit"]] if settings["robot_limit"] else []
    said = [
        _("app sends: %(limit)s")
        % {"limit": _rate(settings["rate_limit"], settings["rate_burst"])},
        _("each member: %(limit)s") % {"limit": _windows(settings["user_limits"])},
        _("each robot: %(limit)s") % {"limit": _windows(robot)},
        _("an access token lives %(seconds)s s") % {"seconds": f"{settings['token_ttl']:,g}"},
        _("a text or textcard over WeCom's length limit is cut to it, as WeCom does")
        if settings["overflow"] == "truncate"
        else _("a text or textcard over WeCom's length limit is refused (errcode 45002)"),
    ]
    if settings.get("clock_offset"):
        said.append(
            _("the sandbox's clock runs %(seconds)s s ahead")
            % {"seconds": f"{settings['clock_offset']:,g}"}
        )
    return said


def faults(settings: dict[str, Any]) -> list[str]:
    """The faults that will strike: counted ones ("the next N"), then random ones."""
    pending = settings["faults"]
    status = pending["http_status"]
    then = _(", then ")
    errcodes = then.join(str(code) for code in pending["errcodes"])
    gettoken = then.join(str(code) for code in pending["gettoken_errcodes"])
    said = [
        _next(
            pending["http_errors"],
            ngettext(
                "the next send is answered HTTP %(status)s",
                "the next %(count)s sends are answered HTTP %(status)s",
                pending["http_errors"],
            ),
            status=status,
        ),
        _next(
            pending["busy"],
            ngettext(
                "the next send is answered busy (errcode -1)",
                "the next %(count)s sends are answered busy (errcode -1)",
                pending["busy"],
            ),
        ),
        _next(
            len(pending["errcodes"]),
            ngettext(
                "the next send is answered errcode %(codes)s",
                "the next %(count)s sends are answered errcode %(codes)s",
                len(pending["errcodes"]),
            ),
            codes=errcodes,
        ),
        _next(
            pending["lost_replies"],
            ngettext(
                "the reply to the next send is lost after the send took effect",
                "the replies to the next %(count)s sends are lost after the send took effect",
                pending["lost_replies"],
            ),
        ),
        _slow(pending["delay"], pending["slow"]),
        _next(
            len(pending["gettoken_errcodes"]),
            ngettext(
                "the next gettoken is answered errcode %(codes)s",
                "the next %(count)s gettokens are answered errcode %(codes)s",
                len(pending["gettoken_errcodes"]),
            ),
            codes=gettoken,
        ),
        _random(pending["rates"], status),
    ]
    return [phrase for phrase in said if phrase]


def _rate(rate: float | None, burst: float | None) -> str:
    if not rate:
        return _("no limit a second")
    return _(
        "at most %(rate)s a second over all members, in bursts of up to %(burst)s (%(frequency)s)"
    ) % {"rate": f"{rate:,g}", "burst": f"{burst or rate:,g}", "frequency": FREQUENCY}


def _windows(texts: list[str]) -> str:
    """``["30/60", "1000/3600"]`` as "at most 30 messages a minute and 1,000 an hour"."""
    if not texts:
        return _("no limit")
    windows = [Window.parse(text) for text in texts]
    counts = _per(windows[0], first=True)
    for window in windows[1:]:
        counts = _("%(these)s and %(that)s") % {"these": counts, "that": _per(window, first=False)}
    return _("at most %(counts)s (%(frequency)s)") % {"counts": counts, "frequency": FREQUENCY}


def _per(window: Window, *, first: bool) -> str:
    """A window's count and period: "30 messages a minute" first, "1,000 an hour" after."""
    periods = (
        {
            1.0: _("%(count)s messages a second"),
            60.0: _("%(count)s messages a minute"),
            3600.0: _("%(count)s messages an hour"),
            86400.0: _("%(count)s messages a day"),
        }
        if first
        else {
            1.0: _("%(count)s a second"),
            60.0: _("%(count)s a minute"),
            3600.0: _("%(count)s an hour"),
            86400.0: _("%(count)s a day"),
        }
    )
    other = (
        _("%(count)s messages in any %(seconds)s s")
        if first
        else _("%(count)s in any %(seconds)s s")
    )
    said = periods.get(window.seconds, other)
    return said % {"count": f"{window.count:,}", "seconds": f"{window.seconds:,g}"}


def _next(count: int, phrase: str, **values: Any) -> str:
    """``phrase`` (already chosen for ``count``) with its numbers; "" when none is next."""
    if count <= 0:
        return ""
    return phrase % {"count": f"{count:,}", **values}


def _slow(delay: float, slow: int | None) -> str:
    if delay <= 0 or slow == 0:
        return ""
    if slow is None:
        return _("every reply comes %(delay)s s late") % {"delay": f"{delay:g}"}
    phrase = ngettext(
        "the next reply comes %(delay)s s late",
        "the next %(count)s replies come %(delay)s s late",
        slow,
    )
    return _next(slow, phrase, delay=f"{delay:g}")


def _random(rates: dict[str, Any], status: int) -> str:
    """``FaultRates`` as "at random (seed 7): 20% of sends are answered busy ..."."""
    sends = _shares(
        _("%(share)s of sends are answered %(what)s"),
        [(rates["busy"], _("busy (errcode -1)")), (rates["http_error"], f"HTTP {status}")],
    )
    replies = _shares(
        _("%(share)s of replies %(what)s"),
        [
            (rates["lost_reply"], _("are lost after the send took effect")),
            (
                rates["slow_reply"],
                _("come %(delay)s s late") % {"delay": f"{rates['slow_delay']:g}"},
            ),
        ],
    )
    groups = [group for group in (sends, replies) if group]
    if not groups:
        return ""
    return _("at random (seed %(seed)s): %(groups)s") % {
        "seed": rates["seed"],
        "groups": _("; ").join(groups),
    }


def _shares(whole: str, shares: list[tuple[float, str]]) -> str:
    """ "20% of sends are answered busy, 5% HTTP 503": the whole named once, first."""
    said = [(f"{rate * 100:g}%", what) for rate, what in shares if rate]
    if not said:
        return ""
    (share, what), *rest = said
    first = whole % {"share": share, "what": what}
    return _(", ").join(
        [first, *(_("%(share)s %(what)s") % {"share": s, "what": w} for s, w in rest)]
    )
