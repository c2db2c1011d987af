import uuid
from typing import Any

from django.db import models


class Customer(models.Model):
    """Integer primary key; registered in the admin."""

    name = models.CharField(max_length=100)

    def __str__(self) -> str:
        return self.name


class Inquiry(models.Model):
    """UUID primary key; registered in the admin."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    subject = models.CharField(max_length=100)

    def __str__(self) -> str:
        return self.subject


class Contract(models.Model):
    """Text primary key; not registered in the admin."""

    number = models.CharField(primary_key=True, max_length=80)

    def __str__(self) -> str:
        return f"contract {self.number}"


class Member(models.Model):
    """Where this CRM keeps a user's WeCom member id, by login. (Not a foreign key to the
    user: an app without migrations, as this one, cannot depend on one with them.)"""

    username = models.CharField(max_length=150, unique=True)
    wecom_id = models.CharField(max_length=64, blank=True)

    def __str__(self) -> str:
        return f"member {self.wecom_id or '-'}"


def wecom_id(user: Any) -> str:
    """``REMINDERS_RECIPIENT_RESOLVER`` for this CRM: the member id on the user's record."""
    member = Member.objects.filter(username=user.get_username()).first()
    return member.wecom_id if member else ""
