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

A user may be denied ``STREAM.NAMES`` (or it may not answer): then the target
stream's own ``STREAM.INFO`` tells, when the caller has a target (its publishes
carry ``Nats-Expected-Stream``, so no other stream may store them). A stream
that does not capture the subject, or no longer exists (``10059`` comes from
the meta leader only, ``jsStreamInfoRequest``), is :class:`StreamNotFound`; one
that captures it, or no answer, an outage. With nothing readable the outage
says that it could not tell, and which permission would let it (before, such
a user's publish to a subject no stream captures was retried as an outage
forever: found by a breaker).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from .._connection import Connection
from .._errors import NoResponders, PermissionDenied, StreamNotFound
from ..streams._internal import captures_subject

__all__ = ["Captors", "look_up", "no_leader_cause"]

log = logging.getLogger(__name__)

# Bounds on how long a lookup may take (an ack timeout, within these): a meta leader
# answers in milliseconds, and a cluster without one answers 10008 or nothing, which
# is an outage either way.
_LOOKUP_TIMEOUT = (1.0, 5.0)


@dataclass(frozen=True, kw_only=True)
class Captors:
    """What the server told, after a 503 on ``subject``, about the streams that capture it.

    Args:
        subject: the subject published to.
        names: the streams that capture it (empty: none does); None when that could
            not be told (``why``).
        stream: the target stream whose ``STREAM.INFO`` told it (``STREAM.NAMES``
            denied or unanswered); None when the server's list told it, or nothing did.
        subjects: that target's subjects; None when it does not exist.
        why: why ``STREAM.NAMES`` (and ``STREAM.INFO``) did not tell; "" when one did.
        grant: the permission this user lacks to tell ("" when none is lacking).
    """

    subject: str
    names: tuple[str, ...] | None
    stream: str | None = None
    subjects: tuple[str, ...] | None = ()
    why: str = ""
    grant: str = ""

    @property
    def missing(self) -> bool:
        """No stream can store the publish: :meth:`not_found` is its error."""
        return self.names == ()

    def not_found(self, attempts: int) -> StreamNotFound:
        """The error of a publish answered 503 on a subject no stream (target) captures."""
        said = (
            f'no stream listens on subject {self.subject!r}: the publish was answered "no '
            f'responders" (attempt {attempts}) and '
        )
        if self.stream is None:
            said += "the server lists no stream that captures the subject"
        elif self.subjects is None:
            said += f"its target stream {self.stream!r} no longer exists"
        else:
            own = ", ".join(repr(s) for s in self.subjects) or "no subjects"
            said += (
                f"its target stream {self.stream!r} captures {own}, not {self.subject!r} "
                f"(streams could not be listed: {self.why})"
            )
        return StreamNotFound(said, code=503)

    def leaderless(self) -> str:
        """Whose leader did not answer, for a publish whose stream exists or may exist."""
        if self.names:
            return f"stream {self.names[0]!r} captures it but no leader of it answered"
        if self.grant:
            return (
                "no stream leader answered, and oncestream could not tell whether any stream "
                f"captures it: this user has no permission to look streams up ({self.why}); grant "
                f"it publish permission on {self.grant!r} to tell a missing stream from one "
                "without a leader"
            )
        if self.stream is not None:
            return (
                f"no leader of stream {self.stream!r} answered (which stream captures it "
                f"could not be looked up: {self.why})"
            )
        return (
            "no stream leader answered (which stream captures it could not be looked up: "
            f"{self.why})"
        )


async def look_up(
    conn: Connection, subject: str, stream: str | None, ack_timeout: float
) -> Captors:
    """Ask the server which streams capture ``subject``; failing that, whether ``stream`` does.

    Each request waits ``ack_timeout``, at least 1 s and at most 5 s, for its answer.

    Args:
        stream: the caller's target stream (its publishes expect it), or None.

    Example::

        found = await look_up(conn, "orders.eu", "ORDERS", 5.0)  # names == ("ORDERS",)
    """
    low, high = _LOOKUP_TIMEOUT
    timeout = min(max(ack_timeout, low), high)
    try:
        reply = await conn.api("STREAM.NAMES", {"subject": subject}, timeout=timeout)
    except Exception as exc:  # unknown: ask the target, else an outage until told otherwise
        log.debug("could not list the streams that capture %r: %s", subject, exc)
        denied = isinstance(exc, PermissionDenied)
        why = f"{type(exc).__name__}: {exc}"
    else:
        return Captors(subject=subject, names=tuple(reply.get("streams") or ()))
    names_api = f"{conn.prefix}.STREAM.NAMES"
    if stream is None:
        return Captors(subject=subject, names=None, why=why, grant=names_api if denied else "")
    try:
        info = await conn.api(f"STREAM.INFO.{stream}", timeout=timeout)
    except StreamNotFound:  # the meta leader's answer: the target is gone
        return Captors(subject=subject, names=(), stream=stream, subjects=None, why=why)
    except Exception as exc:  # e.g. a stream without a leader, whose INFO may not answer
        log.debug("could not read stream %r for subject %r: %s", stream, subject, exc)
        why = f"{why}; STREAM.INFO {stream}: {type(exc).__name__}: {exc}"
        grant = names_api if denied and isinstance(exc, PermissionDenied) else ""
        return Captors(subject=subject, names=None, stream=stream, why=why, grant=grant)
    config = info.get("config") or {}
    subjects = tuple(str(s) for s in config.get("subjects") or ())
    captured = captures_subject(config, subject)
    names = (stream,) if captured else ()
    return Captors(subject=subject, names=names, stream=stream, subjects=subjects, why=why)


def no_leader_cause(subject: str, attempts: int) -> NoResponders:
    """The server's answer kept as the ``__cause__`` of such a failure: 503, transient."""
    n = f"{attempts} attempt{'s' if attempts != 1 else ''}"
    return NoResponders(f"no responders on {subject!r} after {n}", transient=True)
