"""The tasks' admin: CRUD on tasks and the actions pause, resume and cancel (run now is
``reminders.admin.run_now``).

Actions narrow the selection to the tasks they apply to and call the models' own state
methods, the same ones the API and the commands use; the admin holds no rules of its own.
Every task an action leaves alone is counted in its report, with the reason.
Saving a task takes the API's path (``scheduling.save_edited``): its row locked first,
then re-planned if its schedule changed, so a scheduler planning it meanwhile leaves
no run of the old schedule behind. The form is ``reminders.admin.task_form``.

The CRM object a task is about is shown, never edited (only the API sets it): a link to
its admin page where the site registers its model, else its name; the changelist
fetches the objects of a page with one query per model (``reminders.intake.about.prefetch``),
and an object deleted since, or a model no longer installed, is said so rather than
failing the page.

Permissions are checked on the server, for every action and view, whatever the page
showed: pausing and resuming need ``pause_scheduledtask``, cancelling and editing
``change_scheduledtask``.

A task's change form shows its schedule in words (``reminders.schedule.cron_text``), its next
occurrences as the scheduler will plan them and its runs (``reminders.admin.display``),
as read-only fields: not an inline formset, so that saving a task never depends on its
history. Every time on its pages and lists is on the clock of the task's zone, the zone
named (``reminders.schedule.readable``: "12-05 21:19 (Asia/Shanghai)"), never ISO UTC;
its status is the model's, which follows its runs (a one-shot whose run waits is active).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.conf import settings as django_settings
from django.contrib import admin, messages
from django.contrib.admin.utils import quote
from django.contrib.admin.views.main import ChangeList
from django.contrib.contenttypes.models import ContentType
from django.db.models import F, QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from .. import kinds
from ..conf import settings as conf
from ..engine import actions as operator
from ..exceptions import UnplannableTask
from ..intake import about, scheduling
from ..models import ScheduledTask
from ..schedule import cron_text, readable
from . import display, preview
from .filters import KindListFilter
from .live_preview import LivePreviewMixin
from .run_now import RunNowMixin
from .task_form import SCHEDULE_FIELDS, ScheduledTaskForm, payload_form_fields


def in_task_zone(name: str, description: Any) -> Callable[[Any, ScheduledTask], str]:
    """A column or read-only field showing the task's datetime field ``name`` on the
    clock of the task's zone (``reminders.schedule.readable``), sorted by that field."""

    @admin.display(description=description, ordering=name)
    def shown(model_admin: Any, task: ScheduledTask) -> str:
        return readable.moment(getattr(task, name), task.timezone)

    return shown


class TaskChangeList(ChangeList):
    """The changelist, with the objects its page of tasks is about fetched together."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        # Iterating the page's QuerySet fills its cache: the rows shown are these ones.
        about.prefetch(self.result_list)


# Shown, never edited: status changes only through the actions.
STATE_FIELDS = (
    "status",
    "error_code",
    "error_message",
    "error_at_local",
    "next_send",
    "last_run",
    "retry_count",
    "runs_link",
    "created_at_local",
    "updated_at_local",
)
# Shown on a saved task's change form: its schedule in words and what comes next.
PREVIEW_FIELDS = ("schedule_in_words", "upcoming", "next_message")
# The name of the form's "Preview" button.
PREVIEW = "_preview"


class PreviewingForm(forms.ModelForm):
    """The task's form when "Preview" was pressed: valid, it shows the next message of
    the task as entered; either way it is refused, so nothing is saved."""

    request: HttpRequest

    def _post_clean(self) -> None:
        super()._post_clean()  # type: ignore[misc]  # private, so not in django-stubs
        if not self.errors:
            task = self.instance
            self.request.reminders_preview = preview.next_message(  # type: ignore[attr-defined]
                task, timezone.now()
            )
        self.add_error(None, gettext("Preview only: nothing was saved."))


@admin.register(ScheduledTask)
class ScheduledTaskAdmin(LivePreviewMixin, RunNowMixin, admin.ModelAdmin):
    form = ScheduledTaskForm
    list_display = (
        "kind_label",
        "recipient",
        "schedule",
        "timezone",
        "status",
        "next_send",
        "last_run_at_local",
        "priority",
        "channel",
        "about_link",
    )
    list_filter = (("kind", KindListFilter), "status", "priority", "channel")
    search_fields = ("recipient", "key")
    ordering = (F("next_run").asc(nulls_last=True), "pk")
    actions = ("pause_tasks", "resume_tasks", "cancel_tasks", "run_now_tasks")
    readonly_fields = ("about_link", *STATE_FIELDS, *PREVIEW_FIELDS, "recent_runs")
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "kind",
                    "recipient",
                    "channel",
                    "priority",
                    "calendar",
                    "payload",
                    "key",
                    "about_link",
                )
            },
        ),
        (
            _("Schedule"),
            {
                "fields": ("cron", "run_at", "timezone"),
                "description": _(
                    "Give a cron expression or a one-shot time, both read on the clock of "
                    "the task's time zone. Changing the schedule re-plans the next run, "
                    "cancels the runs not yet started and makes an ended task active again "
                    "(a paused one stays paused)."
                ),
            },
        ),
        (_("Upcoming"), {"fields": PREVIEW_FIELDS}),
        (_("State"), {"fields": STATE_FIELDS}),
        (_("Recent runs"), {"fields": ("recent_runs",)}),
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[ScheduledTask]:
        return super().get_queryset(request).with_next_send()  # type: ignore[attr-defined]

    def get_ordering(self, request: HttpRequest) -> Any:
        # By the "next run" column: when each task's next message goes. (``ordering``
        # may name fields only, so it keeps ``next_run`` for the system checks.)
        return (F("next_send_at").asc(nulls_last=True), "pk")

    @admin.display(description=_("kind"), ordering="kind")
    def kind_label(self, task: ScheduledTask) -> str:
        return kinds.label(task.kind)

    @admin.display(description=_("next run"), ordering="next_send_at")
    def next_send(self, task: ScheduledTask) -> str:
        """When the next message goes, in the task's zone: the earliest waiting run, not
        ``next_run`` (the first occurrence beyond the planned ones;
        ``TaskQuerySet.with_next_send``)."""
        return readable.moment(getattr(task, "next_send_at", task.next_run), task.timezone)

    last_run_at_local = in_task_zone("last_run_at", _("last run"))
    error_at_local = in_task_zone("error_at", _("error since"))
    created_at_local = in_task_zone("created_at", _("created"))
    updated_at_local = in_task_zone("updated_at", _("updated"))

    @admin.display(description=_("last run"))
    def last_run(self, task: ScheduledTask) -> str:
        return display.last_run(task) if task.pk else "-"

    @admin.display(description=_("schedule"), ordering="cron")
    def schedule(self, task: ScheduledTask) -> str:
        if task.cron:
            return format_html(
                '<span title="{}">{}</span>', task.cron, cron_text.describe(task.cron)
            )
        return task.schedule_display

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return TaskChangeList

    @admin.display(description=_("about"))
    def about_link(self, task: ScheduledTask) -> str:
        """The object the task is about: a link to its admin page, else its name."""
        if task.content_type_id is None:
            return "-"
        model = about.model_of(task)
        if model is None:
            content_type = ContentType.objects.get_for_id(task.content_type_id)
            return gettext("%(type)s %(id)s (its model is no longer installed)") % {
                "type": f"{content_type.app_label}.{content_type.model}",
                "id": task.object_id,
            }
        obj = about.target(task)
        if obj is None:
            return gettext("%(model)s %(id)s (deleted)") % {
                "model": model._meta.verbose_name,
                "id": task.object_id,
            }
        if self.admin_site.is_registered(model):
            opts = model._meta
            try:
                url = reverse(
                    f"{self.admin_site.name}:{opts.app_label}_{opts.model_name}_change",
                    args=[quote(obj.pk)],
                )
            except NoReverseMatch:
                return str(obj)
            return format_html('<a href="{}">{}</a>', url, obj)
        return str(obj)

    @admin.display(description=_("in words"))
    def schedule_in_words(self, task: ScheduledTask) -> str:
        if task.cron:
            return cron_text.describe(task.cron)
        # The time says its zone already: "12-06 21:19 (Asia/Shanghai)".
        return gettext("Once, at %(when)s") % {"when": self.schedule(task)}

    @admin.display(description=_("next occurrences"))
    def upcoming(self, task: ScheduledTask) -> str:
        return display.upcoming(task, timezone.now()) if task.pk else "-"

    @admin.display(description=_("next message"))
    def next_message(self, task: ScheduledTask) -> str:
        return preview.next_message(task, timezone.now()) if task.pk else "-"

    @admin.display(description=_("runs, newest first"))
    def recent_runs(self, task: ScheduledTask) -> str:
        return display.recent_runs(task, timezone.now()) if task.pk else "-"

    def get_fieldsets(self, request: HttpRequest, obj: ScheduledTask | None = None) -> Any:
        # The payload as fields, the kinds' keys, then the JSON of the other keys.
        payload = (*payload_form_fields(), "payload")
        fieldsets: list[tuple[Any, dict[str, Any]]] = [
            (
                name,
                {
                    **opts,
                    "fields": tuple(
                        part
                        for field in opts["fields"]
                        for part in (payload if field == "payload" else (field,))
                    ),
                },
            )
            for name, opts in super().get_fieldsets(request, obj)
        ]
        if obj is None:  # nothing to preview or list before it is saved
            saved_only = {"schedule_in_words", "recent_runs"}
            return [
                (name, opts) for name, opts in fieldsets if not saved_only & set(opts["fields"])
            ]
        return fieldsets

    # Preview (reminders.admin.preview): the form's "Preview" button renders the task's
    # next message as entered, and saves nothing.

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        if request.method == "POST" and PREVIEW in request.POST:
            request.reminders_preview = ""  # type: ignore[attr-defined]
        return super().changeform_view(request, object_id, form_url, extra_context)

    def get_form(
        self,
        request: HttpRequest,
        obj: ScheduledTask | None = None,
        change: bool = False,
        **kwargs: Any,
    ) -> Any:
        # The payload's fields are the registered kinds': declared on the form per request.
        with_payload = type(self.form.__name__, (self.form,), payload_form_fields())
        form = super().get_form(request, obj, change, **{"form": with_payload, **kwargs})
        if not hasattr(request, "reminders_preview"):
            return form
        return type("Previewing" + form.__name__, (PreviewingForm, form), {"request": request})

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: ScheduledTask | None = None,
    ) -> HttpResponse:
        context["reminders_preview"] = getattr(request, "reminders_preview", "")
        context["reminders_preview_button"] = PREVIEW
        context["reminders_live_preview_url"] = (
            reverse("admin:reminders_scheduledtask_preview", args=[quote(obj.pk)])
            if obj is not None
            else reverse("admin:reminders_scheduledtask_preview_add")
        )
        return super().render_change_form(request, context, add, change, form_url, obj)

    @admin.display(description=_("runs"))
    def runs_link(self, task: ScheduledTask) -> str:
        if task.pk is None:
            return "-"
        url = reverse("admin:reminders_taskrun_changelist")
        count = task.runs.count()
        label = ngettext("%(count)d run", "%(count)d runs", count) % {"count": count}
        return format_html('<a href="{}?task__id__exact={}">{}</a>', url, task.pk, label)

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        return {
            "timezone": django_settings.TIME_ZONE,
            "channel": conf.DEFAULT_CHANNEL,
            **super().get_changeform_initial_data(request),
        }

    def save_model(
        self, request: HttpRequest, obj: ScheduledTask, form: forms.ModelForm, change: bool
    ) -> None:
        # The API's path: the task's row locked first, then re-planned and saved.
        replan = not change or any(name in form.changed_data for name in SCHEDULE_FIELDS)
        edited = [f.name for f in obj._meta.concrete_fields if f.name in form.cleaned_data]
        scheduling.save_edited(obj, edited, replan=replan)

    def response_change(self, request: HttpRequest, obj: ScheduledTask) -> HttpResponse:
        response = super().response_change(request, obj)
        why = self._why_it_will_not_run(obj)
        if why:
            self.message_user(request, why, messages.WARNING)
        return response

    @staticmethod
    def _why_it_will_not_run(task: ScheduledTask) -> str:
        if task.status == ScheduledTask.Status.COMPLETED:
            return gettext(
                "This task has completed: its schedule has no occurrence left, so it will "
                "not run again. Change its schedule to run it again."
            )
        if task.status == ScheduledTask.Status.CANCELLED:
            return gettext(
                "This task is cancelled and will not run. Change its schedule to run it again."
            )
        if task.status == ScheduledTask.Status.ERROR:
            return gettext(
                "This task cannot be planned, so it will not run: %(reason)s Once that is "
                "fixed, resume it (or change its schedule)."
            ) % {"reason": task.error_message}
        return ""

    # Actions ---------------------------------------------------------------------------

    def has_pause_permission(self, request: HttpRequest) -> bool:
        """Pausing and resuming, apart from editing the task."""
        return request.user.has_perm("reminders.pause_scheduledtask")

    @admin.action(permissions=["pause"], description=_("Pause selected tasks"))
    def pause_tasks(self, request: HttpRequest, queryset: QuerySet[ScheduledTask]) -> None:
        done = sum(
            operator.pause(task) for task in queryset.filter(status=ScheduledTask.Status.ACTIVE)
        )
        message = ngettext("%(count)d task paused.", "%(count)d tasks paused.", done)
        self._report(request, message % {"count": done}, done, queryset, gettext("not active"))

    @admin.action(permissions=["pause"], description=_("Resume selected tasks"))
    def resume_tasks(self, request: HttpRequest, queryset: QuerySet[ScheduledTask]) -> None:
        now = timezone.now()
        done = refused = 0
        for task in queryset.filter(status__in=ScheduledTask.RESUMABLE):
            try:
                done += operator.resume(task, now)
            except UnplannableTask as exc:
                refused += 1
                reason = gettext("%(task)s cannot run: %(reason)s")
                self.message_user(
                    request, reason % {"task": task, "reason": exc.message}, messages.ERROR
                )
        message = ngettext("%(count)d task resumed.", "%(count)d tasks resumed.", done)
        self._report(
            request,
            message % {"count": done},
            done,
            queryset,
            gettext("not paused or in error"),
            handled=done + refused,
        )

    @admin.action(permissions=["change"], description=_("Cancel selected tasks"))
    def cancel_tasks(self, request: HttpRequest, queryset: QuerySet[ScheduledTask]) -> None:
        live = queryset.exclude(status__in=ScheduledTask.ENDED)
        done = runs = 0
        for task in live:
            runs += operator.cancel(task)
            done += 1
        message = ngettext(
            "%(count)d task cancelled, with %(runs)d pending runs.",
            "%(count)d tasks cancelled, with %(runs)d pending runs.",
            done,
        )
        self._report(
            request,
            message % {"count": done, "runs": runs},
            done,
            queryset,
            gettext("already ended"),
        )

    def _report(
        self,
        request: HttpRequest,
        message: str,
        done: int,
        selected: QuerySet[ScheduledTask],
        why: str,
        handled: int | None = None,
    ) -> None:
        """Say what was done, then how many selected tasks the action did not apply to
        (``handled``: those it did apply to, when some of them it reported on already)."""
        self.message_user(request, message, messages.SUCCESS if done else messages.WARNING)
        skipped = selected.count() - (done if handled is None else handled)
        if skipped:
            self.message_user(
                request,
                ngettext(
                    "%(count)d selected task left as it was (%(why)s).",
                    "%(count)d selected tasks left as they were (%(why)s).",
                    skipped,
                )
                % {"count": skipped, "why": why},
                messages.WARNING,
            )
