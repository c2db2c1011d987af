"""The generic gateway's templates (``HttpSender``'s ``OPTIONS``): filled from a message
(``{recipient}``, ``{content}``, ``{msgtype}``, ``{key}``, ``{token}``) and from the
environment (``${NAME}``), dotted paths into the JSON they make and the replies they
get, and the secrets they carry.

Invariants: an environment variable is read when a template is filled, never copied
at import or when the sender is built, so that secrets stay out of the settings
module; one that is not set is a ``ConfigurationSendError``, as is a template that
cannot be filled. Every value a template takes from the environment, and every value
under a name that says credential, counts as a secret to mask.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

from ..exceptions import ConfigurationSendError
from .base import SECRET_NAME, Message

ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def dig(data: Any, path: str) -> Any:
    """The value at dotted ``path`` (``"result.items.0.id"``), or ``None``."""
    for part in path.split("."):
        if isinstance(data, dict):
            data = data.get(part)
        elif isinstance(data, list) and part.lstrip("-").isdigit():
            index = int(part)
            data = data[index] if -len(data) <= index < len(data) else None
        else:
            return None
    return data


def set_path(data: dict[str, Any], path: str, value: Any) -> None:
    parts = path.split(".")
    for part in parts[:-1]:
        data = data.setdefault(part, {})
    data[parts[-1]] = value


def expand_env(value: str, *, what: str) -> str:
    """``value`` with each ``${NAME}`` replaced by that environment variable."""

    def lookup(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in os.environ:
            raise ConfigurationSendError(
                f"{what} needs the environment variable {name}, which is not set.", code="env"
            )
        return os.environ[name]

    return ENV_REFERENCE.sub(lookup, value)


def render(template: Any, values: Mapping[str, str], *, what: str) -> Any:
    if isinstance(template, dict):
        return {key: render(item, values, what=what) for key, item in template.items()}
    if isinstance(template, list):
        return [render(item, values, what=what) for item in template]
    if isinstance(template, str):
        try:
            return expand_env(template, what=what).format_map(values)
        except (KeyError, IndexError, ValueError, AttributeError) as exc:
            raise ConfigurationSendError(
                f"{what}: cannot fill template {template!r}: {type(exc).__name__} {exc}",
                code="template",
            ) from None
    return template


def message_content(message: Message) -> str:
    """The text of a message, whatever its type: what a text-only gateway can carry."""
    body = message.body
    if isinstance(body.get("content"), str):
        return str(body["content"])
    lines = [str(body[name]) for name in ("title", "description", "url") if body.get(name)]
    return "\n".join(lines) if lines else message.rendered


def env_values(*templates: Any) -> Iterator[str]:
    """The values of the environment variables ``templates`` name as ``${NAME}``, in
    their strings at any depth (keys included); unset ones have none."""
    for template in templates:
        if isinstance(template, Mapping):
            yield from env_values(*template.keys(), *template.values())
        elif isinstance(template, list | tuple):
            yield from env_values(*template)
        elif isinstance(template, str):
            for name in ENV_REFERENCE.findall(template):
                value = os.environ.get(name)
                if value:
                    yield value


def url_secrets(url: str) -> list[str]:
    """The password and the query values of ``url``: where URLs carry credentials."""
    if not url:
        return []
    parts = urlsplit(url)
    found = [parts.password or ""]
    found += [value for _, _, value in (pair.partition("=") for pair in parts.query.split("&"))]
    return [item for item in found if item]


def rendered_secrets(template: Any, rendered: Any, *, secret: bool = False) -> list[str]:
    """The values of a rendered login body to mask: those under a key that names a
    credential, and those read from the environment."""
    if isinstance(template, dict) and isinstance(rendered, dict):
        return [
            leaf
            for name, item in template.items()
            for leaf in rendered_secrets(
                item, rendered.get(name), secret=secret or bool(SECRET_NAME.search(str(name)))
            )
        ]
    if isinstance(template, list) and isinstance(rendered, list):
        return [
            leaf
            for item, done in zip(template, rendered, strict=False)
            for leaf in rendered_secrets(item, done, secret=secret)
        ]
    if isinstance(template, str) and isinstance(rendered, str):
        return [rendered] if secret or ENV_REFERENCE.search(template) else []
    return []
