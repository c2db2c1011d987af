"""Summarize py-spy's collapsed stacks (``--format raw``) of a process tree.

    .venv/bin/python benchmarks/profile_summary.py FILE [--top 25]

Samples are grouped by role (scheduler loop, django-q2 pusher, worker, monitor, ...),
then the project's own functions, django-q2's broker calls and the time inside psycopg's
``Cursor.execute`` (database round trips) are listed by inclusive share.
``throughput.py --profile N`` writes the files and prints these summaries.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

# The innermost match wins: a django-q2 worker runs inside the forked cluster, which
# runs inside the scheduler process's ``_start_cluster``.
ROLES = [
    ("q worker", "worker (django_q/worker.py"),
    ("q pusher", "pusher (django_q/pusher.py"),
    ("q monitor", "monitor (django_q/monitor.py"),
    ("q sentinel", "(django_q/cluster.py"),
    ("scheduler", "(reminders/engine/worker.py"),
]
WATCHED = ("reminders/", "benchmarks/", "django_q/brokers/", "is_usable", "Cursor.execute (psycopg")
# Frames every sample of a role has: they say nothing.
SKIPPED = (
    "Command.handle",
    "ReminderWorker.run ",
    "_start_cluster",
    "_run_cluster",
    "_tick_safely",
)
LINE = re.compile(r":\d+\)$")


def role(frames: list[str]) -> str:
    for name, marker in ROLES:
        if any(marker in frame for frame in frames):
            return name
    return "other"


def summarize(path: Path, top: int = 25) -> str:
    by_role: Counter[str] = Counter()
    inclusive: Counter[tuple[str, str]] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        samples = int(count)
        frames = [f for f in stack.split(";") if not f.startswith(("process ", "thread "))]
        who = role(frames)
        total += samples
        by_role[who] += samples
        for frame in {LINE.sub(")", f) for f in frames}:
            if any(w in frame for w in WATCHED) and not any(k in frame for k in SKIPPED):
                inclusive[(who, frame)] += samples
    if not total:
        return f"{path.name}: no samples"
    out = [f"{path.name}: {total} samples", "  by process role:"]
    out += [f"    {n / total:6.1%}  {name}" for name, n in by_role.most_common()]
    out.append("  functions, inclusive share of all samples:")
    for (who, frame), n in inclusive.most_common(top):
        out.append(f"    {n / total:6.1%}  {who:10s}  {frame}")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    for path in args.files:
        print(summarize(path, args.top))


if __name__ == "__main__":
    main()
