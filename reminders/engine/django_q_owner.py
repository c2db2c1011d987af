"""Whose django-q2 this project's is: the engine's alone, or the CRM's too.

The engine runs django-q2 clusters of its own (``reminders.engine.cluster``). The project's own
django-q2 (``Q_CLUSTER``) is the engine's alone where the CRM runs no django-q2 work of
its own: it has no ``Q_CLUSTER``, or one that reads the engine's queue on the engine's
database with django-q2's ORM broker (the standalone project, whose ``qcluster`` runs
the engine's queue). Otherwise it is the CRM's, and the engine never touches it.

Where the engine owns django-q2:

* ``adopt_django_q``: a project with no ``Q_CLUSTER`` gets the engine's cluster
  (``REMINDERS_CLUSTER``) as its ``Q_CLUSTER``, before django-q2 reads it. django-q2
  reads its settings once, when its app is imported, and with none it warns "Retry and
  timeout are misconfigured" on every command about its default cluster, which nobody
  runs. With the engine's settings there is nothing wrong to warn about, and a
  ``manage.py qcluster`` executes the engine's queue as ``run_reminders`` does. It can
  only act when ``reminders`` comes before ``django_q`` in ``INSTALLED_APPS`` (as the
  README lists them): listed after, django-q2 has read its settings already, and this
  changes nothing, so that django-q2 and the settings never disagree.
* ``hide_django_q_admin``: django-q2's own admin ("Scheduled tasks", with Add; "Queued
  tasks", with Delete) is the engine's machinery there: a schedule added in it is never
  run (the engine's clusters run no django-q2 schedules), and a queued job deleted in
  it is a delivery held until its lease expires. So it is unregistered. A CRM's own
  django-q2 keeps its admin; ours names its tasks "scheduled messages" apart from it.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from ..conf import settings as conf

if TYPE_CHECKING:  # imported by the app's module, before any model may be
    from django.contrib.admin import AdminSite

HIGH_QUEUE_SUFFIX = "-high"  # reminders.engine.cluster's; not imported, which imports django-q2
# Keys of a Q_CLUSTER that put its queue on another broker than django-q2's ORM one.
OTHER_BROKERS = ("broker_class", "redis", "iron_mq", "sqs", "mongo", "disque_nodes")


def owns_django_q() -> bool:
    """Whether this project's django-q2 is the engine's alone (see the module)."""
    host: Any = getattr(settings, "Q_CLUSTER", None)
    if host is None:
        return True
    if not isinstance(host, dict) or any(host.get(key) for key in OTHER_BROKERS):
        return False
    cluster = conf.CLUSTER
    queues = {cluster["name"], f"{cluster['name']}{HIGH_QUEUE_SUFFIX}"}
    return host.get("orm") == cluster["orm"] and host.get("name") in queues


def adopt_django_q() -> bool:
    """Give a project with no ``Q_CLUSTER`` the engine's cluster as its own, if
    django-q2 has not read its settings yet; whether it did. Called when the app is
    imported, before django-q2's app is (``RemindersConfig``)."""
    if hasattr(settings, "Q_CLUSTER") or "django_q.conf" in sys.modules:
        return False
    try:
        cluster = conf.CLUSTER
    except ImproperlyConfigured:
        return False  # reminders.checks says why; django-q2 keeps its own defaults
    settings.Q_CLUSTER = {**cluster, "catch_up": False}
    return True


def hide_django_q_admin(site: AdminSite | None = None) -> int:
    """Unregister django-q2's models from ``site`` (the default admin site) where the
    engine owns django-q2; how many were."""
    installed = apps.is_installed("django.contrib.admin") and apps.is_installed("django_q")
    if not installed or not owns_django_q():
        return 0
    if site is None:
        # Registered here if autodiscovery has not imported it yet, so that it cannot
        # register them afterwards.
        import django_q.admin  # noqa: F401
        from django.contrib.admin import site as default_site

        site = default_site
    hidden = 0
    for model in apps.get_app_config("django_q").get_models():
        if site.is_registered(model):
            site.unregister(model)
            hidden += 1
    return hidden
