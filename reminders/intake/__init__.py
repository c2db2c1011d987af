"""What comes in: the one path from ``api.schedule``'s arguments to saved tasks
(``scheduling``), checked once as they arrive (``validation``); CRM users and objects as
recipients and subjects (``users``, ``about``); birthdays and inquiry deadlines
(``occasions``); CSV files of tasks and of calendar days (``importing``,
``calendar_import``).

May import everything below it (the models, ``kinds``, ``schedule``, ``calendars``,
``messages``, the engine's ``wake``); never the admin, the API or the commands, which
call it.
"""
