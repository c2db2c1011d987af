"""The ops staff's admin: CRUD on tasks, read-only run history and send ledger, bulk actions.

Actions narrow the selection to the rows they apply to and call the models' own state
methods, the same ones the API and the commands use; the admin holds no rules of its own.
Saving a task takes the API's path (``scheduling.save_edited``): its row locked first,
then re-planned if its schedule changed, so a scheduler planning it meanwhile leaves
no run of the old schedule behind.
Every row an action leaves alone is counted in its report, with the reason. A task's
one-shot time is shown and read on the wall clock of the task's own zone, as
``api.schedule`` reads a naive ``at`` in ``tz``. The CRM object a task is about is
shown, never edited (only the API sets it): a link to its admin page where the site
registers its model, else its name; the changelist fetches the objects of a page with
one query per model (``reminders.about.prefetch``), and an object deleted since, or a
model no longer installed, is said so rather than failing the page.

Permissions are checked on the server, for every action and view, whatever the page
showed: pausing and resuming need ``pause_scheduledtask``, running now
``run_now_scheduledtask``, cancelling and editing ``change_scheduledtask``; retrying a
run ``retry_taskrun`` and marking it handled ``mark_handled_taskrun``. Run now, retry
and mark handled show a confirmation page first (``reminders.admin.confirm``) saying
what will happen to how many, and what will be left and why.

A task's change form shows its schedule in words (``reminders.cron_text``), its next
occurrences as the scheduler will plan them and its last runs (``reminders.admin.display``),
as read-only fields: not an inline formset, so that saving a task never depends on its
history. Run now is ``reminders.admin.run_now``; the run history's filters and "failed
today" are ``reminders.admin.filters``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, datetime, time, timedelta
from typing import Any, cast

from django import forms
from django.conf import settings as django_settings
from django.contrib import admin, messages
from django.contrib.admin.utils import quote
from django.contrib.admin.views.main import ChangeList
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import models
from django.db.models import DurationField, ExpressionWrapper, F, Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import NoReverseMatch, URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.text import Truncator
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from .. import about, calendars, cron_text, kinds, scheduling, timing, validation
from ..conf import settings as conf
from ..exceptions import UnknownKind, UnplannableTask
from ..models import (
    NOT_ENDED_UNSENT,
    FailedToday,
    Priority,
    Refusal,
    ScheduledTask,
    SendLog,
    TaskRun,
)
from . import confirm, display
from .confirm import Plan
from .display import ERROR_CHARS
from .filters import FAILED_TODAY, DueDayFilter, HandledFilter, KindListFilter
from .run_now import RunNowMixin

# Saving a task with any of these changed re-plans it, as ``reminders.api.schedule`` does.
SCHEDULE_FIELDS = ("cron", "run_at", "timezone")


def _choices_with(current: str | None, choices: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """Keep a stored value selectable even if its kind or channel is no longer configured,
    so that opening a task does not silently change it; validation still reports it."""
    if current and current not in dict(choices):
        return [*choices, (current, current)]
    return choices


class WallClockDateTimeField(forms.SplitDateTimeField):
    """A date and a time as entered, without a zone: the form reads them in the task's."""

    def compress(self, data_list: tuple[date, time] | None) -> datetime | None:
        if not data_list:
            return None
        day, clock = data_list
        if day in self.empty_values:
            raise ValidationError(self.error_messages["invalid_date"], code="invalid_date")
        if clock in self.empty_values:
            raise ValidationError(self.error_messages["invalid_time"], code="invalid_time")
        return datetime.combine(day, clock)


def _wall_clock(moment: datetime, zone_name: str) -> datetime:
    """``moment`` as the clocks of the zone read it (UTC if the zone is not valid)."""
    try:
        return moment.astimezone(timing.zone(zone_name)).replace(tzinfo=None)
    except timing.InvalidSchedule:
        return moment.astimezone(timing.UTC).replace(tzinfo=None)


class RunAtInTaskZoneForm(forms.ModelForm):
    """Shows ``run_at`` in the task's ``timezone`` and reads what is entered in the zone
    the form gives, instead of the site's (its field must be a ``WallClockDateTimeField``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.run_at is not None:
            self.initial["run_at"] = _wall_clock(self.instance.run_at, self.instance.timezone)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or self.cleaned_data
        run_at = cleaned.get("run_at")
        if isinstance(run_at, datetime) and timezone.is_naive(run_at):
            cleaned["run_at"] = timing.wall_clock_in(run_at, cleaned.get("timezone") or "")
        return cleaned


# The admin's word for a task's calendar ``""`` (every day), apart from NULL (the kind's).
EVERY_DAY = "*"


def _calendar_choice(value: str | None) -> str:
    return "" if value is None else (value or EVERY_DAY)


def _calendar_field(current: str | None) -> forms.TypedChoiceField:
    """Left empty, the kind's calendar applies (NULL); "every day" is stored as ""."""
    choices: list[tuple[str, Any]] = [("", _("the kind's calendar")), (EVERY_DAY, _("every day"))]
    choices += [(name, name) for name in calendars.names()]
    return forms.TypedChoiceField(
        label=_("working-day calendar"),
        choices=_choices_with(_calendar_choice(current) or None, choices),
        coerce=lambda choice: "" if choice == EVERY_DAY else choice,
        empty_value=None,
        required=False,
        help_text=_("Occurrences on the calendar's rest days are skipped, with the reason."),
    )


class ScheduledTaskForm(RunAtInTaskZoneForm):
    class Meta:
        model = ScheduledTask
        fields = (
            "kind",
            "recipient",
            "channel",
            "priority",
            "calendar",
            "payload",
            "key",
            *SCHEDULE_FIELDS,
        )
        field_classes = {"run_at": WallClockDateTimeField}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Kinds and channels are registered at run time, so the choices are built per form.
        if "kind" in self.fields:
            self.fields["kind"].widget = forms.Select(
                choices=_choices_with(
                    self.instance.kind,
                    [("", "---------")]
                    + [(name, f"{kinds.get(name).label} ({name})") for name in kinds.names()],
                )
            )
        if "channel" in self.fields:
            self.fields["channel"].widget = forms.Select(
                choices=_choices_with(
                    self.instance.channel, [(alias, alias) for alias in conf.CHANNELS]
                )
            )
        if "priority" in self.fields:
            # Left empty, the kind's own priority applies, as with ``api.schedule``.
            priority = cast(forms.ChoiceField, self.fields["priority"])
            priority.required = False
            priority.choices = [("", _("the kind's default")), *Priority.choices]

        if "calendar" in self.fields:
            self.fields["calendar"] = _calendar_field(self.instance.calendar)
            self.initial["calendar"] = _calendar_choice(self.instance.calendar)

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data
        if not cleaned.get("priority"):
            try:
                cleaned["priority"] = kinds.policy(cleaned.get("kind") or "").priority
            except UnknownKind:
                cleaned["priority"] = Priority.NORMAL  # the kind's own error is on its field
        return cleaned

    def _post_clean(self) -> None:
        # The ModelForm builds the task and runs its full_clean; then come the checks that
        # need the channel, the ones ``reminders.api.schedule`` runs after its full_clean.
        super()._post_clean()  # type: ignore[misc]  # private, so not in django-stubs
        try:
            validation.check_sendable(self.instance, skip=set(self.errors))
        except ValidationError as exc:
            self.add_error(None, exc)


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
    "error_at",
    "next_send",
    "last_run_at",
    "retry_count",
    "runs_link",
    "created_at",
    "updated_at",
)
# Shown on a saved task's change form: its schedule in words and what comes next.
PREVIEW_FIELDS = ("schedule_in_words", "upcoming")
RUN_NOUN = (_("run"), _("runs"))
# A row that changed between the confirmation page and its POST.
NOT_CHANGED = Refusal("changed", _("it changed meanwhile"))


@admin.register(ScheduledTask)
class ScheduledTaskAdmin(RunNowMixin, admin.ModelAdmin):
    form = ScheduledTaskForm
    list_display = (
        "kind_label",
        "recipient",
        "schedule",
        "timezone",
        "status",
        "next_send",
        "last_run_at",
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
    def next_send(self, task: ScheduledTask) -> datetime | None:
        """When the next message goes: the earliest waiting run, not ``next_run`` (the
        first occurrence beyond the planned ones; ``TaskQuerySet.with_next_send``)."""
        return getattr(task, "next_send_at", task.next_run)

    @admin.display(description=_("schedule"), ordering="cron")
    def schedule(self, task: ScheduledTask) -> str:
        if task.run_at is not None:
            return f"{_wall_clock(task.run_at, task.timezone):%Y-%m-%d %H:%M}"
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
        return gettext("Once, at %(when)s (%(zone)s)") % {
            "when": self.schedule(task),
            "zone": task.timezone,
        }

    @admin.display(description=_("next occurrences"))
    def upcoming(self, task: ScheduledTask) -> str:
        return display.upcoming(task, timezone.now()) if task.pk else "-"

    @admin.display(description=_("last runs"))
    def recent_runs(self, task: ScheduledTask) -> str:
        return display.recent_runs(task, timezone.now()) if task.pk else "-"

    def get_fieldsets(self, request: HttpRequest, obj: ScheduledTask | None = None) -> Any:
        fieldsets = super().get_fieldsets(request, obj)
        if obj is None:  # nothing to preview or list before it is saved
            saved_only = {"schedule_in_words", "recent_runs"}
            return [
                (name, opts) for name, opts in fieldsets if not saved_only & set(opts["fields"])
            ]
        return fieldsets

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
        done = sum(task.pause() for task in queryset.filter(status=ScheduledTask.Status.ACTIVE))
        message = ngettext("%(count)d task paused.", "%(count)d tasks paused.", done)
        self._report(request, message % {"count": done}, done, queryset, gettext("not active"))

    @admin.action(permissions=["pause"], description=_("Resume selected tasks"))
    def resume_tasks(self, request: HttpRequest, queryset: QuerySet[ScheduledTask]) -> None:
        now = timezone.now()
        done = refused = 0
        for task in queryset.filter(status__in=ScheduledTask.RESUMABLE):
            try:
                done += task.resume(now)
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
            runs += task.cancel()
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


class ReadOnlyAdmin(admin.ModelAdmin):
    """History is written by the engine only: ops staff may look, not touch."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: models.Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: models.Model | None = None) -> bool:
        return False


@admin.register(TaskRun)
class TaskRunAdmin(ReadOnlyAdmin):
    list_display = (
        "task",
        "occurrence",
        "due_at",
        "status",
        "attempts",
        "error_code",
        "error",
        "finished_at",
        "lateness",
        "is_compensation",
        "handled",
    )
    list_filter = (
        DueDayFilter,
        "status",
        ("task__kind", KindListFilter),
        ("task__channel", admin.AllValuesFieldListFilter),
        "is_compensation",
        "is_manual",
        HandledFilter,
    )
    list_select_related = ("task",)
    search_fields = ("task__recipient", "task__key", "ledger_key", "error_code")
    ordering = ("-due_at", "-pk")
    actions = ("retry_runs", "mark_handled")

    def get_queryset(self, request: HttpRequest) -> QuerySet[TaskRun]:
        # Annotated so that the lateness column sorts in the database.
        return (
            super()
            .get_queryset(request)
            .annotate(
                lateness_value=ExpressionWrapper(
                    F("finished_at") - F("due_at"), output_field=DurationField()
                )
            )
        )

    @admin.display(description=_("lateness"), ordering="lateness_value")
    def lateness(self, run: TaskRun) -> str:
        late = run.lateness
        if late is None:
            return "-"
        return str(timedelta(seconds=round(late.total_seconds())))

    @admin.display(description=_("error"))
    def error(self, run: TaskRun) -> str:
        """The error message, cut to fit a row; the whole of it on hover and on the run's
        page."""
        if not run.error_message:
            return "-"
        short = Truncator(run.error_message).chars(ERROR_CHARS)
        return format_html('<span title="{}">{}</span>', run.error_message, short)

    @admin.display(description=_("handled"), ordering="handled_at")
    def handled(self, run: TaskRun) -> str:
        if run.handled_at is None:
            return "-"
        when = timezone.localtime(run.handled_at)
        return f"{run.handled_by}, {when:%Y-%m-%d %H:%M}"

    def has_retry_permission(self, request: HttpRequest) -> bool:
        # A state change of its own, though the history cannot be edited in a form.
        return request.user.has_perm("reminders.retry_taskrun")

    def has_mark_handled_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("reminders.mark_handled_taskrun")

    @admin.action(permissions=["retry"], description=_("Retry selected runs now"))
    def retry_runs(self, request: HttpRequest, queryset: QuerySet[TaskRun]) -> HttpResponse | None:
        """Failed, unknown and expired runs back in line for an immediate attempt, but
        never past their deadline (``TaskRun.retry_refusal``)."""
        now = timezone.now()
        plan = self._plan(queryset, lambda run: run.retry_refusal(now))
        if not confirm.confirmed(request):
            count = len(plan.apply)
            will = ngettext(
                "%(count)d run will be put back in line for an immediate attempt, with a "
                "fresh set of retries and its deadline kept. A run whose outcome was "
                "unknown is taken as not received: its message is sent again.",
                "%(count)d runs will be put back in line for an immediate attempt, with a "
                "fresh set of retries and their deadlines kept. A run whose outcome was "
                "unknown is taken as not received: its message is sent again.",
                count,
            ) % {"count": count}
            return confirm.page(
                self,
                request,
                title=gettext("Retry runs"),
                will=will,
                plan=plan,
                noun=RUN_NOUN,
                selected=queryset,
                action="retry_runs",
            )
        done = 0
        for run in plan.apply:
            if run.retry_now(now):
                done += 1
            else:  # it changed since it was read: say why now
                plan.leave([run], (run.retry_refusal(now) or NOT_CHANGED).message)
        message = ngettext(
            "%(count)d run put back in line for an immediate attempt.",
            "%(count)d runs put back in line for an immediate attempt.",
            done,
        ) % {"count": done}
        confirm.report(self, request, message, done, plan, RUN_NOUN)
        return None

    @admin.action(permissions=["mark_handled"], description=_("Mark selected runs handled"))
    def mark_handled(
        self, request: HttpRequest, queryset: QuerySet[TaskRun]
    ) -> HttpResponse | None:
        """Record who looked after runs that ended unsent, and when."""
        plan = self._plan(queryset, lambda run: run.handle_refusal())
        if not confirm.confirmed(request):
            count = len(plan.apply)
            will = ngettext(
                "%(count)d run will be marked handled by you, now. It stays as it is "
                'otherwise, and drops out of "failed today".',
                "%(count)d runs will be marked handled by you, now. They stay as they are "
                'otherwise, and drop out of "failed today".',
                count,
            ) % {"count": count}
            return confirm.page(
                self,
                request,
                title=gettext("Mark runs handled"),
                will=will,
                plan=plan,
                noun=RUN_NOUN,
                selected=queryset,
                action="mark_handled",
            )
        by, now = request.user.get_username(), timezone.now()
        selected = TaskRun.objects.filter(pk__in=[run.pk for run in plan.apply])
        done = selected.mark_handled(by, now)
        if done < len(plan.apply):  # some changed since they were read
            marked = set(
                selected.filter(handled_at=now, handled_by=by).values_list("pk", flat=True)
            )
            plan.leave([run for run in plan.apply if run.pk not in marked], NOT_CHANGED.message)
        message = ngettext(
            "%(count)d run marked handled.", "%(count)d runs marked handled.", done
        ) % {"count": done}
        confirm.report(self, request, message, done, plan, RUN_NOUN)
        return None

    @staticmethod
    def _plan(
        queryset: QuerySet[TaskRun], refusal: Callable[[TaskRun], Refusal | None]
    ) -> Plan[TaskRun]:
        """Runs that ended unsent sorted by ``refusal``; the others left as such."""
        unsent = Q(status__in=TaskRun.UNSENT_ENDS)
        plan = Plan.sort(queryset.filter(unsent).select_related("task"), refusal)
        plan.leave(queryset.exclude(unsent), NOT_ENDED_UNSENT.message)
        return plan


@admin.register(FailedToday)
class FailedTodayAdmin(ReadOnlyAdmin):
    """The "Failed today" entry of the app list: a link to the runs' changelist filtered
    to the failed runs due today that nobody has handled (``reminders.admin.filters``). Seen by
    whoever may see runs; it has no rows or permissions of its own."""

    def get_urls(self) -> list[URLPattern]:
        return [
            path(
                "",
                self.admin_site.admin_view(self.changelist_view),
                name="reminders_failedtoday_changelist",
            )
        ]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        runs = reverse("admin:reminders_taskrun_changelist", current_app=self.admin_site.name)
        return HttpResponseRedirect(f"{runs}?{FAILED_TODAY}")

    def has_view_permission(self, request: HttpRequest, obj: models.Model | None = None) -> bool:
        return request.user.has_perm("reminders.view_taskrun")


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


from . import calendar  # noqa: E402, F401 (registers the calendar days' admin)
