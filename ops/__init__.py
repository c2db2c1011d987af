"""The operator's app: what ops staff see and are told about the reminders engine."""

from reminders.moved import install

# Old module paths, importable as their new homes with a warning (see reminders.moved).
MOVED: dict[str, str] = {
    "ops.stats_format": "ops.stats.format",
    "ops.stats_text": "ops.stats.text",
}

install(MOVED)
