from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class OpsConfig(AppConfig):
    name = "ops"
    verbose_name = _("Operations")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.apps import apps
        from django.db.models.signals import post_migrate

        from reminders.engine import cards
        from reminders.intake import card_owners

        from . import checks, receivers  # noqa: F401 - registers checks and receivers
        from .alert_cards import PREFIX
        from .card_clicks import act, change
        from .models import AlertAction

        # Clicks on alert cards come back through reminders' callback, and their cards
        # are updated as a run's are.
        card_owners.register(PREFIX, act)
        cards.register(AlertAction, change, related=("alert", "card", "card__delivery"))

        # The ops staff's groups follow every migrate (ops.roles), where there are groups.
        if apps.is_installed("django.contrib.auth"):
            from .roles import sync_after_migrate

            post_migrate.connect(sync_after_migrate, sender=self, dispatch_uid="ops.roles")
