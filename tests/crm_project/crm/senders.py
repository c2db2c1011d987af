"""The CRM's channel: records each message it is given instead of sending it."""

from reminders.senders import BaseSender, Message, SendResult

from .records import record


class FileSender(BaseSender):
    def send(self, message: Message) -> SendResult:
        record("messages", to=message.recipient, body=message.rendered)
        return SendResult(message_id=f"file-{message.idempotency_key}")
