"""``python manage.py ops_alerts``: one alert step, or ``--loop`` one every
``OPS_ALERT_INTERVAL_SECONDS`` until SIGTERM or SIGINT.

Run it apart from ``run_reminders`` (a cron job every minute, or one ``--loop`` process
under systemd): it is what tells ops when every scheduler is gone. Any number may run.
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType
from typing import Any

from django.core.management.base import CommandParser
from django.db import close_old_connections
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from ops.alerts import StepResult, run_step
from ops.conf import settings as conf
from reminders.management.base import TranslatedCommand

logger = logging.getLogger("ops.alerts")


class Command(TranslatedCommand):
    help = gettext_noop("Evaluate the alert checks, group events into alerts and deliver them.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--loop", action="store_true", help=_("Run a step every interval."))
        parser.add_argument(
            "--interval", type=float, default=None, help=_("Seconds between steps (--loop).")
        )

    def handle(
        self, *args: Any, loop: bool = False, interval: float | None = None, **options: Any
    ) -> None:
        if not loop:
            self._report(run_step())
            return
        stopping = threading.Event()

        def stop(signum: int, frame: FrameType | None) -> None:
            stopping.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, stop)
        seconds = conf.ALERT_INTERVAL_SECONDS if interval is None else interval
        while not stopping.is_set():
            close_old_connections()
            try:
                self._report(run_step())
            except Exception:
                # The database went away, a setting broke: say so, try again next step.
                logger.exception("alert step failed; trying again in %s s", seconds)
            stopping.wait(seconds)

    def _report(self, result: StepResult) -> None:
        if result.checked or result.opened or result.sent or result.failed or result.pruned:
            self.stdout.write(
                _(
                    "%(checked)d events from checks, %(opened)d alerts opened, "
                    "%(sent)d deliveries sent, %(failed)d failed, "
                    "%(pruned)d old alerts deleted"
                )
                % {
                    "checked": result.checked,
                    "opened": len(result.opened),
                    "sent": result.sent,
                    "failed": result.failed,
                    "pruned": result.pruned,
                }
            )
