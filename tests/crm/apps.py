from django.apps import AppConfig


class CrmConfig(AppConfig):
    """A stand-in CRM for the tests: objects a task may be about, with integer, UUID and
    text primary keys, and a profile that holds a user's WeCom member id."""

    name = "tests.crm"
    label = "crm"
    default_auto_field = "django.db.models.BigAutoField"
