"""Wake the schedulers when work falls due now, instead of leaving it to their next scan;
and the pushers of the engine's clusters when a claim queues a job.

A scheduler sleeps between ticks until the next moment it knows of, or at most
``REMINDERS_TICK_SECONDS``. Work made due now by another process (the CRM's web process
calling ``api.schedule(..., at=now)``, an operator resuming a task or retrying a run
from the admin) is not among the moments it knows of: ``notify`` tells it, and the
``Sleeper`` it sleeps in wakes. Invariants:

* On PostgreSQL, ``notify`` sends ``NOTIFY`` on ``CHANNEL`` only once the caller's
  transaction has committed (``transaction.on_commit``; at once in autocommit), so a
  scheduler never wakes to look for rows it cannot see yet, and work rolled back wakes
  nobody. ``notify`` never raises into the caller: a notification that cannot be sent
  is logged, and the work is found at the next tick as before.
* Each scheduler listens on a connection of its own (never Django's, which the tick
  uses and closes after an error), opened on the first wait. A wait ends when a
  notification arrives, when ``interrupt`` is called (from another thread or a signal
  handler: a self-pipe, so one called before the wait began still ends it), or at its
  timeout. Notifications that arrive while the scheduler ticks are kept by the server
  and end the next wait at once.
* A listening connection that breaks is logged and closed, never raised: the wait goes
  on as a plain timed wait, and a later wait connects again. A wait that (re)starts
  listening returns True at once, since what was notified while nobody listened is
  lost: the scheduler scans again, and from then on hears everything.
* The connection is closed before the scheduler forks (``disconnect``): a child must
  never share the socket. It is one more session per scheduler, and must keep its
  session: through a pooler, session pooling (``LISTEN`` is lost in transaction mode).
* On other databases (SQLite, MariaDB) there is nothing to listen to: ``notify`` does
  nothing, waits end only at their timeout or on ``interrupt``, and the tick
  (``REMINDERS_TICK_SECONDS``) is the bound, as it is for every database when a
  notification is lost.
* The same machinery, on channels of their own (``job_channel``: one per queue) and
  sessions named ``JOBS_APPLICATION_NAME``, lets the pushers of the engine's clusters
  wait for the jobs a claim queues instead of polling an empty queue
  (``reminders.engine.cluster``): one more session per pusher, opened in the pusher's
  own process (which never forks), the same invariants otherwise. ``notify`` sends a
  channel at most once per transaction, however many jobs (or tasks due) it commits.

This module imports nothing of the app but its settings, so that the models can use it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import DEFAULT_DB_ALIAS, Error, connections, transaction

if TYPE_CHECKING:
    import psycopg

logger = logging.getLogger(__name__)

# The PostgreSQL channel schedulers listen on.
CHANNEL = "reminders_due"
# How the listening sessions are named in ``pg_stat_activity`` (unless the database's
# OPTIONS name them otherwise).
APPLICATION_NAME = "reminders-wake"
# The channels the pushers of the engine's clusters listen on (``job_channel``), and how
# their sessions are named.
JOBS_CHANNEL_PREFIX = "reminders_jobs:"
JOBS_APPLICATION_NAME = "reminders-jobs"
# A silently dead link to the server (no reset ever arrives) is found by TCP keepalives
# within about a minute; until then waits are bounded by their timeout, as without it.
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10}
CONNECT_TIMEOUT = 5  # seconds; a wait must not hang on an unreachable server


def _listens(using: str) -> bool:
    return connections[using].vendor == "postgresql"


def job_channel(queue: str) -> str:
    """The channel the pushers reading ``queue`` listen on."""
    return f"{JOBS_CHANNEL_PREFIX}{queue}"


def notify(using: str = DEFAULT_DB_ALIAS, channel: str = CHANNEL) -> None:
    """Tell every scheduler that something just fell due (or, on a ``job_channel``, its
    pushers that a job was queued), once the current transaction on ``using`` commits (at
    once in autocommit); nothing if it rolls back. Once per channel and transaction. A
    no-op but on PostgreSQL; never raises."""
    if not _listens(using):
        return
    send = _Send(using, channel)
    if send in _pending(using):
        return
    try:
        transaction.on_commit(send, using=using, robust=True)
    except transaction.TransactionManagementError:
        # Manual transaction management: there is no commit to wait for.
        logger.warning("could not send %s outside a transaction or autocommit", channel)


def _pending(using: str) -> list[Any]:
    """What waits for the current transaction's commit on ``using`` (nothing known if
    Django keeps it otherwise: each notify then sends its own)."""
    callbacks = getattr(connections[using], "run_on_commit", None) or []
    try:
        return [entry[1] for entry in callbacks]
    except (TypeError, IndexError):
        return []


@dataclass(frozen=True)
class _Send:
    using: str
    channel: str

    def __call__(self) -> None:
        try:
            with connections[self.using].cursor() as cursor:
                cursor.execute("SELECT pg_notify(%s, '')", [self.channel])
        except Error:  # DatabaseError, and InterfaceError on a connection already closed
            if self.channel == CHANNEL:
                logger.warning(
                    "could not wake the schedulers; they find the work at their next tick",
                    exc_info=True,
                )
            else:
                logger.warning(
                    "could not notify %s; its pushers find the job at their next poll",
                    self.channel,
                    exc_info=True,
                )


class Sleeper:
    """What a scheduler sleeps in between ticks, and a pusher while its queue is empty
    (``channel``: ``job_channel``); see the module docstring.

    ``wait`` is for one thread (the scheduler's, the pusher's); ``interrupt`` for any
    thread or a signal handler.
    """

    def __init__(
        self,
        using: str = DEFAULT_DB_ALIAS,
        *,
        channel: str = CHANNEL,
        application_name: str = APPLICATION_NAME,
        what: str = "due work",
    ) -> None:
        self.using = using
        self.channel = channel
        self.application_name = application_name
        self.what = what  # what it listens for, as its log lines say
        self._listener: psycopg.Connection[Any] | None = None
        self._broken = False  # the last connection broke or could not be made
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)

    def wait(self, timeout: float, *, connect: bool = True) -> bool:
        """Sleep up to ``timeout`` seconds; True when woken by a notification or by
        ``interrupt``, or when listening (re)started (see the module docstring). With
        ``connect`` False a wait without a listening connection does not try to open one
        (a caller waiting in short slices tries once per period, not once per slice)."""
        wake_r = self._wake_r
        if wake_r < 0:  # closed
            time.sleep(max(0.0, timeout))
            return False
        if connect and self._listener is None and _listens(self.using) and self._connect():
            return True
        listen_fd = self._listening_fd()
        sources = [wake_r] if listen_fd is None else [wake_r, listen_fd]
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            # select() is resumed after a signal handler runs (PEP 475); an interrupt()
            # from that handler has written to the pipe, so it returns at once.
            ready, _, _ = select.select(sources, [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return False
            woken = False
            if wake_r in ready:
                self._drain_pipe()
                woken = True
            if listen_fd is not None and listen_fd in ready:
                heard = self._drain_notifications()
                if heard is None:  # the connection broke: wait on without it
                    listen_fd = None
                    sources = [wake_r]
                woken = woken or bool(heard)
            if woken:
                return True

    @property
    def listening(self) -> bool:
        """Whether it holds a listening connection (that has not broken yet)."""
        return self._listener is not None

    def interrupt(self) -> None:
        """End the current wait, or the next one if none is under way."""
        wake_w = self._wake_w
        if wake_w < 0:
            return
        # The pipe may be full (a wake is pending anyway) or closed meanwhile.
        with contextlib.suppress(OSError):
            os.write(wake_w, b"\0")

    def disconnect(self) -> None:
        """Close the listening connection (before a fork); a later wait connects again."""
        listener, self._listener = self._listener, None
        if listener is not None:
            try:
                listener.close()
            except Exception:  # closing a broken connection must not raise
                logger.debug("closing the listening connection failed", exc_info=True)

    def close(self) -> None:
        self.disconnect()
        wake_r, wake_w = self._wake_r, self._wake_w
        # Marked closed first: a signal handler must never write to a reused fd number.
        self._wake_r = self._wake_w = -1
        for fd in (wake_r, wake_w):
            if fd >= 0:
                os.close(fd)

    # PostgreSQL ------------------------------------------------------------------------

    def _connect(self) -> bool:
        """Open the listening connection; False (logged) if it cannot be had now."""
        import psycopg

        params = connections[self.using].get_connection_params()
        params.setdefault("application_name", self.application_name)
        params.setdefault("connect_timeout", CONNECT_TIMEOUT)
        for name, value in KEEPALIVES.items():
            params.setdefault(name, value)
        try:
            listener = psycopg.Connection.connect(**params, autocommit=True)
            try:
                listener.execute(
                    psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(self.channel))
                )
            except BaseException:
                listener.close()
                raise
        except psycopg.Error as exc:
            if not self._broken:
                logger.warning(
                    "cannot listen for %s (%s); waking at each timeout until it can",
                    self.what,
                    exc,
                )
            self._broken = True
            return False
        if self._broken:
            logger.info("listening for %s again", self.what)
        self._broken = False
        self._listener = listener
        return True

    def _listening_fd(self) -> int | None:
        """The listening connection's socket; None when there is none (or it broke)."""
        if self._listener is None:
            return None
        import psycopg

        try:
            return self._listener.pgconn.socket
        except psycopg.Error as exc:
            self._lost(exc)
            return None

    def _drain_notifications(self) -> bool | None:
        """Read what arrived: True if a notification did, None if the connection broke."""
        import psycopg

        listener = self._listener
        if listener is None:
            return None
        try:
            listener.pgconn.consume_input()
            heard = False
            while listener.pgconn.notifies() is not None:
                heard = True
            if listener.pgconn.status != psycopg.pq.ConnStatus.OK:
                raise psycopg.OperationalError("the listening connection was closed")
        except psycopg.Error as exc:
            self._lost(exc)
            return None
        return heard

    def _lost(self, exc: Exception) -> None:
        logger.warning(
            "the connection listening for %s broke (%s); connecting again", self.what, exc
        )
        self._broken = True
        self.disconnect()

    def _drain_pipe(self) -> None:
        with contextlib.suppress(OSError):  # BlockingIOError: drained
            while os.read(self._wake_r, 512):
                pass
