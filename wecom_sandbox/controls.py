"""The switches of ``POST /sandbox/control`` and ``WeComSandbox.control()``.

Each one checks its value (``ValueError`` for a bad one, answered with HTTP 400) and
applies it to the state, under the state's lock.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from . import codes
from .config import CallbackTarget
from .limits import Window

if TYPE_CHECKING:
    from .state import SandboxState


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"expected a count (an integer >= 0), got {value!r}")
    return value


def _seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"expected seconds (a number >= 0), got {value!r}")
    return float(value)


def _errcodes(value: Any) -> list[int]:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise ValueError(f"expected a list of errcodes, got {value!r}")
    return list(value)


def _user_ids(value: Any) -> list[str]:
    if isinstance(value, str):
        value = value.split("|")
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"expected a list of user ids, got {value!r}")
    return [v for v in value if v]


def _set_fault(name: str, parse: Any) -> Any:
    def apply(state: SandboxState, value: Any) -> None:
        setattr(state.faults, name, parse(value))

    return apply


def _http_status(state: SandboxState, value: Any) -> None:
    if not isinstance(value, int) or not 500 <= value <= 599:
        raise ValueError(f"http_status must be a 5xx status, got {value!r}")
    state.faults.http_status = value


def _slow(state: SandboxState, value: Any) -> None:
    state.faults.slow = None if value is None else _count(value)


def _config_error(state: SandboxState, value: Any) -> None:
    state.faults.errcodes = [codes.IP_NOT_ALLOWED] * _count(value)


def _expire_tokens(state: SandboxState, value: Any) -> None:
    if value:
        now = state.now()
        state.tokens = {token: min(expires, now) for token, expires in state.tokens.items()}


def _invalidate_tokens(state: SandboxState, value: Any) -> None:
    if value:
        state.tokens.clear()
        state.current_token = ""


def _invalid_users(state: SandboxState, value: Any) -> None:
    state.invalid_users.update(_user_ids(value))


def _valid_users(state: SandboxState, value: Any) -> None:
    state.invalid_users.difference_update(_user_ids(value))


def _config_switch(name: str, parse: Any) -> Any:
    def apply(state: SandboxState, value: Any) -> None:
        state.config = replace(state.config, **{name: parse(value)})
        if name in ("rate_limit", "rate_burst"):
            state.bucket = state._bucket(state.config)
        if name == "user_limits":
            state.user_limits.clear()
        if name == "robot_limit":
            state.robot_limits.clear()

    return apply


def _optional_rate(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValueError(f"expected a positive number or null, got {value!r}")
    return float(value)


def _positive(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValueError(f"expected a positive number, got {value!r}")
    return float(value)


def _windows(value: Any) -> tuple[Window, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ValueError(f"expected a list such as ['30/60', '1000/3600'], got {value!r}")
    return tuple(Window.parse(str(v)) for v in value)


def _window(value: Any) -> Window | None:
    return None if value is None else Window.parse(str(value))


def _overflow(value: Any) -> str:
    if value not in ("truncate", "reject"):
        raise ValueError(f"overflow must be 'truncate' or 'reject', got {value!r}")
    return str(value)


def _rate(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ValueError(f"expected a rate (a number within 0..1), got {value!r}")
    return float(value)


def _set_rate(name: str, parse: Any) -> Any:
    """A switch of the random faults (``FaultRates``)."""

    def apply(state: SandboxState, value: Any) -> None:
        state.faults.rates = replace(state.faults.rates, **{name: parse(value)})

    return apply


def _seed(state: SandboxState, value: Any) -> None:
    """A new seed: the random faults start its sequence from here."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected an integer seed, got {value!r}")
    state.faults.rates = replace(state.faults.rates, seed=value)
    state.random.seed(value)


def _callback(state: SandboxState, value: Any) -> None:
    """``{"url": ..., "token": ..., "encoding_aes_key": ..., "timeout": 5}`` sets where
    clicks are posted (``timeout`` optional); null turns clicks off."""
    if value is None:
        state.config = replace(state.config, callback=None)
        return
    if not isinstance(value, dict) or not {"url", "token", "encoding_aes_key"} <= set(value):
        raise ValueError("callback takes {url, token, encoding_aes_key[, timeout]} or null")
    unknown = set(value) - {"url", "token", "encoding_aes_key", "timeout"}
    if unknown:
        raise ValueError(f"callback takes no {', '.join(sorted(unknown))}")
    state.config = replace(state.config, callback=CallbackTarget(**value))


def _advance(state: SandboxState, value: Any) -> None:
    state.offset += _seconds(value)


CONTROLS: dict[str, Any] = {
    "busy": _set_fault("busy", _count),
    "http_errors": _set_fault("http_errors", _count),
    "http_status": _http_status,
    "lost_replies": _set_fault("lost_replies", _count),
    "errcodes": _set_fault("errcodes", _errcodes),
    "gettoken_errcodes": _set_fault("gettoken_errcodes", _errcodes),
    "config_error": _config_error,
    "delay": _set_fault("delay", _seconds),
    "slow": _slow,
    "busy_rate": _set_rate("busy", _rate),
    "http_error_rate": _set_rate("http_error", _rate),
    "lost_reply_rate": _set_rate("lost_reply", _rate),
    "slow_reply_rate": _set_rate("slow_reply", _rate),
    "slow_reply_delay": _set_rate("slow_delay", _seconds),
    "seed": _seed,
    "expire_tokens": _expire_tokens,
    "invalidate_tokens": _invalidate_tokens,
    "invalid_users": _invalid_users,
    "valid_users": _valid_users,
    "rate_limit": _config_switch("rate_limit", _optional_rate),
    "rate_burst": _config_switch("rate_burst", _optional_rate),
    "token_ttl": _config_switch("token_ttl", _positive),
    "user_limits": _config_switch("user_limits", _windows),
    "robot_limit": _config_switch("robot_limit", _window),
    "overflow": _config_switch("overflow", _overflow),
    "callback": _callback,
    "advance": _advance,
}

# What a control switch may change: kept aside so that a bad switch changes nothing.
CONTROLLED = (
    "config",
    "faults",
    "invalid_users",
    "tokens",
    "current_token",
    "bucket",
    "user_limits",
    "robot_limits",
    "offset",
    "random",
)


def apply(state: SandboxState, switches: dict[str, Any]) -> dict[str, Any]:
    """Apply fault switches and run-time settings, all or (ValueError) none of them;
    returns the resulting settings and pending faults."""
    unknown = set(switches) - set(CONTROLS)
    if unknown:
        raise ValueError(f"unknown switches: {', '.join(sorted(unknown))}")
    with state.lock:
        saved = {name: copy.copy(getattr(state, name)) for name in CONTROLLED}
        try:
            for name, value in switches.items():
                CONTROLS[name](state, value)
        except ValueError:
            for name, value in saved.items():
                setattr(state, name, value)
            raise
        return state._describe()
