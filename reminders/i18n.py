"""Translating what may be said before Django has loaded the apps.

``gettext`` reads the installed apps' catalogs, so before the app registry knows them
it raises ``AppRegistryNotReady``. A setting or a kind's policy can be found wrong that
early: a ``Policy`` is checked when it is built, and a CRM's kinds are built when its
modules are imported. Their errors are written with ``early_gettext``, which says them in
English until the apps are known, so that the error raised is theirs, not the
translation machinery's; afterwards (the system checks, a command, a request) it is
``gettext``.
"""

from __future__ import annotations

from django.apps import apps
from django.utils.translation import gettext


def early_gettext(message: str) -> str:
    """``gettext(message)``, or ``message`` itself while the apps are not yet known."""
    if not apps.apps_ready:
        return message
    return gettext(message)
