"""The run history, read-only, and its actions: retry, mark handled and recall; and the
"Failed today" entry of the app list.

Actions narrow the selection to the runs they apply to (those that ended unsent) and
call the models' own state methods (``TaskRun.retry_now``, ``mark_handled``), whose
refusals are the models' too. Each shows a confirmation page first
(``reminders.admin.confirm``) saying what will happen to how many, and what will be
left and why; a run that changed between the page and its POST is counted as left.
Retrying needs ``retry_taskrun``, marking handled ``mark_handled_taskrun``, checked on
the server whatever the page showed. The history's filters and "failed today" are
``reminders.admin.filters``.

A run's message is recalled through its ledger rows (``reminders.admin.ledger`` says
how): the run's page has a "Recall" button for each row ``engine.recall`` would
recall, the list the action "Recall the selected messages", and both say who recalled a
run's message, when and why, or how far a recall that failed got.

A digest is a run of its own (``engine.digests``), and its page lists the runs it
carried; a run carried in a digest names it, with the ledger row of the message that
carried it, having none of its own (``reminders.admin.digests``). The list tells them
apart (the "digest" column and filter), and its status filter has ``folded``, the runs
waiting in a digest not sent yet. A run carried in a digest is recalled with its digest,
whose message it was: the action leaves it, saying so.

The "acted on" column, on the list and the run's page, says who clicked which button
and when; a click held (``RunAction.held_by``: its inquiry someone else had taken on
already) says it was held, who had the inquiry, and that it did nothing, rather than
reading as an action done.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db import models
from django.db.models import DurationField, ExpressionWrapper, F, Prefetch, Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.text import Truncator
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from ..engine import actions as operator
from ..engine import recall as recalling
from ..engine.actions import NOT_ENDED_UNSENT, Refusal
from ..messages.digests import is_digest
from ..models import FailedToday, SendLog, TaskRun
from . import confirm, digests
from .confirm import Plan
from .display import ERROR_CHARS
from .filters import FAILED_TODAY, DigestFilter, DueDayFilter, HandledFilter, KindListFilter
from .ledger import (
    RECALL_ACTION,
    RecallMixin,
    ledger_line,
    recall_cell,
    recall_state,
    recall_url,
)
from .read_only import ReadOnlyAdmin

RUN_NOUN = (_("run"), _("runs"))
# A row that changed between the confirmation page and its POST.
NOT_CHANGED = Refusal("changed", _("it changed meanwhile"))
# What a run's recall column reads: its ledger rows that were recalled or tried.
# A run without a ledger row: it never reached a send.
NOTHING_SENT = Refusal("nothing_sent", _("it sent no message"))
# A run carried in a digest: the digest's message was its message.
IN_DIGEST = Refusal("in_digest", _("its message is its digest's, recalled from the digest's run"))
TRIED = Q(recalled_at__isnull=False) | ~Q(recall_error="") | Q(recalled_ids__isnull=False)


@admin.register(TaskRun)
class TaskRunAdmin(RecallMixin, ReadOnlyAdmin):
    list_display = (
        "task",
        "occurrence",
        "due_at",
        "status",
        "digest_cell",
        "attempts",
        "error_code",
        "error",
        "finished_at",
        "lateness",
        "is_compensation",
        "handled",
        "acted",
        "recalled",
    )
    readonly_fields = ("acted", "card", "recall", "in_digest", "digest_items")
    # Shown in place of the ``digest`` field, each on the runs it applies to.
    DIGEST_FIELDS = ("in_digest", "digest_items")
    list_filter = (
        DueDayFilter,
        "status",
        DigestFilter,
        ("task__kind", KindListFilter),
        ("task__channel", admin.AllValuesFieldListFilter),
        "is_compensation",
        "is_manual",
        HandledFilter,
    )
    list_select_related = ("task", "action")
    search_fields = ("task__recipient", "task__key", "ledger_key", "error_code")
    ordering = ("-due_at", "-pk")
    actions = ("retry_runs", "mark_handled", RECALL_ACTION)

    def get_queryset(self, request: HttpRequest) -> QuerySet[TaskRun]:
        # Annotated so that the lateness column sorts in the database; the ledger rows
        # a recall touched, for the recall column, in one query per page.
        return (
            super()
            .get_queryset(request)
            .annotate(
                lateness_value=ExpressionWrapper(
                    F("finished_at") - F("due_at"), output_field=DurationField()
                )
            )
            .prefetch_related(
                Prefetch(
                    "send_logs",
                    queryset=SendLog.objects.filter(TRIED).order_by("pk"),
                    to_attr="recall_logs",
                )
            )
        )

    def get_fields(self, request: HttpRequest, obj: TaskRun | None = None) -> list[Any]:
        """The run's page: where the ``digest`` field was, the digest it went in (an
        item) or the runs it carried (a digest), each only on the runs it applies to."""
        fields = list(super().get_fields(request, obj))
        at = fields.index("digest") if "digest" in fields else len(fields)
        fields = [f for f in fields if f != "digest" and f not in self.DIGEST_FIELDS]
        shown = []
        if obj is not None and obj.digest_id is not None:
            shown.append("in_digest")
        if obj is not None and is_digest(obj.task):
            shown.append("digest_items")
        fields[at:at] = shown
        return fields

    @admin.display(description=_("digest"))
    def digest_cell(self, run: TaskRun) -> str:
        """A digest, how many runs it carries and a link to them; a run carried in one,
        a link to it."""
        return digests.cell(run)

    @admin.display(description=_("digest"))
    def in_digest(self, run: TaskRun) -> str:
        """The digest the run went in, and the ledger row of its message."""
        return digests.digest_of(run, ledger_line)

    @admin.display(description=_("runs in this digest"))
    def digest_items(self, run: TaskRun) -> str:
        return digests.items_of(run)

    @admin.display(description=_("lateness"), ordering="lateness_value")
    def lateness(self, run: TaskRun) -> str:
        """How long after its due time the run finished; one that finished before it
        (sent early by an operator, or ended before it came) reads "early by", never as
        a negative duration ("-1 day, 23:56:45")."""
        late = run.lateness
        if late is None:
            return "-"
        seconds = round(late.total_seconds())
        if seconds < 0:
            return gettext("early by %(duration)s") % {"duration": timedelta(seconds=-seconds)}
        return str(timedelta(seconds=seconds))

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

    @admin.display(description=_("acted on"), ordering="action__acted_at")
    def acted(self, run: TaskRun) -> str:
        """Who clicked a button of the run's card, which, and when (``RunAction``); a
        click held (its inquiry taken on by someone else already) says so, who had it,
        and that it did nothing."""
        action = getattr(run, "action", None)
        if action is None:
            return "-"
        said = {
            "action": action.said,
            "member": action.member,
            "when": f"{timezone.localtime(action.acted_at):%Y-%m-%d %H:%M}",
            "holder": action.held_by,
        }
        if action.held_by:
            return (
                gettext(
                    "%(member)s clicked %(action)s, %(when)s: held: %(holder)s had taken the "
                    "inquiry on; nothing was done"
                )
                % said
            )
        return gettext("%(action)s by %(member)s, %(when)s") % said

    @admin.display(description=_("card after the click"))
    def card(self, run: TaskRun) -> str:
        """What became of the card's update after the click (``engine.cards``): its state,
        and what the card reads now or why it could not be updated."""
        action = getattr(run, "action", None)
        if action is None or not action.card_state:
            return "-"
        state = str(action.get_card_state_display())
        return f"{state}: {action.card_detail}" if action.card_detail else state

    @admin.display(description=_("recall"))
    def recalled(self, run: TaskRun) -> str:
        """Who recalled the run's message, when and why; or how far a recall got."""
        cells = [recall_cell(log) for log in self._recall_logs(run)]
        return format_html_join(" ", "{}", ((cell,) for cell in cells)) if cells else "-"

    @admin.display(description=_("recall"))
    def recall(self, run: TaskRun) -> str:
        """The same on the run's page, in full, each linking to its ledger row."""
        rows = [
            (reverse("admin:reminders_sendlog_change", args=[log.pk]), recall_state(log))
            for log in self._recall_logs(run)
        ]
        return format_html_join(" ", '<a href="{}">{}</a>', rows) if rows else "-"

    @staticmethod
    def _recall_logs(run: TaskRun) -> list[SendLog]:
        logs = getattr(run, "recall_logs", None)
        if logs is None:
            logs = list(run.send_logs.filter(TRIED).order_by("pk"))
        return logs

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        extra = dict(extra_context or {})
        run = self.get_object(request, unquote(object_id))
        if run is not None and self.has_recall_permission(request):
            back = reverse("admin:reminders_taskrun_change", args=[run.pk])
            sent = run.send_logs.filter(status=SendLog.Status.SENT).order_by("pk")
            extra["recall_urls"] = [
                recall_url(log, back) for log in sent if recalling.why_not(log) is None
            ]
        return super().change_view(request, object_id, form_url, extra)

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
        plan = self._plan(queryset, lambda run: operator.retry_refusal(run, now))
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
            if operator.retry_now(run, now):
                done += 1
            else:  # it changed since it was read: say why now
                plan.leave([run], (operator.retry_refusal(run, now) or NOT_CHANGED).message)
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
        plan = self._plan(queryset, lambda run: operator.handle_refusal(run))
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

    @admin.action(permissions=["recall"], description=_("Recall the selected messages"))
    def recall_messages(
        self, request: HttpRequest, queryset: QuerySet[TaskRun]
    ) -> HttpResponse | None:
        """The messages the selected runs sent, taken back (``reminders.admin.ledger``);
        a run that has no ledger row sent nothing to take back."""
        silent = Plan[TaskRun]()
        unlogged = queryset.filter(send_logs__isnull=True)
        silent.leave(unlogged.filter(digest__isnull=False), IN_DIGEST.message)
        silent.leave(unlogged.filter(digest__isnull=True), NOTHING_SENT.message)
        logs = SendLog.objects.filter(run__in=queryset.values("pk"))
        left = confirm.left_lines(silent, RUN_NOUN)
        return self.recall_selected(request, logs, queryset, left=left)

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
