from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class RemindersConfig(AppConfig):
    name = "reminders"
    verbose_name = _("Reminders")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks, senders  # noqa: F401 - registers checks and the settings hook
