"""The alert record, read-only: what ops were told, when, and whether it arrived."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from reminders import kinds

from .models import Alert, AlertAction, AlertDelivery, AlertMute, StatisticsCheck, WeComMember


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


class ActionInline(admin.TabularInline):
    """The clicks on the alert's cards: who, as which user, when, from where, and what
    each did (``ops.card_clicks``)."""

    model = AlertAction
    fk_name = "alert"
    fields = (
        "acted_at",
        "member",
        "username",
        "action",
        "outcome",
        "detail",
        "source",
        "card_state",
        "card_detail",
    )
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Alert)
class AlertAdmin(ReadOnly):
    list_display = (
        "created_at",
        "title",
        "event_count",
        "type",
        "kind_label",
        "channel",
        "handled_by",
    )
    # By when: a filter on the date range, not ``date_hierarchy``, whose truncation to the
    # site's zone needs MySQL's and MariaDB's time zone tables, which a server may lack.
    list_filter = ("created_at", "type", "channel")
    search_fields = ("title", "group_key")
    inlines = [DeliveryInline, ActionInline]
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
        "handled_at",
        "handled_by",
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


@admin.register(AlertMute)
class AlertMuteAdmin(admin.ModelAdmin):
    """Groups held quiet by a card's "Mute 1 hour"; deleting one ends it at once."""

    list_display = ("group_key", "until", "by", "created_at")
    readonly_fields = ("group_key", "until", "by", "created_at")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(WeComMember)
class WeComMemberAdmin(admin.ModelAdmin):
    """Which user a WeCom member acts as when they click an alert card."""

    list_display = ("member", "user")
    search_fields = ("member", "user__username")
    raw_id_fields = ("user",)


@admin.register(StatisticsCheck)
class StatisticsCheckAdmin(ReadOnly):
    """Each day's count of each WeCom app, ours against WeCom's (``ops.statistics``)."""

    list_display = (
        "day",
        "corp_id",
        "agent_id",
        "app_name",
        "ours",
        "theirs",
        "difference_display",
        "tolerance",
        "outcome",
        "checked_at",
        "attempts",
    )
    list_filter = ("outcome", "agent_id")
    date_hierarchy = "day"
    readonly_fields = (
        "day",
        "corp_id",
        "agent_id",
        "app_name",
        "channels",
        "ours",
        "theirs",
        "tolerance",
        "outcome",
        "error",
        "checked_at",
        "attempts",
    )
    fields = readonly_fields

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description=_("WeCom minus ours"))
    def difference_display(self, check: StatisticsCheck) -> str:
        difference = check.difference
        return "-" if difference is None else f"{difference:+d}"
