"""The "Run now" of the tasks' admin: a button on the change form and a list action,
each after a confirmation page, both calling ``ScheduledTask.run_now`` (whose rule of
one run per task and minute, and refusals, are the model's: see ``reminders.models``).

Both need ``run_now_scheduledtask`` and the permission to see tasks (view or change),
checked on the server: the button's page and its POST answer 403 without them, and the
action is not offered (a POST of it does nothing); a task the admin's queryset does not
show is not found (404).
Who asked is recorded on the run (``requested_by``: the username).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from ..engine import actions as operator
from ..exceptions import ActionRefused
from ..models import ScheduledTask
from . import confirm
from .confirm import Plan

TASK_NOUN = (_("task"), _("tasks"))

if TYPE_CHECKING:
    _Base = admin.ModelAdmin[ScheduledTask]
else:
    _Base = object


class RunNowMixin(_Base):
    """For the ``ScheduledTask`` admin: the run-now URL, button, page and action."""

    def has_run_now_permission(self, request: HttpRequest) -> bool:
        """Running now, and seeing the tasks: one may act only on what one may see."""
        return self.has_view_or_change_permission(request) and request.user.has_perm(
            "reminders.run_now_scheduledtask"
        )

    def get_urls(self) -> list[URLPattern]:
        run_now = path(
            "<path:object_id>/run-now/",
            self.admin_site.admin_view(self.run_now_view),
            name="reminders_scheduledtask_run_now",
        )
        return [run_now, *super().get_urls()]

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        extra = dict(extra_context or {})
        if self.has_run_now_permission(request):
            extra["run_now_url"] = reverse(
                "admin:reminders_scheduledtask_run_now", args=[object_id]
            )
        return super().change_view(request, object_id, form_url, extra)

    def run_now_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The "Run now" button's confirmation page, and its POST."""
        if not self.has_run_now_permission(request):
            raise PermissionDenied
        task = self.get_object(request, unquote(object_id))
        if task is None:
            raise Http404
        back = reverse("admin:reminders_scheduledtask_change", args=[task.pk])
        if confirm.confirmed(request):
            self._run_now(request, ScheduledTask.objects.filter(pk=task.pk))
            return HttpResponseRedirect(back)
        return self._run_now_page(request, ScheduledTask.objects.filter(pk=task.pk), back=back)

    @admin.action(permissions=["run_now"], description=_("Run selected tasks now"))
    def run_now_tasks(
        self, request: HttpRequest, queryset: QuerySet[ScheduledTask]
    ) -> HttpResponse | None:
        if confirm.confirmed(request):
            self._run_now(request, queryset)
            return None
        return self._run_now_page(request, queryset, action="run_now_tasks")

    def _run_now_page(
        self,
        request: HttpRequest,
        queryset: QuerySet[ScheduledTask],
        *,
        action: str = "",
        back: str = "",
    ) -> HttpResponse:
        now = timezone.now()
        plan = Plan.sort(queryset, lambda task: operator.run_now_refusal(task, now))
        count = len(plan.apply)
        will = ngettext(
            "%(count)d task will get a run due now, sent within seconds, besides its "
            "schedule: its message as the task says it now, stamped with this moment. A "
            "second request in the same minute, or before that run has finished, sends "
            "nothing more.",
            "%(count)d tasks will get a run due now, sent within seconds, besides their "
            "schedule: each its message as the task says it now, stamped with this moment. "
            "A second request in the same minute, or before that run has finished, sends "
            "nothing more.",
            count,
        ) % {"count": count}
        return confirm.page(
            self,
            request,
            title=gettext("Run now"),
            will=will,
            plan=plan,
            noun=TASK_NOUN,
            selected=queryset,
            action=action,
            back_url=back,
        )

    def _run_now(self, request: HttpRequest, queryset: QuerySet[ScheduledTask]) -> None:
        now = timezone.now()
        plan: Plan[ScheduledTask] = Plan()
        made = earlier = 0
        for task in queryset:
            try:
                _run, created = operator.run_now(task, now, by=request.user.get_username())
            except ActionRefused as exc:
                plan.leave([task], exc.message)
                continue
            plan.apply.append(task)
            made += created
            earlier += not created
        done = ngettext(
            "%(count)d task has a run due now.", "%(count)d tasks have a run due now.", made
        ) % {"count": made}
        confirm.report(self, request, done, made, plan, TASK_NOUN)
        if earlier:
            self.message_user(
                request,
                ngettext(
                    "%(count)d task already had a run requested this minute, or one not "
                    "finished yet: nothing more is sent.",
                    "%(count)d tasks already had a run requested this minute, or one not "
                    "finished yet: nothing more is sent.",
                    earlier,
                )
                % {"count": earlier},
                messages.WARNING,
            )
