"""Replayed copies of dead letters: which consumer a copy is for, and its ledger key.

``oncestream dlq replay`` republishes a dead letter to its original subject, so
every consumer of the stream receives the copy. A dead letter is one consumer's
(``Nats-Msg-Id`` ``dlq:<stream>:<consumer>:<seq>``: two consumers that give up on
one message write two letters), and its copy names that consumer::

    Oncestream-Replay-For: billing        the consumer whose letter was replayed
    Oncestream-Replay-Stream: ORDERS      the stream and sequence of the message
    Oncestream-Replay-Sequence: 42        that consumer gave up on

A Processor of any other consumer acks the copy without applying it
(``ProcessorStats.replays_skipped``): it had applied the original, or will apply
its own letter's copy. The named consumer applies it under the ledger key
``(ORDERS.replay.billing, 42)`` instead of the copy's own sequence, so a second
copy for it of the same message (a second letter of it, replayed too) is
suppressed. The key is a name no stream can have (it holds dots): it is never
the row of a message of the stream (the dead-lettered original may have one), no
prune horizon of the stream covers it, and pruning never deletes it (one row per
replayed letter, kept).

A copy without ``Oncestream-Replay-For`` (the replay of a letter written before
letters were per consumer, ``Nats-Msg-Id`` ``dlq:<stream>:<seq>``, or any other
message) is a new message of the stream like any other: every consumer applies it.

Example::

    target = replay_target(msg.raw_headers)      # ("ORDERS", "billing", 42) or None
    if target is not None and target[:2] == ("ORDERS", "billing"):
        entry = replay_entry(*target)            # LedgerEntry("ORDERS.replay.billing", 42)
"""

from __future__ import annotations

from .._headers import header_value
from ..ledger import LedgerEntry

__all__ = [
    "REPLAY_FOR",
    "REPLAY_FOR_KEY",
    "REPLAY_SEQUENCE",
    "REPLAY_STREAM",
    "letter_msg_id",
    "replay_entry",
    "replay_target",
]

REPLAY_FOR = "Oncestream-Replay-For"
REPLAY_STREAM = "Oncestream-Replay-Stream"
REPLAY_SEQUENCE = "Oncestream-Replay-Sequence"
#: What a header block holds when it names a consumer (a cheap test before parsing).
REPLAY_FOR_KEY = b"\r\n" + REPLAY_FOR.encode() + b":"


def letter_msg_id(stream: str, consumer: str, seq: int) -> str:
    """The ``Nats-Msg-Id`` of ``consumer``'s dead letter of ``stream`` seq ``seq``: a retried
    dead-letter publish is de-duplicated, another consumer's letter of the message is not."""
    return f"dlq:{stream}:{consumer}:{seq}"


def replay_target(block: bytes | bytearray | None) -> tuple[str, str, int] | None:
    """``(stream, consumer, seq)`` a replayed copy is for, or None (every consumer applies it).

    A copy whose headers name a consumer but no valid stream and sequence is for
    nobody in particular (None): applied as a new message, as before.
    """
    if not block or REPLAY_FOR_KEY not in block:
        return None
    consumer = header_value(block, REPLAY_FOR.encode())
    stream = header_value(block, REPLAY_STREAM.encode())
    seq = header_value(block, REPLAY_SEQUENCE.encode())
    if not consumer or not stream or not seq or not seq.isdigit():
        return None
    try:
        return stream.decode(), consumer.decode(), int(seq)
    except UnicodeDecodeError:
        return None


def replay_entry(stream: str, consumer: str, seq: int) -> LedgerEntry:
    """The ledger key ``consumer`` applies a replayed copy of ``stream`` seq ``seq`` under."""
    return LedgerEntry(f"{stream}.replay.{consumer}", seq)
