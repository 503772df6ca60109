"""What the parts of a Processor know of its consumer once it is bound: one frozen record."""

from __future__ import annotations

from dataclasses import dataclass

from ._options import ProcessorOptions

__all__ = ["BoundConsumer"]


@dataclass(frozen=True, kw_only=True)
class BoundConsumer:
    """The consumer a Processor applies, as set up (or bound) before its first pull.

    Each part of the Processor is built once with it (applying, acknowledging, the
    delivery limit, pinning): none is told anything about the consumer afterwards.

    Args:
        stream: the stream.
        consumer: the durable pull consumer.
        options: the Processor's options.
        ack_wait: seconds the server waits for an ack (the consumer's own; the
            configured one with ``bind``, which reads no consumer config).
        dlq_subject: where dead letters go ("": no dead-letter stream, keep retrying).

    Example::

        bound = BoundConsumer(stream="ORDERS", consumer="billing", options=opts, ack_wait=30.0)
    """

    stream: str
    consumer: str
    options: ProcessorOptions
    ack_wait: float
    dlq_subject: str = ""

    @property
    def where(self) -> str:
        """``stream/consumer``, as logs and errors name it."""
        return f"{self.stream}/{self.consumer}"
