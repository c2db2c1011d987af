"""When: a schedule's occurrences in a time zone and their stagger (``timing``), a cron
expression in words (``cron_text``), a kind's timing rules (``policies``), and quiet
hours and when they end (``quiet``).

Pure functions of their arguments and the settings: imports nothing of the app but its
exceptions, settings and translation helpers, so everything else may import it.
"""
