"""CRM code at work: a customer is added, its owner is reminded through the engine's
API, and a job of the CRM's own is queued."""

from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone
from django_q.tasks import async_task

from crm.models import Customer, User
from reminders import api


class Command(BaseCommand):
    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("owner")
        parser.add_argument("--no-job", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        owner, _ = User.objects.get_or_create(username=options["owner"])
        customer = Customer.objects.create(name="ACME", owner=owner)
        api.schedule(
            "follow_up",
            owner.username,
            at=timezone.now(),
            payload={"content": f"Call {customer}"},
            key=f"customer:{customer.pk}",
        )
        if not options["no_job"]:
            async_task("crm.jobs.note", "customer_added", str(customer.pk))
