"""What the run history and the ledger say of digests (``engine.digests``), read-only.

A digest is a run of its own, of a task the engine made (``messages.digests.is_digest``),
whose one message carries the runs folded into it: its items. So:

* an item's page names its digest: a link to the digest's run, and the digest's ledger
  rows (its idempotency key, its status, the provider's message id, a recall), for an
  item has no ledger row of its own: the digest's is its message;
* a digest's page, and its ledger row's, list its items, each linked to its page with
  its occurrence, the title the digest wrote for it and its status now;
* the runs' list tells them apart: a "digest" column (a digest, with how many runs it
  carries and a link to them; an item, with a link to its digest) and a filter
  (``filters.DigestFilter``).

The items are the runs that name the digest (``TaskRun.digest``), as the database has
them now, in the order of their occurrences; what the digest wrote of each is read from
its payload (``messages.digests.entry``), never recomputed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext, ngettext

from ..messages.digests import is_digest
from ..models import DIGEST_KEY, SendLog, TaskRun
from ..schedule import timing

# The query string of the runs' list filtered to one digest's items.
ITEMS_LOOKUP = "digest__id__exact"


def run_url(pk: int) -> str:
    return reverse("admin:reminders_taskrun_change", args=[pk])


def items_url(digest: TaskRun) -> str:
    """The runs' list showing ``digest``'s items."""
    return f"{reverse('admin:reminders_taskrun_changelist')}?{ITEMS_LOOKUP}={digest.pk}"


def listed(digest: TaskRun) -> list[dict[str, Any]]:
    """The items as the digest's payload lists them (none for a run that is no digest)."""
    payload = digest.task.payload
    try:
        items = payload[DIGEST_KEY]["items"]
    except (KeyError, TypeError):
        return []
    return [item for item in items if isinstance(item, dict)]


def cell(run: TaskRun) -> str:
    """The runs' list's "digest" column: a digest, with how many runs it carries linked
    to them; an item, linked to its digest; "-" for any other run."""
    if is_digest(run.task):
        count = len(listed(run))
        text = ngettext("digest of %(count)d run", "digest of %(count)d runs", count) % {
            "count": count
        }
        return format_html('<a href="{}">{}</a>', items_url(run), text)
    if run.digest_id is not None:
        text = gettext("in run %(run)s") % {"run": run.digest_id}
        return format_html('<a href="{}">{}</a>', run_url(run.digest_id), text)
    return "-"


def digest_of(run: TaskRun, ledger_line: Callable[[SendLog], SafeString]) -> str:
    """An item's digest: a link to its run and status, then each of its ledger rows (the
    message that carried the item) as ``ledger_line`` writes it."""
    digest = run.digest
    if digest is None:
        return "-"
    head = format_html(
        '<a href="{}">{}</a>',
        run_url(digest.pk),
        gettext("run %(run)s: %(status)s")
        % {"run": digest.pk, "status": digest.get_status_display()},
    )
    logs = list(SendLog.objects.filter(run=digest).order_by("pk"))
    if not logs:
        rows = format_html("<li>{}</li>", gettext("No ledger row: the digest has sent nothing."))
    else:
        rows = format_html_join("", "<li>{}</li>", ((ledger_line(log),) for log in logs))
    return format_html('{}<ul class="reminders-digest-ledger">{}</ul>', head, rows)


def items_of(digest: TaskRun | None) -> str:
    """The runs ``digest`` carries, each linked to its page, with its occurrence in its
    task's zone, what the digest wrote of it and its status now."""
    if digest is None or not is_digest(digest.task):
        return "-"
    wrote = {item.get("run"): item for item in listed(digest)}
    runs = TaskRun.objects.filter(digest=digest).select_related("task").order_by("occurrence", "pk")
    rows = format_html_join(
        "", "<tr>{}</tr>", ((_item_row(run, wrote.get(run.pk)),) for run in runs)
    )
    if not rows:  # its items were deleted (a retention shorter than the digest's)
        return "-"
    head = format_html_join(
        "",
        "<th>{}</th>",
        (
            (label,)
            for label in (
                gettext("run"),
                gettext("occurrence"),
                gettext("listed as"),
                gettext("status"),
            )
        ),
    )
    return format_html(
        '<table class="reminders-digest-items"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>',
        head,
        rows,
    )


def _item_row(run: TaskRun, entry: dict[str, Any] | None) -> SafeString:
    local = run.occurrence.astimezone(timing.zone(run.task.timezone))
    title = str((entry or {}).get("title") or "") or "-"
    return format_html(
        '<td><a href="{}">{}</a></td><td>{}</td><td>{}</td><td>{}</td>',
        run_url(run.pk),
        run.pk,
        f"{local:%Y-%m-%d %H:%M:%S}",
        title,
        run.get_status_display(),
    )
