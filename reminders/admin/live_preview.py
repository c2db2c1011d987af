"""The task form's live preview: the message as its recipient will see it, beside the
form, as it is being filled in, without saving.

The page posts the form as it stands (``POST <task>/preview/``, or ``add/preview/``) on
every change, and gets back JSON: ``preview``, the next message rendered as the change
form's "Preview" button renders it (``reminders.admin.preview.next_message``: the path
a send takes, in the task's language, checked by its channel), or ``""`` while the form
has errors; and ``errors``, the form's, field by field (``__all__`` for the others), as
Django's ``ErrorDict.get_json_data`` gives them, for the page to show each in place.

Nothing is saved: the form is validated in a transaction rolled back at the end, so a
builder that writes cannot leave anything either. Only who may add a task (the add
form's) or change this one (a task's) may ask; a task that does not exist is 404.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib.admin.utils import unquote
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.urls import URLPattern, path
from django.utils import timezone
from django.views.decorators.http import require_POST

from ..models import ScheduledTask
from . import preview

if TYPE_CHECKING:
    from django.contrib import admin

    _Base = admin.ModelAdmin[ScheduledTask]
else:
    _Base = object


class LivePreviewMixin(_Base):
    """For ``ScheduledTaskAdmin``: the preview URLs and their view."""

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(require_POST(self.live_preview_view))
        return [
            path("add/preview/", view, name="reminders_scheduledtask_preview_add"),
            path("<path:object_id>/preview/", view, name="reminders_scheduledtask_preview"),
            *super().get_urls(),
        ]

    def live_preview_view(self, request: HttpRequest, object_id: str | None = None) -> HttpResponse:
        obj = None
        if object_id is not None:
            obj = self.get_object(request, unquote(object_id))
            if obj is None:
                raise Http404
            allowed = self.has_change_permission(request, obj)
        else:
            allowed = self.has_add_permission(request)
        if not allowed:
            return JsonResponse({"error": "forbidden"}, status=403)
        with transaction.atomic():
            form_class: Any = self.get_form(request, obj, change=obj is not None)
            form = form_class(request.POST, request.FILES, instance=obj)
            valid = form.is_valid()
            shown = str(preview.next_message(form.instance, timezone.now())) if valid else ""
            transaction.set_rollback(True)
        return JsonResponse({"preview": shown, "errors": form.errors.get_json_data()})
