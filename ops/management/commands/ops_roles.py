"""``python manage.py ops_roles``: create the ops staff's groups and set their
permissions (``ops.roles``). ``migrate`` does the same after every run; this is for a
database migrated before the roles existed, or groups edited by hand."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.contrib.auth.management import create_permissions
from django.core.management.base import CommandParser
from django.db import DEFAULT_DB_ALIAS
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from ops.roles import ROLE_APPS, sync_roles
from reminders.management.base import TranslatedCommand


class Command(TranslatedCommand):
    help = gettext_noop("Create the ops viewer and ops operator groups and set their permissions.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--database", default=DEFAULT_DB_ALIAS, help=_("The database to set them in.")
        )

    def handle(self, *args: Any, database: str = DEFAULT_DB_ALIAS, **options: Any) -> None:
        for label in ROLE_APPS:
            create_permissions(apps.get_app_config(label), verbosity=0, using=database)
        for synced in sync_roles(database):
            role = synced.role
            self.stdout.write(
                _("%(role)s (%(codename)s): %(count)d permissions")
                % {"role": role.label, "codename": role.codename, "count": synced.held}
            )
            if synced.missing:
                without = _("without %(permissions)s: not in the database yet (run migrate).") % {
                    "permissions": ", ".join(synced.missing)
                }
                self.stderr.write(f"  {without}")
