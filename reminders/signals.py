"""What the engine tells the rest of the project; ``ops`` listens here.

Each is sent after the transaction that recorded the outcome has committed, with the
run as ``run`` (or the task as ``task``).
"""

from django.dispatch import Signal

run_sent = Signal()  # run, result (SendResult)
run_failed = Signal()  # run, error (SendError): retries exhausted or a permanent error
run_unknown = Signal()  # run: a worker died mid-send and a re-send was not safe
run_expired = Signal()  # run: its deadline passed before it could be sent; it never will be
run_stuck = Signal()  # run: still running after REMINDERS_RUN_TIMEOUT (told once per run)
task_error = Signal()  # task, code, message: one task cannot be planned or rendered
# task, calendar (its name), year: an occurrence fell in a year its working-day calendar
# does not cover yet, and was skipped (``calendar_uncovered``); sent for each one.
calendar_uncovered = Signal()
