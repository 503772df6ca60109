"""Riding out transient JetStream conditions: leader elections, a paused or restarting node.

While a clustered stream elects a new leader (typically 2-9 s after its leader
dies) API requests time out, replicas answer ``STREAM.INFO`` without a leader,
requests to a consumer that lived on the dead node get ``503`` (no
responders), and a leaderless meta group answers ``10008``. All of these go
away by themselves; a missing stream, a denied subject or a bad request do
not. :func:`retrying` is the one retry loop (the Spark source uses it for its
driver-side planning and its executor-side range reads; the Processor for its
ledger, ack confirmations, consumer resets and dead letters, with a predicate,
a count and delays of its own): it repeats an idempotent operation with bounded
exponential backoff while the error is transient, within a total time budget,
and lets every other error through at once. Callers name what sets the budget;
this module knows no option names.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ._connection import Connection
from ._errors import ErrCode, JetStreamError, NoResponders, OperationTimeout, StreamNotFound

__all__ = [
    "TRANSIENT_ERR_CODES",
    "Unavailable",
    "backoff",
    "is_transient",
    "leader_stream_info",
    "retrying",
    "stream_missing",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: JetStream ``err_code`` values that mean "not now" rather than "never": no meta
#: leader, a cluster that cannot handle it, every replica of the stream/consumer down.
TRANSIENT_ERR_CODES = frozenset(
    {
        ErrCode.CLUSTER_NOT_AVAIL,
        ErrCode.CLUSTER_NOT_LEADER,
        ErrCode.STREAM_OFFLINE,
        ErrCode.CONSUMER_OFFLINE,
    }
)

_FIRST_DELAY = 0.1
_MAX_DELAY = 2.0


class Unavailable(OperationTimeout):
    """A transient condition seen on the wire (no stream leader, a replica behind)."""


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is worth retrying: a timeout or a "temporarily unavailable" answer.

    A 503 (:class:`NoResponders`) is transient only when raised as such by a
    caller that knows its target exists (``transient=True``).
    """
    if isinstance(exc, TimeoutError):  # OperationTimeout and Unavailable too
        return True
    if isinstance(exc, NoResponders):
        return exc.transient
    return isinstance(exc, JetStreamError) and exc.err_code in TRANSIENT_ERR_CODES


def backoff(attempt: int) -> float:
    """Seconds to wait before retry number ``attempt`` (0-based): 0.1, 0.2, 0.4 ... 2.0."""
    return min(_MAX_DELAY, _FIRST_DELAY * float(2 ** min(attempt, 16)))


async def retrying(
    operation: Callable[[], Awaitable[T]],
    *,
    budget: float | None,
    what: str,
    on_retry: Callable[[BaseException], Awaitable[None]] | None = None,
    budget_source: str = "the caller's retry budget",
    attempts: int | None = None,
    retry_if: Callable[[BaseException], bool] = is_transient,
    delay: Callable[[int], float] = backoff,
    log_retries: bool = True,
) -> T:
    """Run ``operation`` until it succeeds, retrying transient errors for ``budget`` seconds.

    ``operation`` must be safe to repeat (it is called again from scratch).
    Errors for which ``retry_if`` (by default :func:`is_transient`) is false
    propagate at once. After ``budget`` seconds (counted from the first
    attempt; an attempt already running is not interrupted) the last transient
    error propagates with a note saying how long it was retried; after
    ``attempts`` attempts it propagates as it is.

    Args:
        operation: a coroutine function without arguments.
        budget: total seconds to keep retrying (0: no retries; None: no
            time limit, for a caller bounded by ``attempts`` or ``retry_if``).
        what: the operation, for logs and the note.
        on_retry: awaited with the error before each retry; it may reset
            state or raise a permanent error instead (e.g. after learning
            that a stream does not exist).
        budget_source: what sets ``budget``, named in the note (e.g. the
            option a user changes to wait longer).
        attempts: at most this many calls of ``operation`` (None: no limit).
        retry_if: whether an error is worth another attempt; it may also
            look at the caller's state (a stop requested).
        delay: seconds to wait before retry number ``n`` (0-based), by
            default :func:`backoff`; never past the budget.
        log_retries: log each retry on the ``oncestream._retry`` logger (False for a
            caller that reports them itself, in ``on_retry``).

    Raises:
        OncestreamError: the operation's own error (permanent, or transient
            once the budget is spent).
        ValueError: ``attempts`` below 1, or ``budget`` negative or NaN (a caller's bug).

    Example::

        info = await retrying(lambda: conn.stream_info("ORDERS"), budget=30, what="STREAM.INFO")
    """
    if attempts is not None and attempts < 1:
        raise ValueError(f"{what}: attempts must be at least 1, got {attempts}")
    if budget is not None and not budget >= 0:  # NaN fails this too
        raise ValueError(f"{what}: budget must be seconds >= 0 or None, got {budget!r}")
    deadline = None if budget is None else time.monotonic() + budget
    attempt = 0
    while True:
        try:
            return await operation()
        except Exception as exc:
            if not retry_if(exc) or (attempts is not None and attempt + 1 >= attempts):
                raise
            left = math.inf if deadline is None else deadline - time.monotonic()
            if left <= 0:
                exc.add_note(
                    f"{what}: still failing after {budget:g}s of retries ({attempt + 1} attempts; "
                    f"{budget_source} sets this budget)"
                )
                raise
            if log_retries and deadline is None:
                log.info("%s: %s; retrying (attempt %d)", what, exc, attempt + 2)
            elif log_retries:
                log.info("%s: %s; retrying (%.1fs of the retry budget left)", what, exc, left)
            if on_retry is not None:
                await on_retry(exc)
            wait = delay(attempt)
            if deadline is not None:
                wait = min(wait, max(0.0, deadline - time.monotonic()))
            await asyncio.sleep(wait)
            attempt += 1


async def leader_stream_info(conn: Connection, stream: str) -> dict[str, Any]:
    """``STREAM.INFO`` as the stream's leader sees it.

    While a clustered stream has no leader its replicas answer with their own,
    possibly stale, state and an empty ``cluster.leader``; such an answer is
    reported as :class:`Unavailable` so that callers wrapped in
    :func:`retrying` wait for the new leader instead of planning on it.

    Raises:
        Unavailable: a replica answered without a leader.
        StreamNotFound: the stream does not exist.
    """
    info = await conn.stream_info(stream)
    if leaderless(info):
        last = (info.get("state") or {}).get("last_seq", 0)
        raise Unavailable(
            f"stream {stream!r} has no leader (an election is in progress): the replica "
            f"that answered reports last_seq {last}, which may be behind"
        )
    return info


def leaderless(info: dict[str, Any]) -> bool:
    """Whether a ``STREAM.INFO`` answer came from a clustered stream without a leader.

    While a replicated stream has no leader, each of its servers answers with its own
    state (nats-server ``jsStreamInfoRequest``, a member of a leaderless group): a
    replica restarted from an emptied or cut store reports fewer messages than the
    stream holds. Its ``cluster`` section then names no leader.
    """
    cluster = info.get("cluster")
    return isinstance(cluster, dict) and not cluster.get("leader")


async def stream_missing(conn: Connection, stream: str) -> StreamNotFound | None:
    """Ask whether ``stream`` exists; the ``StreamNotFound`` if the server says it does not.

    Only the meta leader (or a single server) answers ``10059`` for a stream it
    has no record of, so that answer is authoritative; a timeout, a
    leaderless answer or any other error leaves the question open (None).
    """
    try:
        await conn.stream_info(stream)
    except StreamNotFound as exc:
        return exc
    except Exception as exc:  # unknown: the caller keeps retrying
        log.debug("could not tell whether stream %r exists: %s", stream, exc)
    return None
