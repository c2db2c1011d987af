from django.apps import AppConfig, apps
from django.core.exceptions import ImproperlyConfigured
from django.utils.translation import gettext_lazy as _

from .engine.django_q_owner import adopt_django_q, hide_django_q_admin

# Before django-q2 reads its settings (its app comes after this one): a project with no
# Q_CLUSTER of its own gets the engine's, not django-q2's defaults and their warning.
adopt_django_q()


class RemindersConfig(AppConfig):
    name = "reminders"
    verbose_name = _("Reminders")
    default_auto_field = "django.db.models.BigAutoField"

    def import_models(self) -> None:
        # A task may be about any CRM object (ScheduledTask.about), through the content
        # types framework. Without it importing the models fails with a message that
        # names neither this app nor the fix; this one names both. (A system check could
        # not say it: checks run only once every model has been imported.)
        if not apps.is_installed("django.contrib.contenttypes"):
            raise ImproperlyConfigured(
                "reminders needs 'django.contrib.contenttypes' in INSTALLED_APPS: a task "
                "may be about any CRM object (ScheduledTask.about)."
            )
        super().import_models()

    def ready(self) -> None:
        # Registers the checks and the settings hook.
        from . import checks, senders  # noqa: F401
        from .intake import users  # noqa: F401

        # django-q2's admin, where it is the engine's machinery only (django_q_owner).
        hide_django_q_admin()
