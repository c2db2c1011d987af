"""The send ledger (``SendLog``), read-only: one row per idempotency key, written by
delivery (``reminders.engine.delivery``) before and after each send, and kept after its task is
deleted, as the record of what was sent."""

from __future__ import annotations

from django.contrib import admin

from ..models import SendLog
from .read_only import ReadOnlyAdmin


@admin.register(SendLog)
class SendLogAdmin(ReadOnlyAdmin):
    list_display = (
        "key",
        "task",
        "status",
        "recipient",
        "channel",
        "attempts",
        "reply_code",
        "created_at",
        "sent_at",
    )
    list_filter = ("status", "channel")
    list_select_related = ("task",)
    search_fields = ("key", "recipient", "provider_message_id")
    ordering = ("-created_at", "-pk")
