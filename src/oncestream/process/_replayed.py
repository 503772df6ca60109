"""Replayed copies of dead letters: which consumer a copy is for, and its ledger key.

``oncestream dlq replay`` republishes a dead letter to its original subject, so
every consumer of the stream receives the copy. A dead letter is one consumer's
(``Nats-Msg-Id`` ``dlq:<stream>:<consumer>:<seq>:<life>``: two consumers that give
up on one message write two letters), and its copy names that consumer::

    Oncestream-Replay-For: billing        the consumer whose letter was replayed
    Oncestream-Replay-Stream: ORDERS      the stream and sequence of the message
    Oncestream-Replay-Sequence: 42        that consumer gave up on, and the
    Oncestream-Replay-Stream-Created: 2026-11-29T10:00:00.123456789Z   stream's life

The life is the stream's creation time (``STREAM.INFO`` ``created``, the letter's
``Oncestream-Stream-Created``): a stream deleted and created again numbers other
messages from 1, and its seq 42 is another message than the old stream's seq 42.
In the letter's msg id and the copy's ledger key it is written as its digits
(:func:`life_token`).

A Processor of any other consumer acks the copy without applying it
(``ProcessorStats.replays_skipped``): it had applied the original, or will apply
its own letter's copy. The named consumer applies it under the ledger key
``(ORDERS.replay.billing.<life>, 42)`` instead of the copy's own sequence, so a
second copy for it of the same message (a second letter of it, replayed too) is
suppressed, and a copy of the new stream's seq 42 is not. The key is a name no
stream can have (it holds dots): it is never the row of a message of the stream
(the dead-lettered original may have one), no prune horizon of the stream covers
it, and pruning never deletes it (one row per replayed letter, kept).

A letter without a life (the consumed stream's info could not be read: a bound
Processor without access to ``STREAM.INFO``; or written before letters named it)
has the msg id ``dlq:<stream>:<consumer>:<seq>`` and its copy the key
``(ORDERS.replay.billing, 42)``.

A copy without ``Oncestream-Replay-For`` (the replay of a letter written before
letters were per consumer, ``Nats-Msg-Id`` ``dlq:<stream>:<seq>``, or any other
message) is a new message of the stream like any other: every consumer applies it.

Example::

    target = replay_target(msg.raw_headers)  # ReplayTarget("ORDERS", "billing", 42, "2026...")
    if target is not None and target[:2] == ("ORDERS", "billing"):
        entry = replay_entry(*target)  # LedgerEntry("ORDERS.replay.billing.2026...", 42)
"""

from __future__ import annotations

from typing import NamedTuple

from .._headers import header_value
from ..ledger import LedgerEntry

__all__ = [
    "REPLAY_CREATED",
    "REPLAY_FOR",
    "REPLAY_FOR_KEY",
    "REPLAY_PREFIX",
    "REPLAY_SEQUENCE",
    "REPLAY_STREAM",
    "STREAM_CREATED",
    "ReplayTarget",
    "is_consumer_letter",
    "letter_msg_id",
    "life_token",
    "replay_entry",
    "replay_target",
]

REPLAY_FOR = "Oncestream-Replay-For"
REPLAY_STREAM = "Oncestream-Replay-Stream"
REPLAY_SEQUENCE = "Oncestream-Replay-Sequence"
REPLAY_CREATED = "Oncestream-Replay-Stream-Created"
#: Every header a replayed copy carries about its letter starts with this.
REPLAY_PREFIX = "Oncestream-Replay-"
#: The dead letter's record of the stream's creation time (its life).
STREAM_CREATED = "Oncestream-Stream-Created"
#: What a header block holds when it names a consumer (a cheap test before parsing).
REPLAY_FOR_KEY = b"\r\n" + REPLAY_FOR.encode() + b":"


class ReplayTarget(NamedTuple):
    """What a replayed copy is for: ``consumer``'s letter of ``stream`` seq ``seq`` in the
    stream's life ``created`` (its creation time; "" when the letter has none)."""

    stream: str
    consumer: str
    seq: int
    created: str = ""


def life_token(created: str) -> str:
    """The stream's creation time as the msg id and ledger key write it: its digits
    (``2026-11-29T10:00:00.5Z`` -> ``2026112910000005``; "" when it is unknown)."""
    return "".join(c for c in created if c.isdigit())


def letter_msg_id(stream: str, consumer: str, seq: int, created: str = "") -> str:
    """The ``Nats-Msg-Id`` of ``consumer``'s dead letter of ``stream`` seq ``seq`` in the
    stream's life ``created``: a retried dead-letter publish is de-duplicated; another
    consumer's letter of the message, or the letter of the seq of a stream created
    again, is not."""
    life = life_token(created)
    return f"dlq:{stream}:{consumer}:{seq}" + (f":{life}" if life else "")


def is_consumer_letter(msg_id: str | None, stream: str, consumer: str) -> bool:
    """Whether ``msg_id`` is one of ``consumer``'s own letters of ``stream`` (the letters
    written before letters were per consumer are ``dlq:<stream>:<seq>``)."""
    return bool(msg_id and stream and consumer) and str(msg_id).startswith(
        f"dlq:{stream}:{consumer}:"
    )


def replay_target(block: bytes | bytearray | None) -> ReplayTarget | None:
    """What a replayed copy is for, or None (every consumer applies it).

    A copy whose headers name a consumer but no valid stream and sequence is for
    nobody in particular (None): applied as a new message, as before.
    """
    if not block or REPLAY_FOR_KEY not in block:
        return None
    consumer = header_value(block, REPLAY_FOR.encode())
    stream = header_value(block, REPLAY_STREAM.encode())
    seq = header_value(block, REPLAY_SEQUENCE.encode())
    created = header_value(block, REPLAY_CREATED.encode()) or b""
    if not consumer or not stream or not seq or not seq.isdigit():
        return None
    try:
        return ReplayTarget(stream.decode(), consumer.decode(), int(seq), created.decode())
    except UnicodeDecodeError:
        return None


def replay_entry(stream: str, consumer: str, seq: int, created: str = "") -> LedgerEntry:
    """The ledger key ``consumer`` applies a replayed copy of ``stream`` seq ``seq`` (of the
    stream's life ``created``) under."""
    life = life_token(created)
    return LedgerEntry(f"{stream}.replay.{consumer}" + (f".{life}" if life else ""), seq)
