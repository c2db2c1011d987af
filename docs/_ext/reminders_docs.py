"""Reference pages generated from the code, so that they cannot drift from it.

Directives, each taking one argument:

``{settings-table} reminders.conf``
    The module's ``SETTINGS`` table (``Setting(name, default, summary)``) as a table of
    setting, default and meaning.
``{django-command} run_reminders``
    A management command: what it does and each argument its ``add_arguments`` defines,
    with its help (in English), as ``manage.py <command> --help`` says them.
``{signature} reminders.api.schedule``
    A function's parameters and defaults, without annotations.
``{choices} reminders.models.TaskRun.Status``
    A ``TextChoices``' values and their English labels.
``{exceptions} reminders.exceptions``
    The exception classes a module defines, each with its bases and the first sentence
    of its docstring.

Each renders Markdown and parses it in the page, so it reads as the hand-written pages.
"""

from __future__ import annotations

import argparse
import copy
import getpass
import inspect
from importlib import import_module
from typing import Any

from django.core.management import get_commands, load_command_class
from django.core.management.base import CommandParser
from django.utils import translation
from docutils import nodes
from docutils.parsers.rst import Directive
from docutils.statemachine import StringList
from sphinx.application import Sphinx


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


class MarkdownDirective(Directive):
    required_arguments = 1
    has_content = False

    def markdown(self) -> list[str]:
        raise NotImplementedError

    def run(self) -> list[nodes.Node]:
        with translation.override("en"):
            lines = self.markdown()
        container = nodes.container()
        source = self.state.document.current_source or ""
        self.state.nested_parse(
            StringList(lines, items=[(source, self.lineno)] * len(lines)),
            self.content_offset,
            container,
        )
        return container.children


class SettingsTable(MarkdownDirective):
    """The settings a module declares in its ``SETTINGS`` table."""

    def markdown(self) -> list[str]:
        module = __import__(self.arguments[0], fromlist=["SETTINGS"])
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
            name = action.metavar or action.dest
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


class DjangoCommand(MarkdownDirective):
    """A management command's purpose and arguments, from its parser."""

    def markdown(self) -> list[str]:
        name = self.arguments[0]
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


class Signature(MarkdownDirective):
    """``name(parameters)`` of a function, defaults included, annotations left out."""

    def markdown(self) -> list[str]:
        func = resolve(self.arguments[0])
        parameters = [
            parameter.replace(annotation=inspect.Parameter.empty)
            for parameter in inspect.signature(func).parameters.values()
        ]
        signature = inspect.Signature(parameters)
        return ["```python", f"{func.__name__}{signature}", "```"]


class Choices(MarkdownDirective):
    """A ``TextChoices``' values and labels."""

    def markdown(self) -> list[str]:
        choices = resolve(self.arguments[0])
        lines = ["| value | label |", "|---|---|"]
        lines += [f"| {code(choice.value)} | {cell(choice.label)} |" for choice in choices]
        return lines


class Exceptions(MarkdownDirective):
    """The exception tree of a module."""

    def markdown(self) -> list[str]:
        module = import_module(self.arguments[0])
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


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("settings-table", SettingsTable)
    app.add_directive("django-command", DjangoCommand)
    app.add_directive("signature", Signature)
    app.add_directive("choices", Choices)
    app.add_directive("exceptions", Exceptions)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
