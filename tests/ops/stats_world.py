"""A known fortnight of runs for the dashboard's tests, with every number worked out by
hand below.

The day is 2026-03-10 in Asia/Shanghai (UTC+8, no DST): from 2026-03-09 16:00 UTC to
2026-03-10 16:00 UTC; "now" is 15:00 that day. Runs are rows written directly with known
statuses and times, through no engine code.

Day D, by kind (times local; late = finished - due; dur = duration):

==  ===========  =========  ========  ====================  =========  ========
 #  kind         channel    due       status                late       dur
==  ===========  =========  ========  ====================  =========  ========
 1  follow_up    memory     09:00     sent                  2          0.5
 2  follow_up    memory     09:10     sent                  4          1.5
 3  follow_up    memory     09:20     sent                  10         1.0
 4  follow_up    memory     10:00     sent                  60         2.0
 5  follow_up    memory     10:30     failed recipient      (10:30:05)
 6  follow_up    memory     11:00     failed recipient      (11:00:03)
 7  follow_up    memory     11:30     unknown in_doubt      (11:31:00)
 8  follow_up    memory     14:00     scheduled (waiting, next attempt 14:00)
 9  follow_up    memory     23:59:59  scheduled (the day's last second)
10  follow_up    memory     00:00:00  sent                  1          0.25
11  follow_up    memory     12:00     cancelled
12  daily_report memory_d.  09:00     sent                  300        0.2
13  daily_report memory_d.  09:05     sent                  100        (none)
14  daily_report memory_d.  09:30     expired deadline      (12:00)
15  daily_report memory_d.  08:00     skipped holiday
16  birthday     memory     10:00     queued (high)
17  birthday     memory     10:01     running (high)
==  ===========  =========  ========  ====================  =========  ========

Outside the day: D-1 23:59:59 follow_up sent; D-3 follow_up 2 sent 1 failed and
daily_report 1 unknown; D-6 follow_up 1 expired; D-7 follow_up 5 sent 5 failed; D-13
follow_up 1 sent; D-14 and D+1 00:00 one sent each (outside every window).

Plan at now (due_at 30 days earlier, so outside every window; only the next attempt
matters): high (inquiry_timeout) scheduled at now+10 min and retrying since now-5 min;
low scheduled at now+59 min and at now+61 min (beyond the hour); a paused task's run
waiting since now-10 min (normal). With #8 (normal, waiting since 14:00), #9 (not in the
hour), #16 queued and #17 running (high).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from itertools import count
from typing import Any

from reminders.models import ScheduledTask, SchedulerHeartbeat, TaskRun

DAY = date(2026, 3, 10)
START = datetime(2026, 3, 9, 16, 0, tzinfo=UTC)
END = START + timedelta(days=1)
NOW = START + timedelta(hours=15)  # 15:00 local


def local(hh: int, mm: int = 0, ss: int = 0, days: int = 0) -> datetime:
    """A local time of day D (plus ``days``)."""
    return START + timedelta(days=days, hours=hh, minutes=mm, seconds=ss)


@dataclass
class World:
    tasks: dict[str, ScheduledTask] = field(default_factory=dict)
    runs: dict[str, TaskRun] = field(default_factory=dict)
    _n: Any = field(default_factory=lambda: count(1))

    def task(self, name: str, kind: str, channel: str, priority: str = "normal") -> None:
        self.tasks[name] = ScheduledTask.objects.create(
            kind=kind,
            recipient=f"user-{name}",
            channel=channel,
            cron="0 9 * * *",
            timezone="Asia/Shanghai",
            priority=priority,
        )

    def run(
        self,
        name: str,
        task: str,
        due: datetime,
        status: str,
        *,
        late: float | None = None,
        took: float | None = None,
        finished: datetime | None = None,
        code: str = "",
        message: str = "",
        next_attempt: datetime | None = None,
        rank: int = 1,
    ) -> TaskRun:
        n = next(self._n)
        fields: dict[str, Any] = {
            "task": self.tasks[task],
            "occurrence": due - timedelta(microseconds=n),
            "run_date": due.date(),
            "due_at": due,
            "status": status,
            "priority": rank,
            "ledger_key": f"{task}:{n}",
            "error_code": code,
            "error_message": message,
        }
        if status in TaskRun.FINISHED:
            if late is not None:
                finished = due + timedelta(seconds=late)
            fields["finished_at"] = finished or due
            fields["duration"] = timedelta(seconds=took) if took is not None else None
        elif status in TaskRun.WAITING:
            fields["next_attempt_at"] = next_attempt or due
        else:
            fields.update(lease_token="t", lease_expires_at=NOW + timedelta(minutes=5))
        self.runs[name] = TaskRun.objects.create(**fields)
        return self.runs[name]


def build(*, plan: bool = True, heartbeats: bool = True) -> World:
    w = World()
    w.task("f", "follow_up", "memory")
    w.task("r", "daily_report", "memory_dedup")
    w.task("b", "birthday", "memory", "high")
    w.run("1", "f", local(9), "sent", late=2, took=0.5)
    w.run("2", "f", local(9, 10), "sent", late=4, took=1.5)
    w.run("3", "f", local(9, 20), "sent", late=10, took=1.0)
    w.run("4", "f", local(10), "sent", late=60, took=2.0)
    w.run("5", "f", local(10, 30), "failed", finished=local(10, 30, 5), code="recipient",
          message="81013 user not found")  # fmt: skip
    w.run("6", "f", local(11), "failed", finished=local(11, 0, 3), code="recipient",
          message="81013 user xyz")  # fmt: skip
    w.run("7", "f", local(11, 30), "unknown", finished=local(11, 31), code="in_doubt",
          message="read timeout")  # fmt: skip
    w.run("8", "f", local(14), "scheduled")
    w.run("9", "f", local(23, 59, 59), "scheduled")
    w.run("10", "f", local(0), "sent", late=1, took=0.25)
    w.run("11", "f", local(12), "cancelled")
    w.run("12", "r", local(9), "sent", late=300, took=0.2)
    w.run("13", "r", local(9, 5), "sent", late=100)
    w.run("14", "r", local(9, 30), "expired", finished=local(12), code="deadline",
          message="Its deadline passed before it could be sent.")  # fmt: skip
    w.run("15", "r", local(8), "skipped", code="holiday", message="2026-03-10 is a holiday")
    w.run("16", "b", local(10), "queued", rank=0)
    w.run("17", "b", local(10, 1), "running", rank=0)
    # Other days.
    w.run("d-1", "f", local(23, 59, 59, days=-1), "sent", late=1)
    for i in range(2):
        w.run(f"d-3 sent {i}", "f", local(9, i, days=-3), "sent", late=1)
    w.run("d-3 failed", "f", local(10, days=-3), "failed", finished=local(10, days=-3), code="x")
    w.run("d-3 unknown", "r", local(9, days=-3), "unknown", finished=local(9, days=-3))
    w.run("d-6 expired", "f", local(9, days=-6), "expired", finished=local(12, days=-6))
    for i in range(5):
        w.run(f"d-7 sent {i}", "f", local(9, i, days=-7), "sent", late=1)
        w.run(f"d-7 failed {i}", "f", local(10, i, days=-7), "failed", code="x")
    w.run("d-13", "f", local(0, days=-13), "sent", late=1)
    w.run("d-14", "f", local(23, 59, 59, days=-14), "sent", late=1)
    w.run("d+1", "f", local(0, days=1), "sent", late=1)
    if plan:
        w.task("i", "inquiry_timeout", "memory", "high")
        w.task("low", "follow_up", "memory", "low")
        w.task("paused", "follow_up", "memory")
        ScheduledTask.objects.filter(pk=w.tasks["paused"].pk).update(status="paused")
        old = NOW - timedelta(days=30)
        w.run("p-high-soon", "i", old, "scheduled", next_attempt=NOW + timedelta(minutes=10),
              rank=0)  # fmt: skip
        w.run("p-high-due", "i", old - timedelta(hours=1), "retrying",
              next_attempt=NOW - timedelta(minutes=5), rank=0)  # fmt: skip
        w.run("p-low-soon", "low", old, "scheduled", next_attempt=NOW + timedelta(minutes=59),
              rank=2)  # fmt: skip
        w.run("p-low-later", "low", old - timedelta(hours=1), "scheduled",
              next_attempt=NOW + timedelta(minutes=61), rank=2)  # fmt: skip
        w.run("p-paused", "paused", old, "scheduled", next_attempt=NOW - timedelta(minutes=10))
    if heartbeats:
        for owner, host, pid, age in [("a:1", "alpha", 11, 5), ("b:2", "beta", 22, 300)]:
            at = NOW - timedelta(seconds=age)
            SchedulerHeartbeat.objects.beat(
                owner, host=host, pid=pid, started_at=at - timedelta(hours=1), now=at
            )
    return w
