"""When: a schedule's occurrences in a time zone and their stagger (``timing``), a cron
expression in words (``cron_text``), and a kind's timing rules (``policies``).

Pure functions of their arguments and the settings: imports nothing of the app but its
exceptions, settings and translation helpers, so everything else may import it.
"""
