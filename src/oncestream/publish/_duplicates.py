"""Which msg ids of an atomic batch refused with 10201 the stream already holds.

nats-server refuses a whole atomic batch with err_code 10201 ("atomic publish
batch contains duplicate message id") when one of its msg ids is in the
stream's duplicate window, whoever stored it, or repeats within the batch. The
refusal names neither the id nor where it is stored: the commit
(``processJetStreamAtomicBatchMsg``, ``server/stream.go``) checks each staged
message with ``checkMsgHeadersPreClusteredProposal``
(``server/jetstream_batching.go``), which returns the stored sequence, and drops
it; the reply carries the error alone. The stream's de-duplication state cannot
be queried, so the stream is read.

A re-run (a restarted publisher, a retried Spark task, the same DataFrame
written again) sends the same ids in about the order they were first stored, and
an atomic batch is stored at consecutive sequences. So a search starts where the
previous one found its last id and stops as soon as every id is seen: a re-run
reads about one message per row. Only ids not found there send the search round
to the start of the duplicate window (from this machine's clock, with a margin:
finding an id stored a little before the window only spares a second copy).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from datetime import UTC, datetime

from .._connection import Connection
from .._retry import leader_stream_info, retrying
from ..read._internal import locate_ids
from ..streams._internal import seq_at_time

__all__ = ["DuplicateFinder"]

log = logging.getLogger(__name__)

#: Seconds added to the duplicate window when its first sequence is looked up by
#: time: the server's clock, which stamps the window, may run behind this one.
CLOCK_MARGIN = 5.0


class DuplicateFinder:
    """Finds the msg ids a stream already holds, for one publisher's refused batches.

    Searches run one at a time (each continues where the last one stopped).

    Args:
        conn: an open connection.
        stream: the stream that refused the batch.
        window: its ``duplicate_window`` in seconds.
        direct: it sets ``allow_direct`` (read with direct gets, else a consumer).
        replicated: it has replicas (the read confirms its end with the leader, up to
            the leader's last sequence). An id a read still misses (a mirror behind,
            with ``mirror_direct``) costs a re-send only: the leader refuses it again
            (10201) and the rows go one by one, whose PubAcks the leader sends.
        retry_timeout: seconds a read keeps retrying a transient failure.
    """

    def __init__(
        self,
        conn: Connection,
        stream: str,
        *,
        window: float,
        direct: bool,
        replicated: bool,
        retry_timeout: float,
    ) -> None:
        self.conn = conn
        self.stream = stream
        self.window = window
        self.direct = direct
        self.replicated = replicated
        self.retry_timeout = retry_timeout
        self._lock = asyncio.Lock()
        self._resume: int | None = None  # the sequence after the last id found

    async def find(self, ids: Sequence[str]) -> set[str]:
        """The ``ids`` the stream holds inside its duplicate window (or shortly before).

        Raises:
            StreamNotFound: the stream is gone.
        """
        async with self._lock:
            # The leader's end: a replica answers STREAM.INFO with its own while the
            # stream has no leader, and ids stored after that end would go unfound.
            info = await retrying(
                lambda: leader_stream_info(self.conn, self.stream),
                budget=self.retry_timeout,
                what=f"STREAM.INFO {self.stream}",
            )
            last = int(info["state"].get("last_seq", 0))
            resume = self._resume
            start = await self._window_start() if resume is None else resume
            found = await self._locate(ids, start, last)
            if len(found) < len(set(ids)) and resume is not None:
                window_start = await self._window_start()
                if window_start < resume:
                    rest = [i for i in ids if i not in found]
                    found.update(await self._locate(rest, window_start, resume - 1))
            if found:
                self._resume = max(found.values()) + 1
            log.debug(
                "stream %s: %d of %d refused msg ids found stored",
                self.stream,
                len(found),
                len(ids),
            )
            return set(found)

    async def _window_start(self) -> int:
        moment = time.time() - self.window - CLOCK_MARGIN
        return await seq_at_time(self.conn, self.stream, datetime.fromtimestamp(moment, UTC))

    async def _locate(self, ids: Sequence[str], first: int, last: int) -> dict[str, int]:
        return await locate_ids(
            self.conn,
            self.stream,
            ids,
            first,
            last,
            direct=self.direct,
            replicated=self.replicated,
            retry_timeout=self.retry_timeout,
        )
