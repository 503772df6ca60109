"""The Publisher's table of unacknowledged publishes: deadlines, re-sends, give-ups, 503s.

Every publish waits here for its PubAck. ``pending`` holds those sent and
awaiting an ack, in send order (every send uses the same ack timeout, so
deadlines ascend); ``waiting`` holds those whose ack timed out or that were
answered 503 (no responders), until their backoff has passed and they are
re-sent with the same msg id. After ``max_attempts`` sends an entry fails
with :class:`PublishFailed`. ``late`` remembers re-sent tokens so that the
acks of their extra copies still count as duplicates.

A 503 does not say why nobody listens (:mod:`._noresponders`): no stream
captures the subject, or its clustered stream has no leader. So the server is
asked: at the first 503, to fail a subject no stream captures at once, and
again when a publish has used its last attempt on a 503 (a user who may not
list streams: the target stream's own subjects tell). Only a positive "no
stream" is :class:`StreamNotFound`; a stream that captures the subject, or no
answer (a cluster without a meta leader), is an outage: :class:`PublishFailed`,
to retry (found by the fault campaign, torture/: an R3 stream with two of three
nodes down was reported missing, and ``oncestream publish`` exited 2, "fix
--subject").
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from .._connection import Connection
from .._errors import PublishError, PublishFailed
from ._frames import Pending
from ._noresponders import Captors, look_up, no_leader_cause
from ._options import PublisherOptions

if TYPE_CHECKING:
    from ._lanes import Lanes

__all__ = ["RetryTable"]

log = logging.getLogger(__name__)

# Tokens of retried messages remembered to count the acks of their extra copies.
_LATE_TOKENS = 100_000
_monotonic = time.monotonic


class RetryTable:
    """Unacknowledged publishes of one Publisher and the policy for each.

    Args:
        conn: the connection (asked whether a stream listens, after a 503).
        options: ack timeout, attempts and backoff.
        lanes: the Publisher (``fail`` an entry, ``queue`` a re-send, ``write_out``,
            and ``tick`` the fast batches at every deadline check).
    """

    def __init__(self, conn: Connection, options: PublisherOptions, lanes: Lanes) -> None:
        self.conn = conn
        self.options = options
        self.pending: dict[int, Pending] = {}
        self.waiting: dict[int, Pending] = {}
        self.late: dict[int, None] = {}
        self.retried = 0
        self._fail = lanes.fail
        self._send = lanes.queue
        self._write = lanes.write_out
        self._tick = lanes.tick
        #: Subject -> entries whose last attempt was answered 503, until the stream
        #: lookup says which error they fail with.
        self.deciding: dict[str, list[Pending]] = {}
        self._probing: set[str] = set()
        self._probe_tasks: set[asyncio.Task[None]] = set()

    def __bool__(self) -> bool:
        return bool(self.pending or self.waiting or self.deciding)

    def remember_late(self, token: int) -> None:
        """Note a re-sent token whose extra copies may still be acknowledged."""
        late = self.late
        late[token] = None
        if len(late) > _LATE_TOKENS:
            del late[next(iter(late))]

    def in_process(self, token: int, entry: Pending) -> None:
        """The leader answered 10158 "duplicate message id is in process" to a re-send.

        An earlier send of this msg id is still being replicated (e.g. no quorum):
        the outcome is unknown, as with no answer, so re-send after an ack timeout
        (found by the fault campaign, torture/; before, the publish failed
        although the first send was stored once quorum was back).
        """
        if entry.attempts >= self.options.max_attempts:
            self.give_up(entry)
            return
        opts = self.options
        entry.deadline = _monotonic() + opts.ack_timeout + opts.backoff(entry.attempts + 1)
        self.waiting[token] = entry

    def no_responders(self, token: int, entry: Pending) -> None:
        """The server answered 503: retry, and ask whether a stream captures the subject."""
        # A 503 means "no stream listens" for a missing stream, but also happens
        # while a clustered stream has no leader: retry, and ask the server which
        # case it is, so that a missing stream still fails at once.
        if entry.attempts >= self.options.max_attempts:
            # The last attempt: the lookup decides the error (see the module docstring).
            self.deciding.setdefault(entry.subject, []).append(entry)
            self._look_up(entry.subject)
            return
        # An election takes seconds: spend an ack timeout per attempt, as a lost
        # ack would, so 503s get the retry horizon the window guard checked.
        opts = self.options
        entry.deadline = _monotonic() + opts.ack_timeout + opts.backoff(entry.attempts + 1)
        self.waiting[token] = entry
        self._look_up(entry.subject)

    def _look_up(self, subject: str) -> None:
        """Ask which streams capture ``subject``, unless a lookup is already under way."""
        if subject in self._probing:
            return
        self._probing.add(subject)
        task = asyncio.create_task(self._probe_subject(subject))
        self._probe_tasks.add(task)
        task.add_done_callback(self._probe_tasks.discard)

    async def _probe_subject(self, subject: str) -> None:
        opts = self.options
        try:
            found = await look_up(self.conn, subject, opts.stream, opts.ack_timeout)
        finally:
            self._probing.discard(subject)
        if found.missing:  # no stream (target) captures it: fail them all now
            for table in (self.waiting, self.pending):
                doomed = [t for t, e in table.items() if e.subject == subject]
                for token in doomed:
                    entry = table.pop(token)
                    self._fail(entry, found.not_found(entry.attempts))
        for entry in self.deciding.pop(subject, ()):
            if found.missing:
                self._fail(entry, found.not_found(entry.attempts))
            else:
                self._fail(entry, self._no_leader(entry, found))

    def _no_leader(self, entry: Pending, found: Captors) -> PublishFailed:
        """The error of a publish whose every attempt was answered 503 by a stream that
        exists or may exist (``found``: what the lookup told)."""
        opts = self.options
        whose = found.leaderless()
        n = entry.attempts
        error = PublishFailed(
            f"no PubAck for msg id {entry.msg_id!r} on {entry.subject!r} after {n} "
            f"attempt{'s' if n != 1 else ''} (ack_timeout={opts.ack_timeout:g}s): {whose}; the "
            "stream may be between leaders or too few of its servers up. The publish can be "
            "retried: it may or may not be stored, so re-publish it with the same msg id "
            "inside the duplicate window",
            msg_id=entry.msg_id,
            attempts=entry.attempts,
        )
        # The server's answer, kept: status 503 (no responders), a transient one here.
        error.__cause__ = no_leader_cause(entry.subject, entry.attempts)
        return error

    def give_up(self, entry: Pending) -> None:
        """Fail ``entry`` after its last unacknowledged attempt."""
        self._fail(
            entry,
            PublishFailed(
                f"no PubAck for msg id {entry.msg_id!r} on {entry.subject!r} after "
                f"{entry.attempts} attempts (ack_timeout={self.options.ack_timeout:g}s); "
                "it may or may not be stored: re-publish it with the same msg id inside "
                "the duplicate window",
                msg_id=entry.msg_id,
                attempts=entry.attempts,
            ),
        )

    def adopt(self, token: int, entry: Pending, *, send: bool = True) -> None:
        """Take over an entry the fast-ingest batch did not confirm, as its next attempt.

        ``entry.cmd`` must already reply to ``token``. With ``send`` it is queued
        now (the caller writes); without, it waits in ``pending`` for
        :meth:`resend_all` (after a reconnect). A last attempt gives up instead.
        """
        if entry.attempts >= self.options.max_attempts:
            self.give_up(entry)
        elif send:
            self._resend(token, entry, _monotonic())
        else:
            self.pending[token] = entry

    def _resend(self, token: int, entry: Pending, now: float) -> None:
        entry.attempts += 1
        entry.deadline = now + self.options.ack_timeout
        self.pending[token] = entry
        self.retried += 1
        self._send(entry.cmd)

    def check_timeouts(self) -> None:
        """Move expired entries to their backoff, re-send those whose backoff passed."""
        now = _monotonic()
        opts = self.options
        expired: list[int] = []
        for token, entry in self.pending.items():
            if entry.deadline > now:
                break
            expired.append(token)
        for token in expired:
            entry = self.pending.pop(token)
            if entry.attempts >= opts.max_attempts:
                self.give_up(entry)
            else:
                entry.deadline = now + opts.backoff(entry.attempts + 1)
                self.waiting[token] = entry
        if self.waiting:
            due = sorted(t for t, e in self.waiting.items() if e.deadline <= now)
            for token in due:
                self._resend(token, self.waiting.pop(token), now)
            if due:
                log.debug("publisher re-sent %d unacknowledged messages", len(due))
                self._write()

    async def run(self) -> None:
        """Check deadlines a few times per ack timeout (and per shortest backoff), forever.

        The fast-ingest batches' timeouts are checked too (``lanes.tick``: nothing to
        do without a batch).
        """
        opts = self.options
        interval = min(opts.ack_timeout / 4, 0.25)
        shortest = min(opts.retry_backoff)
        if shortest > 0:
            interval = min(interval, shortest / 2)
        interval = max(interval, 0.005)
        while True:
            await asyncio.sleep(interval)
            if self.pending or self.waiting:
                self.check_timeouts()
            self._tick()

    def resend_all(self) -> None:
        """After a reconnect: the old connection's acks are lost; re-send in the original order."""
        now = _monotonic()
        entries = sorted({**self.pending, **self.waiting}.items())
        self.pending.clear()
        self.waiting.clear()
        for token, entry in entries:
            if entry.attempts >= self.options.max_attempts:
                self.give_up(entry)
            else:
                self._resend(token, entry, now)
        if entries:
            log.info("publisher re-sent %d messages after a reconnect", len(entries))
        self._write()

    def abandon(self, exc: PublishError) -> None:
        """Fail every entry with ``exc`` and stop the stream lookups."""
        for task in list(self._probe_tasks):
            task.cancel()
        deciding = [entry for entries in self.deciding.values() for entry in entries]
        for entry in [*self.pending.values(), *self.waiting.values(), *deciding]:
            self._fail(entry, exc)
        self.pending.clear()
        self.waiting.clear()
        self.deciding.clear()
