from django.apps import AppConfig
from django.conf import settings


class CrmConfig(AppConfig):
    name = "crm"

    def ready(self) -> None:
        if hasattr(settings, "Q_CLUSTER"):
            from reminders import signals

            from .jobs import follow_up_sent

            signals.run_sent.connect(follow_up_sent, dispatch_uid="crm.follow_up_sent")
