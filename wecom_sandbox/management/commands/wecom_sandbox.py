"""``manage.py wecom_sandbox``: the local WeCom server API as a process of its own."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError, CommandParser
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from reminders.management.base import TranslatedCommand
from wecom_sandbox import (
    DEV_AGENT_ID,
    DEV_CALLBACK_AES_KEY,
    DEV_CALLBACK_TOKEN,
    DEV_CORP_ID,
    DEV_CORP_SECRET,
    DEV_ROBOT_KEY,
    FaultRates,
    WeComSandbox,
    Window,
)
from wecom_sandbox.config import OVERFLOW_CHOICES, ROBOT_LIMIT, USER_LIMITS


def port(value: str) -> int:
    number = int(value)
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(
            _("%(value)s is not a port (0 picks a free one)") % {"value": value}
        )
    return number


def positive(value: str) -> float:
    number = float(value)
    if number <= 0:
        raise argparse.ArgumentTypeError(_("%(value)s is not a positive number") % {"value": value})
    return number


def rate(value: str) -> float:
    number = float(value)
    if not 0 <= number <= 1:
        raise argparse.ArgumentTypeError(
            _("%(value)s is not a rate within 0..1") % {"value": value}
        )
    return number


def seconds(value: str) -> float:
    number = float(value)
    if not number >= 0:
        raise argparse.ArgumentTypeError(
            _("%(value)s is not a number of seconds >= 0") % {"value": value}
        )
    return number


def window(value: str) -> Window | None:
    if value.lower() == "none":
        return None
    try:
        return Window.parse(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_server_arguments(parser: CommandParser) -> None:
    """Where it listens, and the corp and the app it plays."""
    parser.add_argument("--host", default="127.0.0.1", help=_("(default: %(default)r)"))
    parser.add_argument(
        "--port", type=port, default=8900, help=_("0 picks a free port (default: %(default)r)")
    )
    parser.add_argument(
        "--corp-id", default=None, help=_("(default: WECOM_CORP_ID, else a development id)")
    )
    parser.add_argument(
        "--corp-secret",
        default=None,
        help=_("(default: WECOM_CORP_SECRET, else a development secret; never printed)"),
    )
    parser.add_argument(
        "--agent-id", default=None, help=_("(default: WECOM_AGENT_ID, else a development id)")
    )


def _add_app_arguments(parser: CommandParser) -> None:
    """The app's pace and its tokens' life, and the robots' keys."""
    parser.add_argument(
        "--rate-limit",
        type=positive,
        default=None,
        help=_("app sends a second over all members, beyond which 45009 (default: no limit)"),
    )
    parser.add_argument(
        "--rate-burst",
        type=positive,
        default=None,
        help=_("token bucket size of --rate-limit (default: one second's worth)"),
    )
    parser.add_argument(
        "--token-ttl",
        type=positive,
        default=7200.0,
        help=_("seconds an access token lives (default: %(default)r)"),
    )
    parser.add_argument(
        "--robot-key",
        action="append",
        dest="robot_keys",
        default=None,
        help=_(
            "a group-robot webhook key; repeat for several "
            "(default: WECOM_ROBOT_KEY, else a development key)"
        ),
    )


def _add_limit_arguments(parser: CommandParser) -> None:
    """What it refuses: beyond the members' and the robots' limits, and over WeCom's
    length."""
    parser.add_argument(
        "--user-limit",
        action="append",
        dest="user_limits",
        type=window,
        default=None,
        help=_(
            "per-member limit COUNT/SECONDS, repeatable (default: %(limits)s; 'none' for no limit)"
        )
        % {"limits": ", ".join(str(w) for w in USER_LIMITS)},
    )
    parser.add_argument(
        "--robot-limit",
        type=window,
        default=ROBOT_LIMIT,
        help=_("per-robot limit COUNT/SECONDS or 'none' (default: %(default)s)"),
    )
    parser.add_argument(
        "--overflow",
        choices=OVERFLOW_CHOICES,
        default="truncate",
        help=_(
            "text or textcard over WeCom's limit: cut it as WeCom documents, "
            "or answer 45002 (default: %(default)r)"
        ),
    )


def _add_fault_arguments(parser: CommandParser) -> None:
    """The faults it answers with now and then, and the members that do not exist."""
    parser.add_argument(
        "--busy-rate",
        type=rate,
        default=0.0,
        help=_("chance that a send is answered busy, errcode -1 (default: %(default)r)"),
    )
    parser.add_argument(
        "--http-error-rate",
        type=rate,
        default=0.0,
        help=_("chance that a send is answered HTTP 500 (default: %(default)r)"),
    )
    parser.add_argument(
        "--lost-reply-rate",
        type=rate,
        default=0.0,
        help=_("chance that a reply is lost after the send took effect (default: %(default)r)"),
    )
    parser.add_argument(
        "--slow-reply-rate",
        type=rate,
        default=0.0,
        help=_("chance that a reply comes --slow-reply-delay seconds late (default: %(default)r)"),
    )
    parser.add_argument(
        "--slow-reply-delay",
        type=seconds,
        default=2.0,
        help=_("how late a slow reply comes, seconds (default: %(default)r)"),
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help=_("seed of the random faults: the same seed, the same faults (default: %(default)r)"),
    )
    parser.add_argument(
        "--invalid-user",
        action="append",
        dest="invalid_users",
        default=[],
        help=_("a user id that does not exist; repeatable"),
    )


def _add_callback_arguments(parser: CommandParser) -> None:
    """Where it posts WeCom's callback when a card's button is clicked on its page."""
    parser.add_argument(
        "--callback-url",
        default=None,
        help=_(
            "the app's callback URL, where a click on a card's button is posted as WeCom "
            "posts it (default: none, clicks are off)"
        ),
    )
    parser.add_argument(
        "--callback-token",
        default=None,
        help=_(
            "the callback's token (default: WECOM_CALLBACK_TOKEN, else a development token; "
            "never printed)"
        ),
    )
    parser.add_argument(
        "--callback-aes-key",
        default=None,
        help=_(
            "the callback's EncodingAESKey (default: WECOM_CALLBACK_AES_KEY, else a development "
            "key; never printed)"
        ),
    )


class Command(TranslatedCommand):
    help = gettext_noop(
        "Run the local WeCom sandbox: gettoken, message/send, webhook/send, "
        "message/recall and message/update_template_card as WeCom answers them, with its "
        "limits and fault switches, and a page of what arrived at /sandbox/, where a "
        "card's buttons post WeCom's callback to --callback-url when clicked. Prints "
        "WECOM_API_BASE=<url> first. "
        "Credentials default to WECOM_CORP_ID / WECOM_CORP_SECRET / WECOM_AGENT_ID, "
        "else fixed development values. Stops on SIGTERM or SIGINT."
    )
    # It serves HTTP and touches no database: nothing to check before it starts.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        # In this order in --help.
        _add_server_arguments(parser)
        _add_app_arguments(parser)
        _add_limit_arguments(parser)
        _add_fault_arguments(parser)
        _add_callback_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        verbose = options["verbosity"] >= 2
        if verbose:
            logging.getLogger("wecom_sandbox").setLevel(logging.INFO)
        user_limits = options["user_limits"]
        try:
            sandbox = WeComSandbox(
                corp_id=options["corp_id"] or settings.WECOM_CORP_ID or DEV_CORP_ID,
                corp_secret=options["corp_secret"] or settings.WECOM_CORP_SECRET or DEV_CORP_SECRET,
                agent_id=self._agent_id(options["agent_id"]),
                robot_keys=options["robot_keys"]
                or [getattr(settings, "WECOM_ROBOT_KEY", "") or DEV_ROBOT_KEY],
                token_ttl=options["token_ttl"],
                rate_limit=options["rate_limit"],
                rate_burst=options["rate_burst"],
                user_limits=USER_LIMITS
                if user_limits is None
                else [w for w in user_limits if w is not None],
                robot_limit=options["robot_limit"],
                overflow=options["overflow"],
                invalid_users=options["invalid_users"],
                fault_rates=FaultRates(
                    http_error=options["http_error_rate"],
                    busy=options["busy_rate"],
                    lost_reply=options["lost_reply_rate"],
                    slow_reply=options["slow_reply_rate"],
                    slow_delay=options["slow_reply_delay"],
                    seed=options["seed"],
                ),
                verbose=verbose,
                **self._callback(options),
            )
            sandbox.serve_until_signalled(
                options["host"], options["port"], lambda url: self._ready(sandbox, url, options)
            )
        except (OSError, ValueError) as exc:
            raise CommandError(
                _("cannot run the WeCom sandbox: %(error)s") % {"error": exc}
            ) from None
        if options["verbosity"] >= 1:
            delivered = sandbox.stats().get("delivered", 0)
            self.stdout.write(
                _("WeCom sandbox stopped (%(count)d messages delivered)") % {"count": delivered}
            )

    def _agent_id(self, value: str | None) -> int:
        raw = value or settings.WECOM_AGENT_ID or DEV_AGENT_ID
        try:
            return int(raw)
        except ValueError:
            raise CommandError(
                _("the agent id must be a number, got %(value)r") % {"value": raw}
            ) from None

    def _callback(self, options: dict[str, Any]) -> dict[str, Any]:
        url = options["callback_url"]
        token, key = options["callback_token"], options["callback_aes_key"]
        if not url:
            if token or key:
                raise CommandError(_("--callback-token and --callback-aes-key need --callback-url"))
            return {}
        token = token or getattr(settings, "WECOM_CALLBACK_TOKEN", "") or DEV_CALLBACK_TOKEN
        key = key or getattr(settings, "WECOM_CALLBACK_AES_KEY", "") or DEV_CALLBACK_AES_KEY
        return {"callback_url": url, "callback_token": token, "callback_aes_key": key}

    def _ready(self, sandbox: WeComSandbox, base_url: str, options: dict[str, Any]) -> None:
        # The first line is for scripts and tests: they wait for it and read the URL.
        self.stdout.write(f"WECOM_API_BASE={base_url}")
        if options["verbosity"] >= 1:
            settings_now = sandbox.control()
            rate = settings_now["rate_limit"]
            self.stdout.write(
                _(
                    "WeCom sandbox: corp id %(corp_id)s, agent id %(agent_id)s, robots "
                    "%(robots)s, rate limit %(rate)s, token TTL %(ttl)s s"
                )
                % {
                    "corp_id": settings_now["corp_id"],
                    "agent_id": settings_now["agent_id"],
                    "robots": ", ".join(settings_now["robots"]),
                    "rate": _("%(rate)s/s") % {"rate": rate} if rate else _("none"),
                    "ttl": f"{settings_now['token_ttl']:g}",
                }
            )
            self.stdout.write(_("Messages arrive at %(url)s/sandbox/") % {"url": base_url})
            callback = settings_now["callback"]
            if callback:
                self.stdout.write(
                    _("Clicks on a card's buttons are posted to %(url)s") % {"url": callback["url"]}
                )
        self.stdout.flush()
