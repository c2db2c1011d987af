"""The alert record, read-only: what ops were told, when, and whether it arrived."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from reminders import kinds

from .models import Alert, AlertDelivery


class ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class DeliveryInline(admin.TabularInline):
    model = AlertDelivery
    fields = ("channel", "target", "status", "attempts", "sent_at", "next_attempt_at", "error")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Alert)
class AlertAdmin(ReadOnly):
    list_display = ("created_at", "title", "event_count", "type", "kind_label", "channel")
    list_filter = ("type", "channel")
    search_fields = ("title", "group_key")
    date_hierarchy = "created_at"
    inlines = [DeliveryInline]
    readonly_fields = (
        "group_key",
        "seq",
        "type",
        "kind",
        "channel",
        "scope",
        "created_at",
        "event_count",
        "first_event_at",
        "last_event_at",
        "title",
        "body",
    )
    fields = readonly_fields

    @admin.display(description=_("kind"), ordering="kind")
    def kind_label(self, alert: Alert) -> str:
        return kinds.label(alert.kind) if alert.kind else "-"


@admin.register(AlertDelivery)
class AlertDeliveryAdmin(ReadOnly):
    list_display = ("alert", "channel", "target", "status", "attempts", "sent_at", "error")
    list_filter = ("status", "channel")
    list_select_related = ("alert",)
