"""What a task's change form shows about it, read-only: its next occurrences, its
last run and its runs, as HTML for the admin's read-only fields.

The occurrences are ``ScheduledTask.upcoming``'s, the scheduler's own computation (the
task's zone, the stagger, the calendar's days off), so what the page says is what will
happen. The runs are the task's own rows, so that the page never says "none" of runs
it has: the next ``UPCOMING`` planned ahead and the last ``RECENT_RUNS`` due by now,
newest first, each linking to its page. Its last run is when a message last went (an
attempt), or, before any, how many of its runs wait.
"""

from __future__ import annotations

from datetime import datetime

from django.urls import reverse
from django.utils.formats import date_format
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.text import Truncator
from django.utils.translation import gettext, ngettext

from .. import calendars
from ..engine import planning
from ..engine.planning import Upcoming
from ..exceptions import UnplannableTask
from ..models import ScheduledTask, TaskRun
from ..schedule import readable, timing

# How many of a task's runs its change form lists, and how many occurrences ahead.
RECENT_RUNS = 20
UPCOMING = 5
# Characters of a run's error shown in a row.
ERROR_CHARS = 80


def upcoming(task: ScheduledTask, now: datetime) -> str:
    """The next occurrences in the task's zone, exactly as the scheduler plans them;
    those the working-day calendar skips say so."""
    if task.pk is None:
        return "-"
    if task.status in ScheduledTask.ENDED:
        return gettext("None: the task has ended.")
    try:
        upcoming = planning.upcoming(task, now, UPCOMING)
    except UnplannableTask as exc:
        return gettext("Cannot be planned: %(reason)s") % {"reason": exc.message}
    if not upcoming:
        return gettext("None: the schedule has no occurrence left.")
    items = format_html_join("", "<li>{}</li>", ((_occurrence_line(task, u),) for u in upcoming))
    note = ""
    if task.status == ScheduledTask.Status.PAUSED:
        note = gettext("The task is paused: none of these is sent until it is resumed.")
    elif task.status == ScheduledTask.Status.ERROR:
        note = gettext("The task is in error: none of these is sent until it is resumed.")
    return format_html(
        '{}<ol class="reminders-upcoming">{}</ol>{}',
        gettext("In %(zone)s:") % {"zone": task.timezone},
        items,
        note,
    )


def last_run(task: ScheduledTask) -> str:
    """When the task's last message went, in its zone; before any, how many of its runs
    wait, so that "-" never sits above runs it has."""
    if task.last_run_at is not None:
        return readable.moment(task.last_run_at, task.timezone)
    waiting = task.runs.filter(status__in=TaskRun.UNFINISHED).count()
    if not waiting:
        return "-"
    return ngettext("Not yet: %(count)d run waits.", "Not yet: %(count)d runs wait.", waiting) % {
        "count": waiting
    }


def recent_runs(task: ScheduledTask, now: datetime) -> str:
    """The task's runs, newest first, each linking to its page: the next ``UPCOMING``
    planned ahead of ``now``, then the last ``RECENT_RUNS`` due by now."""
    if task.pk is None:
        return "-"
    ahead = task.runs.filter(due_at__gt=now).order_by("due_at", "pk")[:UPCOMING]
    past = task.runs.filter(due_at__lte=now).order_by("-due_at", "-pk")[:RECENT_RUNS]
    runs = [*reversed(list(ahead)), *past]
    rows = format_html_join("", "<tr>{}</tr>", ((_run_row(task, run),) for run in runs))
    if not rows:
        return gettext("None yet.")
    head = format_html_join(
        "",
        "<th>{}</th>",
        (
            (label,)
            for label in (
                gettext("occurrence"),
                gettext("due"),
                gettext("status"),
                gettext("attempts"),
                gettext("error code"),
                gettext("error"),
                gettext("finished"),
            )
        ),
    )
    return format_html(
        '{}<table class="reminders-recent-runs"><thead><tr>{}</tr></thead><tbody>{}</tbody>'
        "</table>",
        gettext("In %(zone)s:") % {"zone": task.timezone},
        head,
        rows,
    )


def _occurrence_line(task: ScheduledTask, upcoming: Upcoming) -> str:
    """One occurrence ahead: its local date, weekday and time; its due time if staggered;
    and the calendar's day off that skips it."""
    local = upcoming.occurrence.astimezone(timing.zone(task.timezone))
    line = f"{local:%Y-%m-%d} {date_format(local, 'D')} {local:%H:%M}"
    if upcoming.due_at != upcoming.occurrence:
        due = upcoming.due_at.astimezone(timing.zone(task.timezone))
        line += " " + gettext("(due %(time)s)") % {"time": f"{due:%H:%M:%S}"}
    off = upcoming.day_off
    if off is not None and off.code == calendars.HOLIDAY:
        line += " " + gettext("(holiday: skipped)")
    elif off is not None:
        line += " " + gettext("(%(year)d not covered by the calendar: skipped)") % {
            "year": off.year
        }
    return line


def _run_row(task: ScheduledTask, run: TaskRun) -> SafeString:
    """One row of a task's recent runs, linking to the run."""
    zone = timing.zone(task.timezone)
    url = reverse("admin:reminders_taskrun_change", args=[run.pk])
    finished = f"{run.finished_at.astimezone(zone):%Y-%m-%d %H:%M:%S}" if run.finished_at else "-"
    return format_html(
        '<td><a href="{}">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>'
        "<td>{}</td><td>{}</td>",
        url,
        f"{run.occurrence.astimezone(zone):%Y-%m-%d %H:%M:%S}",
        f"{run.due_at.astimezone(zone):%Y-%m-%d %H:%M:%S}",
        run.get_status_display(),
        run.attempts,
        run.error_code or "-",
        Truncator(run.error_message).chars(ERROR_CHARS) or "-",
        finished,
    )
