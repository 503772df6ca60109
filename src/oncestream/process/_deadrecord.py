"""A failed message's dead letter, written with its ledger row.

A message the handler gave up on is settled by its dead letter: the Processor claims
the message's ledger key in a transaction that commits only once the letter's PubAck
came. Delivered again later (a ``consumer reset`` back past it, or a takeover that
reset the consumer to an older ack floor) it is then suppressed, not handled again:
its letter is the one way to apply it (``oncestream dlq replay``), and the replayed
copy is applied under a key of its own (:mod:`._replayed`). So the message is applied
once even when its handler was fixed in between (before, the original was applied a
second time next to its copy: docs/guarantees.md, finding 28), and it is not
dead-lettered a second time (finding 24).

A replayed copy for this consumer that fails is not recorded: its letter names the
original, and the next replay's copy must still be applied under that key.

A ledger failure (the database unreachable) between the letter's PubAck and the commit
is ridden out where it happened: the Acknowledger keeps the message in progress and
tries the commit again every second (a third of the ack wait if that is shorter), so
neither another instance sharing the consumer nor (ledger key ``msg_id``) a later
message with its msg id here handles it meanwhile. The stored letter is remembered
(:class:`Unrecorded`): if the message comes back anyway (handed back after a standby's
fence refused, or the registry row moved), or the server dropped it and its settling
meets the failure, only its row is committed; the handler is not called and the letter
is not published again. So the letter stays its one way in, and it is counted once.

Not closed: a crash, a stop (which ends the tries after the one under way and hands the
message back) or a takeover in that window forgets what :class:`Unrecorded` holds, and
a registry row that moved meanwhile (a consumer filter edited) hands the message back
to whichever instance pulls it next. Delivered again within the dead-letter stream's
duplicate window, the message fails again (its letter de-duplicated) and is recorded;
but if its handler was fixed meanwhile (or succeeds this time) it is applied, and a
replay of the letter applies its copy as well.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from .._errors import LedgerError, LedgerUnusable
from .._headers import msg_id_key
from .._logthrottle import LogThrottle
from .._message import Message
from ..ledger import LedgerEntry, LedgerTx
from ._applying import Applier, RegistryMoved
from ._pinning import Superseded
from ._replayed import REPLAY_FOR_KEY

__all__ = ["Claimed", "LetterRecorder", "LetterStored", "Publish", "Unrecorded", "claiming"]

log = logging.getLogger(__name__)

#: Stores a message's dead letter: ``(msg, seq, attempts, error text) -> stored``.
Publish = Callable[[Message, int, int, str], Awaitable[bool]]


class Unrecorded:
    """The stream sequences whose dead letter was stored and whose ledger row was not
    committed (the database failed in between): owed their row, not a handler call.

    Shared by :class:`LetterRecorder` and the settling of dropped messages
    (:mod:`._maxdeliver`); kept in memory only (see the module's "Not closed").

    Example::

        async with claiming(applier, entry, msg) as claimed:
            if claimed.fresh and await unrecorded.settle(seq, letter, claimed):
                ...  # the letter is stored once and the row committed
    """

    def __init__(self) -> None:
        self._seqs: set[int] = set()

    def __contains__(self, seq: object) -> bool:
        return seq in self._seqs

    def __len__(self) -> int:
        return len(self._seqs)

    async def settle(
        self, seq: int, letter: Callable[[], Awaitable[bool]], claimed: Claimed
    ) -> bool:
        """Store ``seq``'s letter with ``letter`` (which waits for its PubAck) unless it is
        stored already, then commit ``claimed``; False when the letter was not stored.

        Raises:
            LedgerError: the commit failed; ``seq`` stays owed its row, and the next
                call commits it without storing the letter again.
        """
        if seq not in self._seqs:
            if not await letter():
                return False
            self._seqs.add(seq)
        await claimed.commit()
        self._seqs.discard(seq)
        return True

    def recorded(self, seq: int) -> None:
        """``seq``'s row is committed, or found recorded: nothing is owed."""
        self._seqs.discard(seq)


class LetterStored(Exception):
    """Stands for the handler's error of a message delivered again whose letter is stored
    and whose ledger row is owed (:class:`Unrecorded`): the handler was not called."""

    def __init__(self) -> None:
        super().__init__("its dead letter is stored; its ledger row was not committed")


class LetterRecorder:
    """Dead-letters a failed message with its ledger key claimed in the same transaction.

    Args:
        applier: the ledger, its lock, the fence and the claim of the Processor.
        unrecorded: the letters stored whose row is owed (shared with the settling of
            dropped messages; a new one when not given).

    Example::

        recorder = LetterRecorder(applier, Unrecorded())
        finished = await recorder(msg, seq, attempts, "ValueError: boom", acks.dead_letter)
    """

    def __init__(self, applier: Applier, unrecorded: Unrecorded | None = None) -> None:
        self.applier = applier
        self.unrecorded = unrecorded if unrecorded is not None else Unrecorded()
        #: The last call stored the letter and then failed to commit its row (the
        #: database failing): trying the commit again is what is left to do.
        self.commit_failed = False
        # A long outage retries every second: its first lines, then a summary.
        self._outage_log = LogThrottle(log)
        self.stream = applier.stream
        self.stats = applier.stats  # the Processor's counters (``ledger_errors``)

    async def __call__(
        self, msg: Message, seq: int, attempts: int, text: str, publish: Publish
    ) -> bool:
        """Dead-letter ``msg`` (stream sequence ``seq``) with ``publish`` (which stores the
        letter and waits for its PubAck); True when it is finished.

        False: not now (the letter was not stored, a standby's fence refused it, the
        registry row moved, or the ledger failed). With :attr:`commit_failed` the letter
        is stored and only its row is owed: the caller tries again (the next call for
        ``seq`` commits the row without publishing the letter again); otherwise it hands
        the message back, as for a failed publish.

        Raises:
            LedgerUnusable: the ledger cannot be used until someone fixes it.
        """
        if msg.raw_headers and REPLAY_FOR_KEY in msg.raw_headers:
            return await publish(msg, seq, attempts, text)
        applier = self.applier
        key = msg_id_key(msg.raw_headers) if applier.ledger.key == "msg_id" else None
        unrecorded = self.unrecorded
        self.commit_failed = False
        try:
            async with claiming(applier, LedgerEntry(self.stream, seq, key), msg) as claimed:
                if not claimed.fresh:  # settled meanwhile, or its msg id was (key="msg_id")
                    unrecorded.recorded(seq)
                    log.info(
                        "%s seq %d: its ledger key is recorded already (applied or "
                        "dead-lettered by another instance, or another message with its "
                        "msg id): finished without a letter",
                        self.stream, seq,
                    )  # fmt: skip
                    return True
                if not await unrecorded.settle(
                    seq, lambda: publish(msg, seq, attempts, text), claimed
                ):
                    return False
        except (Superseded, RegistryMoved) as exc:
            # A standby (the active instance settles it), or the registry row moved
            # (the next batch's transaction deals with it): handed back.
            log.info("%s seq %d not dead-lettered now: %s", self.stream, seq, exc)
            return False
        except LedgerUnusable:
            raise  # retrying cannot help: the Processor stops, as a batch's failure stops it
        except LedgerError as exc:
            # The database unreachable now (PostgreSQL restarted or killed). Before the
            # letter: handed back like a letter that was not stored, dead-lettered at its
            # next delivery (or the settling of its drop). After it: the letter is in
            # ``unrecorded`` and the caller keeps trying the commit.
            self.stats.ledger_errors += 1
            self.commit_failed = seq in unrecorded
            what = (
                "dead letter stored, its ledger row not committed; trying again"
                if self.commit_failed
                else "not dead-lettered now"
            )
            self._outage_log.log(
                logging.WARNING, f"{what}: {exc}", "%s seq %d %s: %s", self.stream, seq, what, exc
            )
            return False
        return True


class Claimed:
    """The transaction of :func:`claiming`: whether its key was ``fresh``, and its commit."""

    def __init__(self, applier: Applier, tx: LedgerTx, *, fresh: bool) -> None:
        self._applier = applier
        self._tx = tx
        #: The key was not recorded yet (False: applied or dead-lettered already).
        self.fresh = fresh
        self.committed = False

    async def commit(self) -> None:
        """Commit the claim (after the letter's PubAck)."""
        await self._applier.ledger.call(self._tx.commit)
        self.committed = True


@contextlib.asynccontextmanager
async def claiming(applier: Applier, entry: LedgerEntry, msg: Message) -> AsyncIterator[Claimed]:
    """A dead letter's ledger transaction: under the applier's lock, begun, fenced, and
    ``entry`` claimed; rolled back on the way out unless the body committed it.

    Used by :class:`LetterRecorder` and by the settling of a message the server dropped
    (:mod:`._maxdeliver`), which both record a key with its letter.

    Raises:
        Superseded: the fence refused (a standby); RegistryMoved: the registry row
            moved. Either after the rollback.

    Example::

        async with claiming(applier, entry, msg) as claimed:
            if claimed.fresh and await publish(msg, seq, attempts, text):
                await claimed.commit()
    """
    async with applier.lock:
        tx = await applier.ledger.call(applier.ledger.begin, undo=_rollback)
        try:
            if applier.fence is not None:
                await applier.ledger.call(applier.fence, tx)
            fresh = await applier.ledger.call(applier.claim, tx, [entry], [msg])
            claimed = Claimed(applier, tx, fresh=fresh[0])
            yield claimed
            if not claimed.committed:
                await applier.ledger.call(tx.rollback)
        except (Superseded, RegistryMoved):
            await applier.ledger.call(tx.rollback)
            raise
        except BaseException:
            tx.rollback()
            raise


def _rollback(tx: LedgerTx) -> None:
    tx.rollback()
