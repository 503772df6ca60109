"""oncestream's message type: a JetStream message with its delivery metadata parsed once.

:class:`Message` is what :func:`~oncestream.pull_messages`, :class:`~oncestream.MessageStream`
and a :class:`~oncestream.Processor` handler receive. It carries the subject,
data and headers, and the JetStream metadata that the server encodes in the
message's ``$JS.ACK`` reply subject (:class:`MessageMetadata`), parsed the
first time it is asked for and kept (:attr:`Message.seq` alone is read
without the rest, for the Processor's hot path). Outside a Processor it can be
acknowledged (``ack``, ``ack_sync``, ``nak``, ``term``, ``in_progress``).

Both ack subject formats are understood:

- v1: ``$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<timestamp>.<pending>``
- v2: ``$JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivered>.<stream seq>.
  <consumer seq>.<timestamp>.<pending>[.<random token>]`` (domain ``_`` means none).
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from typing import Any, NamedTuple, Protocol

from ._errors import JetStreamError, OncestreamError, OperationTimeout
from ._headers import first_values, msg_id_of, parse_block, render_block

__all__ = [
    "ACK_V1",
    "ACK_V2",
    "AckLayout",
    "AckTransport",
    "Message",
    "MessageMetadata",
    "ack_layout",
    "parse_metadata",
]

_ACK = b"+ACK"
_WPI = b"+WPI"
_NAK = b"-NAK"
_TERM = b"+TERM"


class AckTransport(Protocol):
    """What a message needs to acknowledge itself: publish and request (a NATS client)."""

    async def publish(self, subject: str, payload: bytes = ...) -> None: ...

    async def request(self, subject: str, payload: bytes = ..., timeout: float = ...) -> Any: ...


class MessageMetadata(NamedTuple):
    """JetStream delivery metadata of one message.

    Attributes:
        stream: the stream that stores the message.
        consumer: the consumer that delivered it.
        num_delivered: delivery count (1 on the first delivery).
        stream_seq: the message's sequence in the stream.
        consumer_seq: the delivery's sequence in the consumer.
        timestamp_ns: when the stream stored it, nanoseconds since the epoch.
        num_pending: messages left for the consumer after this one.
        domain: the JetStream domain, or None (v1 subjects and domain ``_``).
        account_hash: the account's hash (v2 subjects), or None.
    """

    stream: str
    consumer: str
    num_delivered: int
    stream_seq: int
    consumer_seq: int
    timestamp_ns: int
    num_pending: int
    domain: str | None = None
    account_hash: str | None = None

    @property
    def timestamp(self) -> datetime:
        """:attr:`timestamp_ns` as an aware UTC datetime (microsecond precision)."""
        return datetime.fromtimestamp(self.timestamp_ns / 1e9, UTC)


_new_metadata = functools.partial(tuple.__new__, MessageMetadata)


class AckLayout(NamedTuple):
    """Token positions of each field in a ``$JS.ACK`` subject split on ``.``."""

    stream: int
    consumer: int
    num_delivered: int
    stream_seq: int
    consumer_seq: int
    timestamp_ns: int
    num_pending: int


#: v1: ``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>`` (9 tokens).
ACK_V1 = AckLayout(2, 3, 4, 5, 6, 7, 8)
#: v2: ``$JS.ACK.<domain>.<account hash>.<stream>...`` (11 tokens, or 12 with a token).
ACK_V2 = AckLayout(4, 5, 6, 7, 8, 9, 10)


_V1_SEQ = ACK_V1.stream_seq
_V2_SEQ = ACK_V2.stream_seq


def ack_layout(token_count: int) -> AckLayout:
    """The layout of an ack subject with ``token_count`` tokens (for vectorised parsers).

    Raises:
        JetStreamError: no ack subject has that many tokens.
    """
    if token_count == 9:
        return ACK_V1
    if token_count in (11, 12):
        return ACK_V2
    raise JetStreamError(f"not a JetStream ack subject: {token_count} tokens")


def parse_metadata(reply: str) -> MessageMetadata:
    """Parse a ``$JS.ACK`` reply subject (v1 or v2) into :class:`MessageMetadata`.

    Raises:
        JetStreamError: ``reply`` is not a JetStream ack subject.

    Example::

        parse_metadata("$JS.ACK.ORDERS.billing.1.42.40.1700000000000000000.7").stream_seq  # 42
    """
    tokens = reply.split(".")
    count = len(tokens)
    if count in (9, 11, 12) and tokens[0] == "$JS" and tokens[1] == "ACK":
        # Unpacked by position (ACK_V1 / ACK_V2): this runs once per message.
        try:
            if count == 9:
                _, _, stream, consumer, delivered, sseq, cseq, ts, pending = tokens
                domain = account = None
            else:
                _, _, domain, account, stream, consumer, delivered, sseq, cseq, ts, pending = (
                    tokens[:11]
                )
                if domain == "_":
                    domain = None
            return _new_metadata(
                (
                    stream,
                    consumer,
                    int(delivered),
                    int(sseq),
                    int(cseq),
                    int(ts),
                    int(pending),
                    domain,
                    account,
                )
            )
        except ValueError:
            pass
    raise JetStreamError(f"not a JetStream message: reply subject {reply!r} is no $JS.ACK subject")


class Message:
    """One message delivered by a JetStream consumer.

    Attributes:
        subject: the subject it was published to.
        data: the payload.
        headers: the message's own headers (one value per name), or None.
        reply: the ``$JS.ACK`` reply subject (where acknowledgements go).

    Example::

        async for msg in messages:
            print(msg.subject, msg.metadata.stream_seq, msg.metadata.num_delivered)
            await msg.ack()
    """

    __slots__ = (
        "_headers",
        "_metadata",
        "_raw_headers",
        "_transport",
        "data",
        "reply",
        "subject",
    )

    def __init__(
        self,
        subject: str,
        reply: str,
        data: bytes,
        headers: dict[str, str] | None,
        transport: AckTransport | None = None,
        raw_headers: bytes | None = None,
    ) -> None:
        self.subject = subject
        self.reply = reply
        self.data = data
        self._headers = headers
        # The header block as received, parsed on first use of ``headers``: a
        # Processor keyed by sequence never reads them, and parsing them per
        # message cost about a sixth of its CPU. Kept: the msg id is read from it.
        self._raw_headers = raw_headers
        self._transport = transport
        self._metadata: MessageMetadata | None = None

    @property
    def headers(self) -> dict[str, str] | None:
        """The message's own headers, one value per name (the first), or None.

        Parsed on first use with :func:`oncestream._headers.parse_block`: names
        as sent, values trimmed; the write-time control headers
        (``Nats-Expected-*``, ``Nats-Batch-*``) are hidden, as JetStream's mirrors
        strip them. :attr:`raw_headers` has the block as received.
        """
        if self._headers is None and self._raw_headers is not None:
            self._headers = first_values(parse_block(self._raw_headers))
        return self._headers or None

    @headers.setter
    def headers(self, value: dict[str, str] | None) -> None:
        self._headers = value
        self._raw_headers = None

    @property
    def raw_headers(self) -> bytes | None:
        """The ``NATS/1.0`` header block as received (or rendered from :attr:`headers`)."""
        if self._raw_headers is None and self._headers:
            return render_block(self._headers)
        return self._raw_headers

    @property
    def metadata(self) -> MessageMetadata:
        """The JetStream metadata, parsed from :attr:`reply` on first use.

        Raises:
            JetStreamError: the message did not come from a JetStream consumer.
        """
        metadata = self._metadata
        if metadata is None:
            metadata = self._metadata = parse_metadata(self.reply)
        return metadata

    @property
    def seq(self) -> int:
        """The stream sequence (``metadata.stream_seq``).

        Read on its own when the full metadata has not been asked for: it is
        what a Processor needs for every message, and the cheapest to get.

        Raises:
            JetStreamError: the message did not come from a JetStream consumer.
        """
        metadata = self._metadata
        if metadata is not None:
            return metadata.stream_seq
        reply = self.reply
        if reply[:8] == "$JS.ACK.":
            tokens = reply.split(".")  # one pass (count + a bounded split took two)
            count = len(tokens)
            try:
                if count == 9:
                    return int(tokens[_V1_SEQ])
                if count in (11, 12):
                    return int(tokens[_V2_SEQ])
            except ValueError:
                pass
        return self.metadata.stream_seq  # raises the full error

    @property
    def msg_id(self) -> str | None:
        """The ``Nats-Msg-Id`` the server de-duplicated on (read as the server reads it), or None.

        Bytes that are not UTF-8 (only foreign writers produce them) show as
        U+FFFD; :func:`oncestream._headers.msg_id_key` keeps such ids apart.
        """
        return msg_id_of(self.raw_headers)

    def __repr__(self) -> str:
        return f"Message(subject={self.subject!r}, reply={self.reply!r}, bytes={len(self.data)})"

    async def _send(self, payload: bytes) -> None:
        if self._transport is None:
            raise JetStreamError(f"message on {self.subject!r} has no connection to ack with")
        await self._transport.publish(self.reply, payload)

    async def ack(self) -> None:
        """Acknowledge (fire and forget)."""
        await self._send(_ACK)

    async def ack_sync(self, timeout: float = 1.0) -> None:
        """Acknowledge and wait until the server confirms it (double ack).

        Raises:
            OperationTimeout: no confirmation within ``timeout`` seconds.
        """
        if self._transport is None:
            raise JetStreamError(f"message on {self.subject!r} has no connection to ack with")
        try:
            await self._transport.request(self.reply, _ACK, timeout=timeout)
        except TimeoutError as exc:
            raise OperationTimeout(
                f"ack of {self.reply!r} not confirmed within {timeout:g}s"
            ) from exc
        except OncestreamError:
            raise
        except Exception as exc:  # e.g. no responders: the consumer is gone
            raise JetStreamError(f"ack of {self.reply!r} failed: {exc}") from exc

    async def nak(self, delay: float | None = None) -> None:
        """Ask for redelivery, after ``delay`` seconds when given."""
        if delay is None:
            await self._send(_NAK)
        else:
            await self._send(b'-NAK {"delay": %d}' % int(delay * 1e9))

    async def term(self, reason: str | None = None) -> None:
        """Tell the server never to redeliver this message."""
        await self._send(_TERM if not reason else _TERM + b" " + reason.encode())

    async def in_progress(self) -> None:
        """Reset the ack wait timer: the message is still being worked on."""
        await self._send(_WPI)
