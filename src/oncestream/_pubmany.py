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

from ._errors import ConfigError, PublishError
from ._headers import check_msg_id
from ._pubwire import (
    AckTally,
    Pending,
    too_large,
    too_many_inflight,
)

if TYPE_CHECKING:
    from ._pubtypes import PubAck, PublisherOptions

__all__ = ["WRITE_BATCH_BYTES", "BulkPublish"]

# Write to the socket once this much is queued, even before the loop yields.
WRITE_BATCH_BYTES = 64 * 1024

_Future = asyncio.Future
_monotonic = time.monotonic


class BulkPublish:
    """The Publisher's ``publish_many`` (a base class: the state is the Publisher's)."""

    options: PublisherOptions
    _started: bool
    _closed: bool
    _subjects: dict[str, bytes]
    _fast_hpub: bytes
    _fast_len: int
    _inbox: bytes
    _pending: dict[int, Pending]
    _out: list[bytes]
    _out_size: int
    _write_scheduled: bool
    _loop: asyncio.AbstractEventLoop | None
    _max_payload: int
    _ack_timeout: float
    _max_inflight: int
    _inflight: int
    _token: int
    _sent: int
    _idle: asyncio.Event

    async def start(self) -> None:
        raise NotImplementedError

    def _check_subject(self, subject: str) -> bytes:
        raise NotImplementedError

    async def _wait_permit(self) -> None:
        raise NotImplementedError

    def _write_out(self) -> None:
        raise NotImplementedError

    async def publish_many(
        self,
        subjects: Sequence[str],
        datas: Sequence[bytes],
        msg_ids: Sequence[str],
        *,
        tally: AckTally | None = None,
    ) -> list[asyncio.Future[PubAck]]:
        """:meth:`publish` of many msg-id-only messages in one loop; futures in input order.

        Awaits only when the window is full; raises as :meth:`publish` (the
        futures before a failing message stay valid). With ``tally``, the acks
        are counted there and no futures are returned (the cheapest path; a
        failed publish is in ``tally.errors`` and raised by :meth:`flush`).
        """
        if not self._started:
            await self.start()
        if not (len(subjects) == len(datas) == len(msg_ids)):
            raise ConfigError(
                f"publish_many: {len(subjects)} subjects, {len(datas)} data and "
                f"{len(msg_ids)} msg ids (one each per message)"
            )
        futures: list[asyncio.Future[PubAck]] = []
        append_future = futures.append
        sent = 0
        cache = self._subjects
        template, fixed = self._fast_hpub, self._fast_len
        inbox, pending, out = self._inbox, self._pending, self._out
        loop, max_payload, timeout = self._loop, self._max_payload, self._ack_timeout
        max_inflight = self._max_inflight
        try:
            for subject, data, msg_id in zip(subjects, datas, msg_ids, strict=True):
                if type(msg_id) is not str or not (
                    msg_id.isprintable() and msg_id and msg_id[0] != " " and msg_id[-1] != " "
                ):
                    check_msg_id(msg_id)  # is_clean_msg_id inlined; this names the reason
                subject_bytes = cache.get(subject)
                if subject_bytes is None:
                    subject_bytes = self._check_subject(subject)
                id_bytes = msg_id.encode()
                hdr_len = fixed + len(id_bytes)
                size = hdr_len + len(data)
                if size > max_payload:
                    raise too_large(msg_id, subject, size, max_payload)
                if self._inflight >= max_inflight:
                    if not self.options.backpressure:
                        raise too_many_inflight(self._inflight, max_inflight)
                    await self._wait_permit()
                    out = self._out  # _write_out swapped the list
                    max_payload = self._max_payload
                if self._closed:
                    raise PublishError("this Publisher is closed")
                if self._inflight == 0:
                    self._idle.clear()
                self._inflight += 1
                sent += 1
                self._token = token = self._token + 1
                cmd = template % (subject_bytes, inbox, token, hdr_len, size, id_bytes, data)
                if tally is None:
                    future: asyncio.Future[PubAck] = _Future(loop=loop)
                    pending[token] = Pending(cmd, future, msg_id, subject, _monotonic() + timeout)
                    append_future(future)
                else:
                    pending[token] = Pending(cmd, tally, msg_id, subject, _monotonic() + timeout)
                out.append(cmd)
                self._out_size += len(cmd)
                if self._out_size >= WRITE_BATCH_BYTES:
                    self._write_out()
                    out = self._out
        finally:
            self._sent += sent
            if self._out and not self._write_scheduled:
                self._write_scheduled = True
                loop.call_soon(self._write_out)  # type: ignore[union-attr]
        return futures
