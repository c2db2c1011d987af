"""The WeCom sandbox as an app of its own: a development tool (``manage.py
wecom_sandbox``, and ``WeComSandbox`` for the tests), kept out of the installable
``reminders`` and ``ops`` apps so that no CRM that installs them carries it.

pyproject.toml packages ``reminders`` and ``ops`` only, so the wheel holds none of it
(bin/check-dist refuses a wheel that does); only the standalone project
(``config.settings``) and the tests list it in INSTALLED_APPS. It has no models: it
adds the command and its translations (``wecom_sandbox/locale``). Neither ``reminders``
nor ``ops`` imports it; it imports ``reminders`` (the callback's crypto, to post clicks
as WeCom does)."""

from django.apps import AppConfig


class WeComSandboxConfig(AppConfig):
    name = "wecom_sandbox"
    verbose_name = "WeCom sandbox"
