"""The engine: due tasks become runs, runs are claimed, delivered once and recorded.

Owns: the scheduler's tick (``dispatch``), the delivery of claimed runs and the ledger
(``delivery``), the long-running process and its django-q2 cluster (``worker``,
``cluster``, ``django_q_owner``), waking the schedulers (``wake``), the per-message SQL
(``sql``), riding out a database outage (``outage``) and retention (``retention``).

May import the models, ``kinds``, ``schedule``, ``calendars``, ``messages``, the senders
and the rate limits; never ``intake``, the admin, the API or the commands, which call it.
"""
