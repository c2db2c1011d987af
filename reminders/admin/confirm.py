"""Confirmation pages and reports of the admin's state-changing actions.

Each action first shows what it will do with the selection: how many rows it applies
to, and how many it will leave, by reason. The reasons are the models' own (a
``Refusal`` from ``retry_refusal``, ``run_now_refusal``…), asked once per row, so the
page says exactly what the model methods will do. The same sorting is done again when
the operator confirms, since rows change meanwhile, and the report says what was done
and what was left, and why. The page never changes anything: only its POST with
``post=yes``, checked by the action against the same permissions, does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from django.contrib import messages
from django.contrib.admin import ModelAdmin, helpers
from django.db import models
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils.translation import gettext, ngettext

from ..engine.actions import Refusal

if TYPE_CHECKING:
    from django.utils.functional import _StrPromise

Row = TypeVar("Row", bound=models.Model)
# What an action acts on, singular and plural: ("run", "runs").
Noun = tuple["str | _StrPromise", "str | _StrPromise"]

TEMPLATE = "admin/reminders/confirm.html"
# Rows named on a confirmation page; the rest are counted.
LISTED = 50


def confirmed(request: HttpRequest) -> bool:
    """Whether the request is the confirmation page's POST."""
    return request.method == "POST" and request.POST.get("post") == "yes"


@dataclass
class Plan(Generic[Row]):
    """The rows an action applies to, and the others by the reason they are left."""

    apply: list[Row] = field(default_factory=list)
    left: dict[str, list[Row]] = field(default_factory=dict)

    @classmethod
    def sort(cls, rows: Iterable[Row], refusal: Callable[[Row], Refusal | None]) -> Plan[Row]:
        plan: Plan[Row] = cls()
        for row in rows:
            why = refusal(row)
            if why is None:
                plan.apply.append(row)
            else:
                plan.left.setdefault(str(why.message), []).append(row)
        return plan

    def leave(self, rows: Iterable[Row], why: str | _StrPromise) -> None:
        """Count ``rows`` as left for ``why`` (what the action does not look at)."""
        listed = list(rows)
        if listed:
            self.left.setdefault(str(why), []).extend(listed)


def left_lines(plan: Plan[Any], noun: Noun) -> list[str]:
    """One line per reason: "2 selected runs left as they were: <reason>."."""
    singular, plural = noun
    return [
        ngettext(
            "%(count)d selected %(noun)s left as it was: %(why)s.",
            "%(count)d selected %(noun)s left as they were: %(why)s.",
            len(rows),
        )
        % {"count": len(rows), "noun": singular if len(rows) == 1 else plural, "why": why}
        for why, rows in plan.left.items()
    ]


def page(
    model_admin: ModelAdmin[Any],
    request: HttpRequest,
    *,
    title: str,
    will: str,
    plan: Plan[Any],
    noun: Noun,
    selected: Iterable[models.Model] = (),
    action: str = "",
    back_url: str = "",
) -> TemplateResponse:
    """The confirmation page: what will happen (``will``), what is left and why, the
    rows it applies to, and a form that posts the same selection back with
    ``post=yes`` (to the changelist for an action, else to the page's own URL)."""
    opts = model_admin.model._meta
    context = {
        **model_admin.admin_site.each_context(request),
        "title": title,
        "opts": opts,
        "will": will,
        "left": left_lines(plan, noun),
        "objects": plan.apply[:LISTED],
        "more": max(0, len(plan.apply) - LISTED),
        "nothing": not plan.apply,
        "action": action,
        "selected": [obj.pk for obj in selected],
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "back_url": back_url,
        "confirm_label": gettext("Yes, do it"),
    }
    request.current_app = model_admin.admin_site.name
    return TemplateResponse(request, TEMPLATE, context)


def report(
    model_admin: ModelAdmin[Any],
    request: HttpRequest,
    done: str,
    count: int,
    plan: Plan[Any],
    noun: Noun,
) -> None:
    """What the action did (``done``, about ``count`` rows), then what it left and why."""
    model_admin.message_user(request, done, messages.SUCCESS if count else messages.WARNING)
    for line in left_lines(plan, noun):
        model_admin.message_user(request, line, messages.WARNING)
