"""Acknowledgements written in bulk: one buffered write for a whole batch."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

__all__ = ["publish_to_all"]


async def publish_to_all(nc: Any, subjects: Sequence[str], payload: bytes) -> None:
    """Publish ``payload`` (e.g. ``+ACK``) to every subject, without a reply subject.

    Errors are swallowed: an ack that does not arrive only causes a redelivery,
    which the ledger recognises.
    """
    send = getattr(nc, "_send_command", None)
    if send is None or not nc.is_connected:
        for subject in subjects:
            with contextlib.suppress(Exception):
                await nc.publish(subject, payload)
        return
    # nats-py 2.16 internals (pinned): one PUB buffer for the whole batch
    # instead of one awaited publish() per message.
    tail = b" %d\r\n%s\r\n" % (len(payload), payload)
    await send(b"".join([b"PUB " + s.encode() + tail for s in subjects]))
    if nc._flush_queue is not None and nc._flush_queue.empty():
        await nc._flush_pending()
