"""The sandbox's limits and pending faults in words, for its page.

Both read what ``/sandbox/control`` answers (``SandboxState.describe()``), so the page
and the JSON never disagree. Each is a list of phrases, one per limit or fault, in the
order the sandbox applies them to a send (an HTTP error before busy before an errcode);
an empty list of faults means every send is answered as WeCom answers it. Limits are
said as counts a period ("30 messages a minute"), never as ``COUNT/SECONDS``; rates as
percentages; nothing is a Python literal. Plain text: the page escapes it.
"""

from __future__ import annotations

from typing import Any

from .limits import Window

PERIODS = {1.0: "a second", 60.0: "a minute", 3600.0: "an hour", 86400.0: "a day"}
FREQUENCY = "errcode 45009"


def limits(settings: dict[str, Any]) -> list[str]:
    """What the sandbox refuses beyond WeCom's own checks of a request."""
    said = [
        f"app sends: {_rate(settings['rate_limit'], settings['rate_burst'])}",
        f"each member: {_windows(settings['user_limits'])}",
        f"each robot: {_windows([settings['robot_limit']] if settings['robot_limit'] else [])}",
        f"an access token lives {settings['token_ttl']:,g} s",
        "a text or textcard over WeCom's length limit is "
        + (
            "cut to it, as WeCom does"
            if settings["overflow"] == "truncate"
            else "refused (errcode 45002)"
        ),
    ]
    if settings.get("clock_offset"):
        said.append(f"the sandbox's clock runs {settings['clock_offset']:,g} s ahead")
    return said


def faults(settings: dict[str, Any]) -> list[str]:
    """The faults that will strike: counted ones ("the next N"), then random ones."""
    pending = settings["faults"]
    status = pending["http_status"]
    errcodes = ", then ".join(str(code) for code in pending["errcodes"])
    gettoken = ", then ".join(str(code) for code in pending["gettoken_errcodes"])
    said = [
        _next(pending["http_errors"], "send is", "sends are", f"answered HTTP {status}"),
        _next(pending["busy"], "send is", "sends are", "answered busy (errcode -1)"),
        _next(len(pending["errcodes"]), "send is", "sends are", f"answered errcode {errcodes}"),
        _lost(pending["lost_replies"]),
        _slow(pending["delay"], pending["slow"]),
        _next(
            len(pending["gettoken_errcodes"]),
            "gettoken is",
            "gettokens are",
            f"answered errcode {gettoken}",
        ),
        _random(pending["rates"], status),
    ]
    return [phrase for phrase in said if phrase]


def _rate(rate: float | None, burst: float | None) -> str:
    if not rate:
        return "no limit a second"
    return (
        f"at most {rate:,g} a second over all members, in bursts of up to {burst or rate:,g} "
        f"({FREQUENCY})"
    )


def _windows(texts: list[str]) -> str:
    """``["30/60", "1000/3600"]`` as "at most 30 messages a minute and 1,000 an hour"."""
    if not texts:
        return "no limit"
    counts = [_per(Window.parse(text)) for text in texts]
    first, *rest = counts
    count, _, period = first.partition(" ")
    return f"at most {count} messages {period}{''.join(f' and {c}' for c in rest)} ({FREQUENCY})"


def _per(window: Window) -> str:
    period = PERIODS.get(window.seconds, f"in any {window.seconds:,g} s")
    return f"{window.count:,} {period}"


def _next(count: int, one: str, many: str, what: str) -> str:
    if count <= 0:
        return ""
    return f"the next {one} {what}" if count == 1 else f"the next {count:,} {many} {what}"


def _lost(count: int) -> str:
    if count <= 0:
        return ""
    whose = (
        "the reply to the next send is"
        if count == 1
        else f"the replies to the next {count:,} sends are"
    )
    return f"{whose} lost after the send took effect"


def _slow(delay: float, slow: int | None) -> str:
    if delay <= 0 or slow == 0:
        return ""
    if slow is None:
        return f"every reply comes {delay:g} s late"
    return _next(slow, "reply comes", "replies come", f"{delay:g} s late")


def _random(rates: dict[str, Any], status: int) -> str:
    """``FaultRates`` as "at random (seed 7): 20% of sends are answered busy ..."."""
    sends = _shares(
        "of sends are answered",
        [(rates["busy"], "busy (errcode -1)"), (rates["http_error"], f"HTTP {status}")],
    )
    replies = _shares(
        "of replies",
        [
            (rates["lost_reply"], "are lost after the send took effect"),
            (rates["slow_reply"], f"come {rates['slow_delay']:g} s late"),
        ],
    )
    groups = [group for group in (sends, replies) if group]
    return f"at random (seed {rates['seed']}): {'; '.join(groups)}" if groups else ""


def _shares(whole: str, shares: list[tuple[float, str]]) -> str:
    """ "20% of sends are answered busy, 5% HTTP 503": the whole named once, first."""
    said = [f"{rate * 100:g}% {what}" for rate, what in shares if rate]
    if not said:
        return ""
    share, _, what = said[0].partition(" ")
    return ", ".join([f"{share} {whole} {what}", *said[1:]])
