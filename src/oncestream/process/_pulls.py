"""The consumer's pull a Processor reads from: begun once, replaced on a takeover or a reset."""

from __future__ import annotations

import dataclasses

from .._connection import Connection
from ..read import MessageStream, PullOptions
from ._options import ProcessorOptions

__all__ = ["Pulls"]


class Pulls:
    """Which :class:`~oncestream.read.MessageStream` of the consumer is current.

    The batch loop reads from :attr:`current`; a takeover (:mod:`._pinning`) and a
    reset of an ack-all consumer (:mod:`._ackall`) replace it with a fresh one, so
    that nothing delivered before reaches the new inbox.

    Args:
        conn: the connection the pulls subscribe on.
        stream, consumer: the consumer pulled.
        options: the Processor's options (:meth:`ProcessorOptions.pull_options`).

    Example::

        pulls = Pulls(conn, "ORDERS", "billing", options)
        pull = await pulls.begin()
        msgs = await pull.next_batch(100, timeout=1.0)
    """

    def __init__(
        self, conn: Connection, stream: str, consumer: str, options: ProcessorOptions
    ) -> None:
        self.conn = conn
        self.stream, self.consumer = stream, consumer
        self.options = options
        #: The pull being read (None before :meth:`begin`).
        self.current: MessageStream | None = None

    async def begin(self) -> MessageStream:
        """Start the first pull; current while it starts (a stop meanwhile halts it)."""
        pull = self.current = MessageStream(
            self.conn, self.stream, self.consumer, self.options.pull_options()
        )
        await pull.start()
        return pull

    async def renew(self, pin: str | None, *, keep_pin: bool = False) -> MessageStream:
        """Start a pull under ``pin`` (None: as a standby) and make it current.

        ``keep_pin``: one message at a time (a takeover keeping its pin while it waits).
        """
        options: PullOptions = self.options.pull_options()
        if keep_pin:
            options = dataclasses.replace(options, batch=1, max_bytes=0)
        pull = MessageStream(self.conn, self.stream, self.consumer, options, pin_id=pin)
        await pull.start()
        self.current = pull
        return pull

    def halt(self) -> None:
        """Halt the current pull (signal-handler safe)."""
        if self.current is not None:
            self.current.halt()

    def buffered_replies(self) -> list[str]:
        """Reply subjects of the messages the current pull holds, not yet handed out."""
        return self.current.buffered_replies() if self.current is not None else []
