"""What a publish answered "no responders" (503) tells, and the errors it ends in.

nats-server answers 503 to a message with a reply subject that reached no
subscriber at all: none on the server, none behind a route or gateway
(``server/client.go``, ``processInboundClientMsg``). For a publish that has
two causes: no stream captures the subject, or the clustered stream that does
has no leader (only a stream's leader subscribes to its subjects,
``stream.setLeader``). So a 503 proves that the message reached no stream (a
publish stored nothing; the commit message of an atomic batch committed
nothing, and only it can commit that batch), but not why. The server is asked
(``STREAM.NAMES`` filtered by the subject, answered by the meta leader): only
its positive "none" is :class:`StreamNotFound`; a stream that captures the
subject, or no answer (a cluster without a meta leader), is an outage that a
retry may outlast. The Publisher (``_retry``) and the atomic batches
(``_batch``, ``_atomic``) read a 503 this way.
"""

from __future__ import annotations

import logging

from .._connection import Connection
from .._errors import NoResponders, StreamNotFound

__all__ = ["capturing_streams", "leaderless", "no_leader_cause", "stream_not_found"]

log = logging.getLogger(__name__)

# Bounds on how long a lookup may take (an ack timeout, within these): a meta leader
# answers in milliseconds, and a cluster without one answers 10008 or nothing, which
# is an outage either way.
_LOOKUP_TIMEOUT = (1.0, 5.0)


async def capturing_streams(
    conn: Connection, subject: str, ack_timeout: float
) -> tuple[list[str] | None, str]:
    """The streams the server lists as capturing ``subject``; None and why when it did not say.

    Waits ``ack_timeout``, at least 1 s and at most 5 s, for the answer.

    Example::

        names, why = await capturing_streams(conn, "orders.eu", 5.0)  # (["ORDERS"], "")
    """
    low, high = _LOOKUP_TIMEOUT
    try:
        reply = await conn.api(
            "STREAM.NAMES", {"subject": subject}, timeout=min(max(ack_timeout, low), high)
        )
    except Exception as exc:  # unknown: an outage until the server says otherwise
        log.debug("could not look up the stream that captures %r: %s", subject, exc)
        return None, f"{type(exc).__name__}: {exc}"
    return list(reply.get("streams") or []), ""


def stream_not_found(subject: str, attempts: int) -> StreamNotFound:
    """The error of a publish answered 503 on ``subject`` that no stream captures."""
    return StreamNotFound(
        f'no stream listens on subject {subject!r}: the publish was answered "no '
        f'responders" (attempt {attempts}) and the server lists no stream that captures '
        "the subject",
        code=503,
    )


def leaderless(names: list[str] | None, stream: str | None, why: str) -> str:
    """Whose leader did not answer, for a publish answered 503 by a stream that exists
    (``names``) or may exist (None: the lookup got no answer, ``why``); ``stream``: the
    target, when the caller has one."""
    if names:
        return f"stream {names[0]!r} captures it but no leader of it answered"
    if stream is not None:
        return (
            f"no leader of stream {stream!r} answered (which stream captures it could not be "
            f"looked up: {why})"
        )
    return f"no stream leader answered (which stream captures it could not be looked up: {why})"


def no_leader_cause(subject: str, attempts: int) -> NoResponders:
    """The server's answer kept as the ``__cause__`` of such a failure: 503, transient."""
    n = f"{attempts} attempt{'s' if attempts != 1 else ''}"
    return NoResponders(f"no responders on {subject!r} after {n}", transient=True)
