"""What the management commands of ``reminders`` and ``ops`` share."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.utils.translation import gettext


class TranslatedCommand(BaseCommand):
    """A command whose ``help`` is marked with ``gettext_noop``, and said in the language
    active when its parser is built (a command's: ``LANGUAGE_CODE``). Not
    ``gettext_lazy``: argparse takes text only. Its options' help is translated in
    ``add_arguments``, which that same parser-building calls."""

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        self.help = gettext(self.help)
        return super().create_parser(prog_name, subcommand, **kwargs)
