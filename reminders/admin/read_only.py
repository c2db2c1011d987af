"""The base of the history's admins (runs, the ledger): rows the engine writes, which ops
staff may look at but never add, change or delete, whatever their permissions."""

from __future__ import annotations

from django.contrib import admin
from django.db import models
from django.http import HttpRequest


class ReadOnlyAdmin(admin.ModelAdmin):
    """History is written by the engine only: ops staff may look, not touch."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: models.Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: models.Model | None = None) -> bool:
        return False
