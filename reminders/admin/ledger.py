"""The send ledger (``SendLog``), read-only: one row per idempotency key, written by
delivery (``reminders.engine.delivery``) before and after each send, and kept after its task is
deleted, as the record of what was sent; and recalling a sent message.

Recall takes a delivered message back from its recipient through ``engine.recall``, the
one service that does, whose refusals and rules are its own (WeCom's app, within 24
hours, every part of a split message). The admin offers it twice: a "Recall" button on
a ledger row's page (and on its run's, ``reminders.admin.runs``) where ``why_not`` has
nothing against it, leading to a confirmation page that shows the message and its
recipient and asks why; and the action "Recall the selected messages" on the ledger's
and the runs' lists, whose confirmation page says which will be recalled and which will
not, and why, and takes one reason for all. Either page says what a recall cancels with
a message (``engine.recall.still_to_come``: a snooze's reminder, a card's update), and a
recalled row what it did. Nothing is recalled until that page's POST
(``post=yes``) with a reason; rows are sorted again then, each recalled on its own, and
one failure never stops the others. The report says how many were recalled, and each
one that failed, and why.

Both need ``reminders.recall_sendlog`` and the permission to see the ledger, checked on
the server: without them there is no button and no action, and a POST (the button's
page, or the action forced on a list) is 403 and recalls nothing.

A message sent in parts (``SendLog.parts_sent``, the ids of the parts in the provider's
reply) says which parts went: how many and their message ids on its page
(``parts_state``), how many in the list's column; the filter "sent in parts" picks the
messages partly delivered: some parts went, not the rest (``partly_sent``, or in doubt
or being sent after some went). A message in one part says nothing of parts.

A digest's row (``engine.digests``) is the message of every run the digest carried,
which have no row of their own: its page lists them (``reminders.admin.digests``), and
recalling it takes back that one message, every run's line in it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.contrib.admin import ModelAdmin, SimpleListFilter, helpers
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import models
from django.db.models import Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.safestring import SafeString
from django.utils.text import Truncator
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from ..engine import recall as recalling
from ..exceptions import ActionRefused, SendError
from ..messages.digests import is_digest
from ..models import SendLog
from . import confirm, digests
from .confirm import Noun, Plan
from .display import ERROR_CHARS
from .read_only import ReadOnlyAdmin

if TYPE_CHECKING:
    from django.utils.functional import _StrPromise

logger = logging.getLogger(__name__)

RECALL_PERMISSION = "reminders.recall_sendlog"
RECALL_ACTION = "recall_messages"
RECALL_TEMPLATE = "admin/reminders/recall.html"
MESSAGE_NOUN: Noun = (_("message"), _("messages"))
# Characters of a message's text shown on the confirmation page.
GIST_CHARS = 300
# The list filter's "recalled in the last 24 hours", as the dashboard counts them.
DAY = timedelta(hours=24)

if TYPE_CHECKING:
    _Base = ModelAdmin[Any]
else:
    _Base = object


def may_recall(request: HttpRequest) -> bool:
    """Recalling, and seeing the ledger it acts on: one may act only on what one may see."""
    user = request.user
    return user.has_perm(RECALL_PERMISSION) and user.has_perm("reminders.view_sendlog")


def recall_url(log: SendLog, back: str = "") -> str:
    """The "Recall" button's page for ``log``; ``back``: where it returns (its run's page)."""
    url = reverse("admin:reminders_sendlog_recall", args=[log.pk])
    return f"{url}?{urlencode({'next': back})}" if back else url


# -- what the pages say about a row --------------------------------------------------------


def recall_state(log: SendLog) -> str:
    """Who recalled the message, when and why; or how far a recall that failed got, and
    what the provider said; "" for a message nobody tried to recall."""
    if log.recalled_at is not None:
        when = timezone.localtime(log.recalled_at)
        said = gettext("recalled by %(by)s, %(when)s: %(reason)s") % {
            "by": log.recalled_by,
            "when": f"{when:%Y-%m-%d %H:%M}",
            "reason": log.recall_reason,
        }
        if log.recall_cancelled:
            said += "; " + gettext("cancelled with it: %(what)s") % {"what": log.recall_cancelled}
        return said
    done, parts = len(log.recalled_ids or []), len(recalling.message_ids(log))
    if log.recall_error:
        return gettext("recall failed, %(done)d of %(parts)d parts recalled: %(error)s") % {
            "done": done,
            "parts": parts,
            "error": log.recall_error,
        }
    if done:
        return gettext("partly recalled: %(done)d of %(parts)d parts") % {
            "done": done,
            "parts": parts,
        }
    return ""


def recall_cell(log: SendLog) -> str:
    """``recall_state`` cut to fit a row, the whole of it on hover; "-" for none."""
    state = recall_state(log)
    if not state:
        return "-"
    return format_html('<span title="{}">{}</span>', state, Truncator(state).chars(ERROR_CHARS))


def parts_state(log: SendLog) -> str:
    """Which parts of a message sent in parts went: how many, and their message ids;
    "" for a message in one part."""
    if log.status != SendLog.Status.SENT and log.parts_sent:
        count, ids = len(log.parts_sent), log.parts_sent
        said = ngettext(
            "%(count)d part delivered so far: %(ids)s",
            "%(count)d parts delivered so far: %(ids)s",
            count,
        )
    else:
        ids = recalling.message_ids(log) if log.status == SendLog.Status.SENT else []
        count = len(ids)
        if count < 2:
            return ""
        said = gettext("All %(count)d parts delivered: %(ids)s")
    return said % {"count": count, "ids": ", ".join(str(part) for part in ids)}


def parts_cell(log: SendLog) -> str:
    """How many parts of a message sent in parts went, for the list: "2 so far" for one
    partly delivered, "3" for one delivered whole, "-" for a message in one part."""
    if log.status != SendLog.Status.SENT and log.parts_sent:
        return gettext("%(count)d so far") % {"count": len(log.parts_sent)}
    count = len(recalling.message_ids(log)) if log.status == SendLog.Status.SENT else 0
    return str(count) if count > 1 else "-"


def ledger_line(log: SendLog) -> SafeString:
    """A row in one line, linking to its page: its key, status, the provider's message id
    and, if any, its recall (a digest's item names the row of its digest so)."""
    line = format_html(
        '{}: <a href="{}">{}</a> ({}); {}: {}',
        SendLog._meta.get_field("key").verbose_name,
        reverse("admin:reminders_sendlog_change", args=[log.pk]),
        log.key,
        log.get_status_display(),
        SendLog._meta.get_field("provider_message_id").verbose_name,
        log.provider_message_id or "-",
    )
    state = recall_state(log)
    return format_html("{}; {}", line, state) if state else line


def gist(log: SendLog) -> str:
    """The words of the message, as far as a page needs them to tell it apart."""
    try:
        message = json.loads(log.body)
        body = message[message["msgtype"]]
    except (ValueError, KeyError, TypeError):
        return Truncator(log.body).chars(GIST_CHARS)
    texts: list[str] = []
    if isinstance(body, dict):
        title = body.get("main_title")
        if isinstance(title, dict):
            texts += [str(title.get("title") or ""), str(title.get("desc") or "")]
        for name in ("title", "content", "description", "sub_title_text"):
            if isinstance(body.get(name), str):
                texts.append(body[name])
    text = " ".join(t for t in texts if t) or log.body
    return Truncator(text).chars(GIST_CHARS)


def describe(log: SendLog) -> dict[str, Any]:
    """A row as the confirmation page lists it."""
    return {
        "log": log,
        "recipient": log.recipient,
        "channel": log.channel,
        "sent_at": log.sent_at,
        "parts": len(recalling.message_ids(log)),
        "gist": gist(log),
        "state": recall_state(log),
        "cancels": _cancels(log),
    }


def _cancels(log: SendLog) -> str:
    """What recalling ``log`` cancels with it, as the confirmation page says; ""."""
    what = recalling.still_to_come(log)
    if not what:
        return ""
    return gettext("Recalling it also cancels %(what)s.") % {"what": "; ".join(what)}


# -- the confirmation page and the recall itself ------------------------------------------


def recall_page(
    model_admin: ModelAdmin[Any],
    request: HttpRequest,
    plan: Plan[SendLog],
    *,
    left: Iterable[str] = (),
    selected: Iterable[models.Model] = (),
    action: str = "",
    back_url: str = "",
    error: str = "",
) -> TemplateResponse:
    """What will be recalled, what will not and why, and the form that asks why and
    posts the same selection back with ``post=yes``: to the list for the action (its
    ``action`` and ``selected``), else to the page's own URL."""
    count = len(plan.apply)
    will = ngettext(
        "%(count)d message will be taken back from its recipient: it disappears from "
        "their WeCom, where a notice says it was recalled. A message sent in parts is "
        "recalled whole. This cannot be undone.",
        "%(count)d messages will be taken back from their recipients: each disappears "
        "from its recipient's WeCom, where a notice says it was recalled. A message sent "
        "in parts is recalled whole. This cannot be undone.",
        count,
    ) % {"count": count}
    context = {
        **model_admin.admin_site.each_context(request),
        "title": ngettext("Recall a message", "Recall messages", max(count, 1)),
        "opts": model_admin.model._meta,
        "will": will,
        "left": [*left, *confirm.left_lines(plan, MESSAGE_NOUN)],
        "objects": [describe(log) for log in plan.apply[: confirm.LISTED]],
        "more": max(0, count - confirm.LISTED),
        "nothing": not plan.apply,
        "action": action,
        "selected": [obj.pk for obj in selected],
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "back_url": back_url,
        "reason": request.POST.get("reason", "") if request.method == "POST" else "",
        "error": error,
        "confirm_label": gettext("Yes, recall"),
    }
    request.current_app = model_admin.admin_site.name
    return TemplateResponse(request, RECALL_TEMPLATE, context)


def sort(logs: Iterable[SendLog]) -> Plan[SendLog]:
    """The rows ``engine.recall`` would recall now, and the others by its reason."""
    now = timezone.now()
    return Plan.sort(logs, lambda log: recalling.refusal(log, now))


def recall_all(
    model_admin: ModelAdmin[Any],
    request: HttpRequest,
    plan: Plan[SendLog],
    reason: str,
    *,
    left: Iterable[str] = (),
) -> int:
    """Recall each row of ``plan`` in turn, and report: how many were recalled, the rows
    left and why, and every failure with what the provider said. One row's failure,
    whatever it is, never stops the others. Returns how many were recalled."""
    by = request.user.get_username()
    done = 0
    failures: list[str] = []
    for log in list(plan.apply):
        try:
            recalling.recall(log, by=by, reason=reason)
        except ActionRefused as exc:  # it changed since it was read
            plan.apply.remove(log)
            plan.leave([log], exc.message)
            continue
        except (SendError, ValidationError) as exc:
            failures.append(_failure(log, exc))
            continue
        except Exception as exc:  # a sender's bug: said, logged, and the others go on
            logger.exception("recall of send log %s failed", log.pk)
            failures.append(_failure(log, exc))
            continue
        done += 1
    message = ngettext("%(count)d message recalled.", "%(count)d messages recalled.", done) % {
        "count": done
    }
    model_admin.message_user(request, message, messages.SUCCESS if done else messages.WARNING)
    for line in left:
        model_admin.message_user(request, line, messages.WARNING)
    for line in confirm.left_lines(plan, MESSAGE_NOUN):
        model_admin.message_user(request, line, messages.WARNING)
    for line in failures:
        model_admin.message_user(request, line, messages.ERROR)
    return done


def _failure(log: SendLog, exc: Exception) -> str:
    """A recall that failed: which message, why (for the provider's refusal, the part
    and what it said, as the row keeps it), and how far it got."""
    log.refresh_from_db()
    if isinstance(exc, SendError) and log.recall_error:
        why = log.recall_error
    elif isinstance(exc, ValidationError):
        why = "; ".join(str(message) for message in exc.messages)
    elif isinstance(exc, SendError):
        why = str(exc)
    else:
        why = f"{type(exc).__name__}: {exc}"
    line = gettext("Not recalled: the message to %(recipient)s (%(key)s): %(why)s") % {
        "recipient": log.recipient,
        "key": log.key,
        "why": why,
    }
    done, parts = len(log.recalled_ids or []), len(recalling.message_ids(log))
    if done:
        line += " " + gettext(
            "%(done)d of its %(parts)d parts were recalled; recall it again for the rest."
        ) % {"done": done, "parts": parts}
    return line


def reason_of(request: HttpRequest) -> str:
    return request.POST.get("reason", "").strip()


def reason_required() -> str:
    return gettext("Say why: the reason is kept with the message in the send log.")


class RecallMixin(_Base):
    """For the ledger's and the runs' admins: the recall permission and its action."""

    def has_recall_permission(self, request: HttpRequest) -> bool:
        return may_recall(request)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # The action is not offered without the permission; forced, it is refused
        # outright rather than taken for no action at all.
        forced = request.method == "POST" and request.POST.get("action") == RECALL_ACTION
        if forced and not self.has_recall_permission(request):
            raise PermissionDenied
        return super().changelist_view(request, extra_context)

    def recall_selected(
        self,
        request: HttpRequest,
        logs: QuerySet[SendLog],
        selected: QuerySet[Any],
        *,
        left: Iterable[str] = (),
    ) -> HttpResponse | None:
        """The action on ``logs`` (from the ``selected`` rows of the list): its page,
        or, confirmed with a reason, the recalls and their report."""
        left = list(left)
        plan = sort(logs.order_by("pk"))
        if confirm.confirmed(request):
            reason = reason_of(request)
            if reason:
                recall_all(self, request, plan, reason, left=left)
                return None
            error = reason_required()
        else:
            error = ""
        return recall_page(
            self, request, plan, left=left, selected=selected, action=RECALL_ACTION, error=error
        )


class RecalledFilter(SimpleListFilter):
    """Rows by recall: recalled, one that failed or is partly done, or neither."""

    title = _("recall")
    parameter_name = "recall"

    def lookups(
        self, request: HttpRequest, model_admin: ModelAdmin[Any]
    ) -> list[tuple[str, str | _StrPromise]]:
        return [
            ("day", _("in the last 24 hours")),
            ("yes", _("recalled")),
            ("failed", _("recall failed or partly done")),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value == "day":
            since = timezone.now() - DAY
            return queryset.filter(recalled_at__gt=since)
        if value == "yes":
            return queryset.filter(recalled_at__isnull=False)
        if value == "failed":
            return queryset.filter(recalled_at__isnull=True).filter(
                ~Q(recall_error="") | Q(recalled_ids__isnull=False)
            )
        return queryset


def _insert_after(fields: list[Any], after: str, name: str) -> None:
    """``name`` in ``fields`` right after ``after``, or last without it."""
    fields.insert(fields.index(after) + 1 if after in fields else len(fields), name)


class PartsFilter(SimpleListFilter):
    """Messages sent in parts of which some went and the rest did not (yet): the row
    ``partly_sent``, or in doubt (or being sent) after some parts went."""

    title = _("sent in parts")
    parameter_name = "parts"

    def lookups(
        self, request: HttpRequest, model_admin: ModelAdmin[Any]
    ) -> list[tuple[str, str | _StrPromise]]:
        return [("partly", _("partly delivered"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "partly":
            return queryset.filter(parts_sent__isnull=False).exclude(status=SendLog.Status.SENT)
        return queryset


@admin.register(SendLog)
class SendLogAdmin(RecallMixin, ReadOnlyAdmin):
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
        "parts",
        "recall",
    )
    readonly_fields = ("recall", "digest_items", "parts_delivered")
    list_filter = ("status", "channel", PartsFilter, RecalledFilter)
    list_select_related = ("task",)
    search_fields = ("key", "recipient", "provider_message_id")
    ordering = ("-created_at", "-pk")
    actions = (RECALL_ACTION,)

    @admin.display(description=_("recall"), ordering="recalled_at")
    def recall(self, log: SendLog) -> str:
        return recall_cell(log)

    @admin.display(description=_("parts delivered"))
    def parts(self, log: SendLog) -> str:
        return parts_cell(log)

    @admin.display(description=_("parts delivered"))
    def parts_delivered(self, log: SendLog) -> str:
        return parts_state(log) or "-"

    def get_fields(self, request: HttpRequest, obj: SendLog | None = None) -> list[Any]:
        """A digest's row lists the runs it carried, after its run; other rows do not. A
        message sent in parts says which went (``parts_state``) where its raw
        ``parts_sent`` would be; a message in one part says nothing of parts."""
        hidden = ("digest_items", "parts_sent", "parts_delivered")
        fields = [f for f in super().get_fields(request, obj) if f not in hidden]
        if obj is not None and parts_state(obj):
            _insert_after(fields, "provider_message_id", "parts_delivered")
        if obj is not None and obj.task is not None and is_digest(obj.task):
            _insert_after(fields, "run", "digest_items")
        return fields

    @admin.display(description=_("runs in this digest"))
    def digest_items(self, log: SendLog) -> str:
        return digests.items_of(log.run)

    def get_urls(self) -> list[URLPattern]:
        recall = path(
            "<path:object_id>/recall/",
            self.admin_site.admin_view(self.recall_view),
            name="reminders_sendlog_recall",
        )
        return [recall, *super().get_urls()]

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        extra = dict(extra_context or {})
        log = self.get_object(request, unquote(object_id))
        if log is not None and self.has_recall_permission(request):
            extra["recall_urls"] = [recall_url(log)] if recalling.why_not(log) is None else []
        return super().change_view(request, object_id, form_url, extra)

    @admin.action(permissions=["recall"], description=_("Recall the selected messages"))
    def recall_messages(
        self, request: HttpRequest, queryset: QuerySet[SendLog]
    ) -> HttpResponse | None:
        return self.recall_selected(request, queryset, queryset)

    def recall_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The "Recall" button's confirmation page, and its POST."""
        if not self.has_recall_permission(request):
            raise PermissionDenied
        log = self.get_object(request, unquote(object_id))
        if log is None:
            raise Http404
        back = request.GET.get("next", "")
        if not url_has_allowed_host_and_scheme(
            back, allowed_hosts={request.get_host()}, require_https=request.is_secure()
        ):
            back = ""
        back = back or reverse("admin:reminders_sendlog_change", args=[log.pk])
        error = ""
        if confirm.confirmed(request):
            reason = reason_of(request)
            if reason:
                self._recall_one(request, log, reason)
                return HttpResponseRedirect(back)
            error = reason_required()
        return recall_page(self, request, sort([log]), back_url=back, error=error)

    def _recall_one(self, request: HttpRequest, log: SendLog, reason: str) -> None:
        try:
            recalling.recall(log, by=request.user.get_username(), reason=reason)
        except ActionRefused as exc:
            self.message_user(
                request,
                gettext("The message was not recalled: %(why)s.") % {"why": exc.message},
                messages.ERROR,
            )
        except (SendError, ValidationError) as exc:
            self.message_user(request, _failure(log, exc), messages.ERROR)
        else:
            self.message_user(
                request,
                gettext("The message to %(recipient)s was recalled.")
                % {"recipient": log.recipient},
                messages.SUCCESS,
            )
