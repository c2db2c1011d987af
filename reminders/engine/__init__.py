"""The engine: due tasks become runs, runs are claimed, delivered once and recorded.

Owns: planning runs by each kind's policy (``planning``), what operators do to tasks
and runs (``actions``), telling the CRM of clicks on cards (``announce``), updating a
card after a click (``cards``), taking a sent message back (``recall``), the scheduler's
tick (``dispatch``), the delivery of claimed runs
(``delivery``: a job and its lease in ``jobs``, which runs may go in ``starting``, batches
in ``sending``, the ledger in ``reservations`` and ``records``, retries in ``retries``, a
lost database in ``job_outage``), the long-running process and its django-q2 cluster
(``worker``, ``cluster``, ``django_q_owner``), waking the schedulers (``wake``), riding
out a database outage (``outage``) and retention (``retention``).

May import the models, ``kinds``, ``schedule``, ``calendars``, ``messages``, the senders
and the rate limits; never ``intake``, the admin, the API or the commands, which call it.
"""
