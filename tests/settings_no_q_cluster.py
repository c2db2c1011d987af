"""The test settings as a CRM that runs no django-q2 of its own: no ``Q_CLUSTER``, and
the apps in the order the README gives (``reminders`` before ``django_q``)."""

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS

del Q_CLUSTER  # noqa: F821

_ENGINE = ["django_q", "reminders", "ops"]
INSTALLED_APPS = [app for app in INSTALLED_APPS if app not in _ENGINE]
INSTALLED_APPS[-1:-1] = ["reminders", "ops", "django_q"]
