"""The operator's app: what ops staff see and are told about the reminders engine."""
