"""The ledger against WeCom's own count: once a day, for every WeCom app the channels
send as, our count of yesterday's messages against WeCom's ``message/get_statistics``.

``check_statistics`` is part of the alert step (``ops.alerts.run_step``): from
``OPS_STATISTICS_HOUR`` of each Beijing day it compares the day before, once per app
and day (a ``StatisticsCheck`` row, unique per day and app, however many steps run),
and records an alert event when the counts differ by more than the tolerance
(``OPS_STATISTICS_TOLERANCE``, ``OPS_STATISTICS_TOLERANCE_RATIO``), or when WeCom could
not be asked. A failure to ask is recorded, alerted and never raised: the rest of the
step goes on.

A check WeCom did not answer (unreachable, an error reply: ``unavailable``) is asked
again ``RETRY_AFTER`` (an hour) after its last attempt, in the same row, until the
Beijing day ends: after midnight WeCom's "yesterday" is another day, and that day's
count can no longer be asked. One step takes a retry (a compare-and-set on the row's
``checked_at``), however many run. The failure is alerted once per app and day,
however many attempts fail (the event's key is the day's); a difference found by a
later attempt is alerted on its own key; a check that got WeCom's answer is never
asked again.

What is counted, on both sides, is what WeCom counts (发消息成功人次, per app and Beijing
day; WeCom's days are Beijing's whatever ``TIME_ZONE`` says):

* ours: the ledger's ``sent`` rows of the app's channels (every alias whose sender has
  that corp and agent id: several may share one app) whose ``sent_at`` falls on that
  day, however long before it the row was reserved (``created_at``: a message may wait
  days for its send), each counting its parts (``reply_detail["parts"]``: each part of a
  split text is a message of its own to WeCom). A card WeCom answered "delivered
  before" (42014) counts once, like any row: WeCom counted the attempt that delivered
  it, not the retry it refused; a re-send WeCom's duplicate check dropped is one row and
  one message too. Plus the alerts delivered that day through an alert channel that
  sends by one of those channels (``ReminderChannel``; ``AlertDelivery.sent_at``): they
  have no ledger row, and WeCom counts them. So a mismatch told through the app is
  counted on the day it went, on both sides, and never makes the next day's mismatch.
* WeCom's: the app's ``count`` for yesterday (``time_type`` 1), asked through the
  channel's sender (``message_statistics``).

What makes them differ, besides a fault: a split text whose later part failed (the row
is ``failed``, its first parts arrived), a message in doubt (``unknown``: WeCom may have
it), a message sent by something else than reminders as the same app, and a send whose
attempt and record straddle midnight. The tolerance is there for those.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from django.db import IntegrityError, transaction
from django.db.models import Count, F, IntegerField, Q, Sum
from django.db.models.fields.json import KT
from django.db.models.functions import Cast

from reminders import senders
from reminders.models import SendLog

from . import alert_channels
from .conf import settings as conf
from .models import AlertDelivery, AlertEvent, AlertType, StatisticsCheck

logger = logging.getLogger(__name__)

# WeCom's days.
BEIJING = ZoneInfo("Asia/Shanghai")
# A check WeCom did not answer is asked again this long after its last attempt. The
# alert step runs every minute or so: asking at each step would call an API that is down
# (or refusing our credentials) hundreds of times a night, and log each. An hour bounds
# that to the 23 hours left of the day at most, per app, and still gives an outage of a
# few hours (ours or WeCom's, the usual kind) many chances to pass before midnight.
RETRY_AFTER = timedelta(hours=1)


@dataclass(frozen=True)
class App:
    """A WeCom app our channels send as: its ids and the aliases that send as it."""

    corp_id: str
    agent_id: str
    channels: tuple[str, ...]

    @property
    def scope(self) -> str:
        return f"{self.corp_id}/{self.agent_id}"


def wecom_apps() -> list[App]:
    """Every app the configured channels send as, once, with all its aliases; a
    channel whose sender cannot ask WeCom's count (not a WeCom app) or cannot be built
    (the reminders system checks say why) is left out."""
    found: dict[tuple[str, str], list[str]] = {}
    for alias in senders.aliases():
        try:
            sender = senders.get_sender(alias)
        except Exception as exc:
            logger.debug("channel %s left out of WeCom's counts: %s", alias, exc)
            continue
        if not callable(getattr(sender, "message_statistics", None)):
            continue
        corp_id, agent_id = (
            str(getattr(sender, "corp_id", "")),
            str(getattr(sender, "agent_id", "")),
        )
        if corp_id and agent_id:
            found.setdefault((corp_id, agent_id), []).append(alias)
    return [App(corp, agent, tuple(aliases)) for (corp, agent), aliases in found.items()]


def beijing_day_bounds(day: date) -> tuple[datetime, datetime]:
    start = datetime.combine(day, time(), BEIJING)
    return start, start + timedelta(days=1)


def our_count(channels: Iterable[str], day: date) -> int:
    """Messages the ``channels`` sent on Beijing day ``day``: the ledger's, a split text
    counting its parts, and the alerts sent through them."""
    start, end = beijing_day_bounds(day)
    return sent_messages(channels, start, end) + alerts_sent(channels, start, end)


def sent_messages(channels: Iterable[str], start: datetime, end: datetime) -> int:
    """One query: the ledger's messages of ``channels`` sent in ``[start, end)``, a split
    text counting its parts, whenever their rows were reserved."""
    split = Q(reply_detail__parts__gt=1)
    got = SendLog.objects.filter(
        status=SendLog.Status.SENT,
        channel__in=list(channels) or [""],
        sent_at__gte=start,
        sent_at__lt=end,
    ).aggregate(
        rows=Count("pk"),
        split=Count("pk", filter=split),
        parts=Sum(Cast(KT("reply_detail__parts"), IntegerField()), filter=split),
    )
    return int(got["rows"] - got["split"] + (got["parts"] or 0))


def alerts_sent(channels: Iterable[str], start: datetime, end: datetime) -> int:
    """One query: the alerts sent in ``[start, end)`` through the alert channels that
    send by one of ``channels`` (``OPS_ALERT_CHANNELS`` as configured now), none of
    which a ledger row has: a text alert delivered is one message WeCom counts, and an
    alert card (``alert_cards.WeComCards``) one a member it reached (its update, none).
    Without such an alert channel, "" (never an alias) keeps the query, so that its
    callers' counts stay fixed."""
    texts = alert_channels.through(channels) or [""]
    cards = alert_channels.through(channels, alert_channels.AlertChannel.CARDS) or [""]
    sent = Q(status=AlertDelivery.Status.SENT, sent_at__gte=start, sent_at__lt=end)
    got = AlertDelivery.objects.filter(channel__in=[*texts, *cards]).aggregate(
        texts=Count("pk", filter=sent & Q(channel__in=texts), distinct=True),
        cards=Count(
            "cards",
            filter=Q(channel__in=cards, cards__sent_at__gte=start, cards__sent_at__lt=end),
        ),
    )
    return int(got["texts"] + got["cards"])


def due_day(now: datetime) -> date | None:
    """The Beijing day to compare at ``now``: yesterday, from ``OPS_STATISTICS_HOUR``."""
    here = now.astimezone(BEIJING)
    if here.hour < conf.STATISTICS_HOUR:
        return None
    return here.date() - timedelta(days=1)


def check_statistics(now: datetime) -> int:
    """Compare yesterday's counts of every app not compared yet, or whose last attempt
    WeCom did not answer ``RETRY_AFTER`` ago; returns the alert events recorded."""
    if not conf.STATISTICS_CHECK:
        return 0
    day = due_day(now)
    if day is None:
        return 0
    recorded = 0
    for app in wecom_apps():
        found = StatisticsCheck.objects.filter(
            day=day, corp_id=app.corp_id, agent_id=app.agent_id
        ).first()
        if found is None:
            check = compare(app, day, now)
        elif retry_due(found, now):
            check = retry(app, found, now)
        else:
            continue
        if check is not None:
            recorded += alert(app, check, now)
    return recorded


def retry_due(check: StatisticsCheck, now: datetime) -> bool:
    """Whether to ask WeCom again for ``check``: it did not answer, an hour ago or more."""
    return (
        check.outcome == StatisticsCheck.Outcome.UNAVAILABLE
        and now >= check.checked_at + RETRY_AFTER
    )


def ask(app: App, day: date) -> dict[str, Any]:
    """Our count and WeCom's of ``day``, as a check's fields: its outcome, or
    ``unavailable`` with the error when WeCom did not answer."""
    ours = our_count(app.channels, day)
    values: dict[str, Any] = {"ours": ours, "channels": ",".join(app.channels)[:255]}
    try:
        reply = senders.get_sender(app.channels[0]).message_statistics(1)  # type: ignore[attr-defined]
        theirs = int(reply["count"])
    except Exception as exc:
        logger.warning("WeCom's count of app %s for %s not available: %s", app.scope, day, exc)
        return values | {
            "theirs": None,
            "outcome": StatisticsCheck.Outcome.UNAVAILABLE,
            "error": str(exc)[:2000],
        }
    tolerance = conf.statistics_tolerance(ours, theirs)
    difference = abs(theirs - ours)
    if difference == 0:
        outcome = StatisticsCheck.Outcome.MATCH
    elif difference <= tolerance:
        outcome = StatisticsCheck.Outcome.WITHIN_TOLERANCE
    else:
        outcome = StatisticsCheck.Outcome.MISMATCH
    return values | {
        "theirs": theirs,
        "app_name": str(reply.get("app_name") or "")[:128],
        "tolerance": tolerance,
        "outcome": outcome,
        "error": "",
    }


def compare(app: App, day: date, now: datetime) -> StatisticsCheck | None:
    """Ask WeCom, count ours, and record the day's check; None when another step
    recorded it first."""
    values = ask(app, day)
    try:
        with transaction.atomic():
            return StatisticsCheck.objects.create(
                day=day, corp_id=app.corp_id, agent_id=app.agent_id, checked_at=now, **values
            )
    except IntegrityError:  # another step compared this app's day first
        return None


def retry(app: App, check: StatisticsCheck, now: datetime) -> StatisticsCheck | None:
    """Ask WeCom again for a check it did not answer, and record the answer in its row;
    None when another step took this retry (or answered the check) first."""
    taken = StatisticsCheck.objects.filter(
        pk=check.pk, outcome=StatisticsCheck.Outcome.UNAVAILABLE, checked_at=check.checked_at
    ).update(checked_at=now, attempts=F("attempts") + 1)
    if not taken:
        return None
    StatisticsCheck.objects.filter(pk=check.pk).update(**ask(app, check.day))
    check.refresh_from_db()
    return check


def alert(app: App, check: StatisticsCheck, now: datetime) -> int:
    """The alert event a check calls for (a mismatch, or WeCom not reached), once each
    per app and day."""
    day = check.day.isoformat()
    data = {
        "day": day,
        "corp_id": app.corp_id,
        "agent_id": app.agent_id,
        "app_name": check.app_name,
        "channels": list(app.channels),
        "ours": check.ours,
        "theirs": check.theirs,
        "tolerance": check.tolerance,
        "check_id": check.pk,
    }
    # The day's key: a failure is told once, however many attempts fail; a difference
    # found by a later attempt has a key of its own, so it is told too.
    key = f"statistics:{app.scope}:{day}"
    if check.outcome == StatisticsCheck.Outcome.MISMATCH:
        key += ":mismatch"
        alert_type = AlertType.STATISTICS_MISMATCH
        message = (
            f"{day}: WeCom counted {check.theirs} messages from app {app.scope}"
            f"{f' ({check.app_name})' if check.app_name else ''}, our ledger {check.ours} "
            f"(tolerance {check.tolerance})."
        )
        code = "mismatch"
    elif check.outcome == StatisticsCheck.Outcome.UNAVAILABLE:
        alert_type = AlertType.STATISTICS_UNAVAILABLE
        message = (
            f"{day}: WeCom's count of app {app.scope} could not be asked ({check.error}); "
            f"our ledger {check.ours}."
        )
        code = "unavailable"
        data["error"] = check.error
    else:
        return 0
    recorded = AlertEvent.objects.record_once(
        key,
        alert_type,
        occurred_at=now,
        scope=app.scope,
        code=code,
        message=message,
        data=data,
    )
    return int(recorded)
