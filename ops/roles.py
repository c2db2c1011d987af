"""Two roles for ops staff, as Django groups kept in step with the models.

* ``ops_viewer`` (Ops viewer): sees every model of ``reminders`` and ``ops`` in the
  admin, and changes nothing.
* ``ops_operator`` (Ops operator): what a viewer sees, and may retry runs and mark them
  handled, pause and resume tasks and run them now, recall a sent message
  (``recall_sendlog``: take it back from its recipient, within the channel's window,
  for a reason the ledger keeps), change a recipient's preferences on their behalf
  and their quiet hours (``add_preference``, ``change_preference``, ``add_quiethours``,
  ``change_quiethours``: every change kept with who and why), and
  edit the working-day calendar
  (``edit_calendarday``: its days and years, entered when the official schedule is
  published), and mute an alert's group for an hour from its WeCom card
  (``ops.mute_alert``). It may not edit a task's fields (nor cancel it, which is an edit), delete
  anything else or add a task.

Neither sees ``ProviderToken``: it holds the providers' access tokens, which are
secrets (the admin does not list it either).

A group's name is the role's codename, which code and people find it by and which
never changes; its label (``Role.label``) is the translatable name said to people.

Invariant: after every ``migrate`` (the ``post_migrate`` of this app) and every
``manage.py ops_roles``, each group holds exactly its role's permissions: a model added
later brings its view permission in, a permission added to one of these groups by hand
is taken out again (make a group of your own for another mix). Both are idempotent, and
create the two apps' permissions first, so the order of ``INSTALLED_APPS`` does not
matter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.apps import AppConfig
from django.apps import apps as global_apps
from django.contrib.auth.management import create_permissions
from django.contrib.auth.models import Group, Permission
from django.db import DEFAULT_DB_ALIAS, router
from django.db.models import QuerySet
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

if TYPE_CHECKING:
    from django.utils.functional import _StrPromise

# The apps whose models the roles see.
ROLE_APPS = ("reminders", "ops")
# Models no role sees: secrets.
HIDDEN_MODELS = ("reminders.providertoken",)

VIEWER = "ops_viewer"
OPERATOR = "ops_operator"


@dataclass(frozen=True)
class Role:
    """A group: its stable codename (the group's name), what people call it, and the
    permissions it holds beyond viewing (``app_label.codename``)."""

    codename: str
    label: str | _StrPromise
    actions: tuple[str, ...] = ()


ROLES = (
    Role(VIEWER, _("Ops viewer")),
    Role(
        OPERATOR,
        _("Ops operator"),
        actions=(
            "reminders.retry_taskrun",
            "reminders.mark_handled_taskrun",
            "reminders.pause_scheduledtask",
            "reminders.run_now_scheduledtask",
            "reminders.recall_sendlog",
            "reminders.edit_calendarday",
            "reminders.add_preference",
            "reminders.change_preference",
            "reminders.add_quiethours",
            "reminders.change_quiethours",
            "ops.mute_alert",
        ),
    ),
)


def view_permissions(using: str = DEFAULT_DB_ALIAS) -> QuerySet[Permission]:
    """The view permission of every model of ``ROLE_APPS`` but ``HIDDEN_MODELS``."""
    visible = Permission.objects.db_manager(using).filter(
        content_type__app_label__in=ROLE_APPS, codename__startswith="view_"
    )
    for hidden in HIDDEN_MODELS:
        app_label, model = hidden.split(".")
        visible = visible.exclude(content_type__app_label=app_label, content_type__model=model)
    return visible


def permissions_of(role: Role, using: str = DEFAULT_DB_ALIAS) -> tuple[list[Permission], list[str]]:
    """What ``role``'s group holds: the view permissions and its actions'; and the
    actions' permissions that do not exist (yet: a database migrated only part of the
    way), which it cannot hold."""
    found = {
        f"{permission.content_type.app_label}.{permission.codename}": permission
        for permission in Permission.objects.db_manager(using)
        .filter(content_type__app_label__in=ROLE_APPS)
        .select_related("content_type")
    }
    held = [*view_permissions(using), *(found[name] for name in role.actions if name in found)]
    return held, [name for name in role.actions if name not in found]


@dataclass(frozen=True)
class Synced:
    """What ``sync_roles`` left a role's group with."""

    role: Role
    held: int
    missing: list[str]


def sync_roles(using: str = DEFAULT_DB_ALIAS) -> list[Synced]:
    """Create each role's group if missing and set its permissions to exactly the
    role's (those that exist: the others are said in ``Synced.missing``)."""
    synced = []
    for role in ROLES:
        group, _created = Group.objects.db_manager(using).get_or_create(name=role.codename)
        permissions, missing = permissions_of(role, using)
        group.permissions.set(permissions)
        synced.append(Synced(role, len(permissions), missing))
    return synced


def sync_after_migrate(
    sender: AppConfig,
    *,
    using: str = DEFAULT_DB_ALIAS,
    apps: Any = global_apps,
    verbosity: int = 1,
    **kwargs: Any,
) -> None:
    """``post_migrate`` of the ops app: the roles' apps' permissions, then the roles."""
    if not router.allow_migrate_model(using, Group):
        return
    for label in ROLE_APPS:
        create_permissions(global_apps.get_app_config(label), verbosity=0, using=using, apps=apps)
    for synced in sync_roles(using):
        if synced.missing and verbosity:
            # Migrated part of the way: a later migrate brings the rest.
            lacks = gettext("%(role)s lacks %(permissions)s for now.") % {
                "role": synced.role.codename,
                "permissions": ", ".join(synced.missing),
            }
            print(f"  {lacks}")
