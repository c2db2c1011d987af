"""What is said: a message as a sender takes it (``content``), who writes it and in which
language (``builders``), the six built-in kinds' wording (``wording``), the cards with
buttons a follow-up and an inquiry alert are where the channel carries them (``cards``),
how a CRM's text is cut to a provider's limit (``fitting``) and the lines every message
ends with, so that no two occurrences look alike (``stamps``).

May import the models, ``kinds``, ``schedule`` and the senders (to fit what a channel
carries); never the engine, ``intake`` or the admin, which ask it for a message.
"""
