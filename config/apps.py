"""The standalone project as an app of its own: what only ``make run`` needs (the demo
data, ``reminders_demo``), kept out of the installable ``reminders`` and ``ops`` apps so
that no CRM that installs them ever has it. pyproject.toml packages ``reminders`` and
``ops`` only; ``config`` is listed in INSTALLED_APPS of ``config.settings`` alone."""

from django.apps import AppConfig


class StandaloneConfig(AppConfig):
    name = "config"
    label = "standalone"
    verbose_name = "Standalone project"
