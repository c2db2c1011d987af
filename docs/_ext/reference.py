"""The reference pages' generated parts, rendered from the code as Markdown, so that they
cannot drift from it and read as Markdown wherever the pages are read (a code host
included), not only in the built site.

A page marks each part with an HTML comment naming what renders it, and the part ends
at ``<!-- /reference -->``:

``<!-- reference: settings-table reminders.conf -->``
    The module's ``SETTINGS`` table (``Setting(name, default, summary)``) as a table of
    setting, default and meaning.
``<!-- reference: django-command run_reminders -->``
    A management command: what it does and each argument its ``add_arguments`` defines,
    with its help (in English), as ``manage.py <command> --help`` says them.
``<!-- reference: signature reminders.api.schedule -->``
    A function's parameters and defaults, without annotations, as a ``def``.
``<!-- reference: choices reminders.models.TaskRun.Status -->``
    A ``TextChoices``' values and their English labels.
``<!-- reference: exceptions reminders.exceptions -->``
    The exception classes a module defines, each with its bases and the first sentence
    of its docstring.

``bin/reference`` writes them into the pages; ``tests/test_docs.py`` fails when a page
holds anything else than what the code renders now. The site's build reads the pages
as they are: it imports none of the project.
"""

from __future__ import annotations

import argparse
import copy
import getpass
import inspect
import re
from collections.abc import Callable
from importlib import import_module
from typing import Any

from django.core.management import get_commands, load_command_class
from django.core.management.base import CommandParser
from django.utils import translation


def resolve(path: str) -> Any:
    """The object a dotted path names, attributes of attributes included
    (``reminders.models.TaskRun.Status``)."""
    parts = path.split(".")
    for split in range(len(parts), 0, -1):
        try:
            value = import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for name in parts[split:]:
            value = getattr(value, name)
        return value
    raise ImportError(path)


def cell(text: str) -> str:
    """Text fit for a Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def code(text: str) -> str:
    """Inline code, whatever backticks the text holds."""
    text = str(text)
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def shown_default(value: Any) -> str:
    if value is None:
        return code("None")
    if isinstance(value, str) and not value:
        return "empty"
    return code(repr(value))


def settings_table(path: str) -> list[str]:
    """The settings a module declares in its ``SETTINGS`` table."""
    module = import_module(path)
    lines = ["| setting | default | meaning |", "|---|---|---|"]
    for setting in module.SETTINGS:
        default = setting.default_text or shown_default(setting.default)
        lines.append(f"| {code(setting.name)} | {cell(default)} | {cell(setting.summary)} |")
    return lines


# What BaseCommand adds to every command: not the command's own to document.
DJANGO_OPTIONS = {"help"}


def _os_user() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None


def _arguments(parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    formatter = parser._get_formatter()
    rows = []
    for action in parser._actions:
        if action.dest in DJANGO_OPTIONS or isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            continue
        if action.option_strings:
            name = ", ".join(action.option_strings)
            if action.nargs != 0:
                name += f" {action.metavar or action.dest.upper()}"
        else:
            name = str(action.metavar or action.dest)
        if action.default == _os_user():
            # A default of the machine that builds the docs (the user running it) is
            # said in words, not as that machine's value.
            action = copy.copy(action)
            action.default = "the user running it"
        help_text = formatter._expand_help(action) if action.help else ""
        if action.required and action.option_strings:
            help_text += " (required)"
        rows.append((name, help_text))
    return rows


def _table(rows: list[tuple[str, str]]) -> list[str]:
    if not rows:
        return ["No arguments of its own.", ""]
    lines = ["| argument | what |", "|---|---|"]
    lines += [f"| {code(name)} | {cell(text)} |" for name, text in rows]
    return [*lines, ""]


def django_command(name: str) -> list[str]:
    """A management command's purpose and arguments, from its parser."""
    command = load_command_class(get_commands()[name], name)
    parser = CommandParser(prog=f"manage.py {name}", add_help=False)
    command.add_arguments(parser)
    lines = [translation.gettext(command.help).strip(), ""]
    lines += _table(_arguments(parser))
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help for choice in action._choices_actions}
        for sub, subparser in action.choices.items():
            lines += [f"`manage.py {name} {sub}`: {helps.get(sub) or ''}", ""]
            lines += _table(_arguments(subparser))
    return lines


def signature(path: str) -> list[str]:
    """``name(parameters)`` of a function, defaults included, annotations left out."""
    func = resolve(path)
    parameters = [
        parameter.replace(annotation=inspect.Parameter.empty)
        for parameter in inspect.signature(func).parameters.values()
    ]
    shown = inspect.Signature(parameters)
    # Shown, never run (tests/test_docs.py runs a plain python fence): a ``def`` so
    # that it compiles as the shown examples must.
    return ["```{code-block} python", f"def {func.__name__}{shown}: ...", "```"]


def choices(path: str) -> list[str]:
    """A ``TextChoices``' values and labels."""
    values = resolve(path)
    lines = ["| value | label |", "|---|---|"]
    lines += [f"| {code(choice.value)} | {cell(choice.label)} |" for choice in values]
    return lines


def exceptions(path: str) -> list[str]:
    """The exception tree of a module."""
    module = import_module(path)
    lines = ["| exception | is a | what |", "|---|---|---|"]
    for name, value in vars(module).items():
        if not (
            isinstance(value, type)
            and issubclass(value, Exception)
            and value.__module__ == module.__name__
        ):
            continue
        bases = ", ".join(code(base.__name__) for base in value.__bases__)
        summary = (inspect.getdoc(value) or "").split("\n\n")[0]
        lines.append(f"| {code(name)} | {bases} | {cell(summary)} |")
    return lines


RENDERERS: dict[str, Callable[[str], list[str]]] = {
    "settings-table": settings_table,
    "django-command": django_command,
    "signature": signature,
    "choices": choices,
    "exceptions": exceptions,
}

# A part: its opening comment, what the code rendered into it, its closing comment.
PART = re.compile(
    r"^<!-- reference: (?P<kind>[a-z-]+) (?P<arg>\S+) -->\n(?P<body>.*?)^<!-- /reference -->$",
    re.MULTILINE | re.DOTALL,
)


def render(kind: str, arg: str) -> str:
    """What a part holds: the Markdown ``kind`` renders for ``arg``, in English."""
    if kind not in RENDERERS:
        raise ValueError(f"no reference part of kind {kind!r} (known: {sorted(RENDERERS)})")
    with translation.override("en"):
        lines = RENDERERS[kind](arg)
    while lines and not lines[-1]:
        lines = lines[:-1]
    return "\n".join(lines) + "\n"


def refreshed(page: str) -> str:
    """The page with each of its parts rendered anew from the code."""

    def part(match: re.Match[str]) -> str:
        kind, arg = match["kind"], match["arg"]
        # Blank lines around it: a table or a fence starts a block of its own, there
        # and on a code host alike.
        return f"<!-- reference: {kind} {arg} -->\n\n{render(kind, arg)}\n<!-- /reference -->"

    return PART.sub(part, page)
