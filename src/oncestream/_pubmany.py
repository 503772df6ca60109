"""The Publisher's bulk path: many msg-id-only publishes in one tight loop.

One coroutine per batch instead of one per message; otherwise exactly what
:meth:`Publisher.publish` does for a message with only a msg id (and
``Nats-Expected-Stream`` when the Publisher has a target stream): the same
frame, the same pending entry (so retries, reconnects and the window guard
apply unchanged), the same in-flight bound.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ._errors import ConfigError, MessageTooLarge, PublishError, TooManyInflight
from ._pubwire import Pending, check_header_value

if TYPE_CHECKING:
    from ._pubtypes import PubAck
    from .publisher import Publisher

__all__ = ["WRITE_BATCH_BYTES", "publish_many"]

# Write to the socket once this much is queued, even before the loop yields.
WRITE_BATCH_BYTES = 64 * 1024

_Future = asyncio.Future
_monotonic = time.monotonic


async def publish_many(
    pub: Publisher, subjects: Sequence[str], datas: Sequence[bytes], msg_ids: Sequence[str]
) -> list[asyncio.Future[PubAck]]:
    """See :meth:`Publisher.publish_many`."""
    if not pub._started:
        await pub.start()
    if not (len(subjects) == len(datas) == len(msg_ids)):
        raise ConfigError(
            f"publish_many: {len(subjects)} subjects, {len(datas)} data and "
            f"{len(msg_ids)} msg ids (one each per message)"
        )
    futures: list[asyncio.Future[PubAck]] = []
    append_future = futures.append
    cache = pub._subjects
    template, fixed = pub._fast_hpub, pub._fast_len
    inbox, pending, out = pub._inbox, pub._pending, pub._out
    loop, max_payload, ack_timeout = pub._loop, pub._max_payload, pub._ack_timeout
    max_inflight = pub._max_inflight
    try:
        for subject, data, msg_id in zip(subjects, datas, msg_ids, strict=True):
            if type(msg_id) is not str:
                raise ConfigError(f"msg_id must be a str, got {type(msg_id).__name__} {msg_id!r}")
            if not msg_id or "\n" in msg_id or "\r" in msg_id:
                check_header_value("Nats-Msg-Id", msg_id)
            subject_bytes = cache.get(subject)
            if subject_bytes is None:
                subject_bytes = pub._check_subject(subject)
            id_bytes = msg_id.encode()
            hdr_len = fixed + len(id_bytes)
            size = hdr_len + len(data)
            if size > max_payload:
                raise MessageTooLarge(
                    f"message {msg_id!r} to {subject!r} is {size} bytes with headers, above "
                    f"the server's max_payload of {max_payload} bytes",
                    code=413,
                )
            if pub._inflight >= max_inflight:
                if not pub.options.backpressure:
                    raise TooManyInflight(
                        f"{pub._inflight} publishes are awaiting a PubAck (max_inflight="
                        f"{max_inflight}); flush() or use backpressure=True"
                    )
                await pub._wait_permit()
                out = pub._out  # _write_out swapped the list
                max_payload = pub._max_payload
            if pub._closed:
                raise PublishError("this Publisher is closed")
            if pub._inflight == 0:
                pub._idle.clear()
            pub._inflight += 1
            pub._token = token = pub._token + 1
            cmd = template % (subject_bytes, inbox, token, hdr_len, size, id_bytes, data)
            future: asyncio.Future[PubAck] = _Future(loop=loop)
            pending[token] = Pending(cmd, future, msg_id, subject, _monotonic() + ack_timeout)
            append_future(future)
            out.append(cmd)
            pub._out_size += len(cmd)
            if pub._out_size >= WRITE_BATCH_BYTES:
                pub._write_out()
                out = pub._out
    finally:
        pub._sent += len(futures)
        if pub._out and not pub._write_scheduled:
            pub._write_scheduled = True
            loop.call_soon(pub._write_out)  # type: ignore[union-attr]
    return futures
