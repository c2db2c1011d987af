"""WeCom's callback protocol: what WeCom posts to our callback URL, and what we answer.

Owns: WeCom's "WXBizMsgCrypt" scheme (the signature, AES-256-CBC, the padding and the
framing of a message: ``crypto``), the values of the query string it signs with and
the time window they must fall in (``query``), the XML envelopes it travels in and the
messages inside them, the ``template_card_event`` of a clicked card button above all
(``events``), and the refusals of all of it (``exceptions``).

May import nothing of the app but its exceptions (``reminders.exceptions``): pure
functions and small frozen dataclasses, no views, models or settings. The view that
answers WeCom and the sandbox that plays WeCom's part both build on these functions, so
the two sides of every test speak the protocol through the same code.
"""
