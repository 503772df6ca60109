"""Moving a durable consumer to another stream sequence (nats-server 2.14+).

``$JS.API.CONSUMER.RESET.<stream>.<consumer>`` with ``{"seq": N}`` makes the
consumer deliver from stream sequence N next: its pending and redelivery
state is dropped and its ack floor becomes N-1. ``{"seq": 0}`` (or no body)
goes back to its ack floor + 1 (everything not acknowledged comes again). The
server allows any N for ``deliver_policy=all`` (an N past the stream's end
makes it skip the messages stored next, up to N: :class:`ResetTarget` clamps it
to the end, as Kafka's reset clamps to the log end); for ``by_start_sequence`` and
``by_start_time`` only at or after the configured start; never for ``new``,
``last`` or ``last_per_subject`` (``invalid reset``, err_code 10204).

Moving a :class:`~oncestream.Processor`'s consumer back is safe: every
message delivered again is found in the ledger and acked, not applied again.

Example::

    from oncestream.streams import ResetTarget, reset_consumer

    done = await reset_consumer(conn, "ORDERS", "billing", ResetTarget(time=yesterday))
    print(done.seq, done.after["num_pending"])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .._connection import Connection
from .._errors import ConfigError, ErrCode, JetStreamError, NoResponders
from .._options import parse_int, parse_time, rfc3339
from ._admin import consumer_info, seq_at_time, stream_info
from ._version import require_server

__all__ = ["ConsumerReset", "ResetTarget", "reset_consumer", "reset_refusal"]

#: The first nats-server release with ``CONSUMER.RESET``.
RESET_SINCE = (2, 14)


@dataclass(frozen=True, kw_only=True)
class ResetTarget:
    """Where a consumer is reset to; at most one field is set.

    Args:
        seq: this stream sequence (1 to 2**63-1). Past the stream's end it is
            clamped to the end, last sequence + 1, as Kafka clamps a reset to the
            log end (:attr:`ConsumerReset.clamped_from` says so): a sequence not
            stored yet would otherwise skip the next messages stored.
        time: the first message stored at or after this time (ISO 8601 text, a
            duration ago like ``"10m"``, or a datetime).
        start: the stream's first sequence (everything still stored comes again).
        end: the stream's last sequence + 1 (nothing stored so far comes again).

    With none set the consumer goes back to its ack floor + 1.
    """

    seq: int | None = None
    time: datetime | str | None = None
    start: bool = False
    end: bool = False

    def __post_init__(self) -> None:
        given = [
            name
            for name, value in (
                ("seq", self.seq is not None),
                ("time", self.time is not None),
                ("start", self.start),
                ("end", self.end),
            )
            if value
        ]
        if len(given) > 1:
            raise ConfigError(f"give at most one reset target, got {', '.join(given)}")
        if self.seq is not None:
            parse_int("reset seq", self.seq, minimum=1)
        if self.time is not None:
            object.__setattr__(self, "time", parse_time("reset time", self.time))

    def describe(self) -> str:
        """In words: ``seq 12``, ``time 2026-...Z``, ``the stream's first sequence``..."""
        if self.seq is not None:
            return f"seq {self.seq}"
        if isinstance(self.time, datetime):
            return f"the first message at or after {rfc3339(self.time)}"
        if self.start:
            return "the stream's first sequence"
        if self.end:
            return "after the stream's last message"
        return "its ack floor + 1"


@dataclass(frozen=True, kw_only=True)
class ConsumerReset:
    """What :func:`reset_consumer` did (or, with ``dry_run``, would do).

    Attributes:
        stream, consumer: the consumer.
        target: what was asked for.
        seq: the stream sequence the consumer delivers from next (0: its ack floor + 1,
            which the server resolves).
        dry_run: True when nothing was changed.
        refusal: why the server would refuse (dry run only), or None.
        before: the consumer's info before; after: its info after (``before`` on a dry run).
        clamped_from: the sequence asked for when it was past the stream's end and
            ``seq`` is the end instead (last sequence + 1), else None.
    """

    stream: str
    consumer: str
    target: ResetTarget
    seq: int
    dry_run: bool = False
    refusal: str | None = None
    before: dict[str, Any] = field(default_factory=dict)
    after: dict[str, Any] = field(default_factory=dict)
    clamped_from: int | None = None


async def _target_seq(conn: Connection, stream: str, target: ResetTarget) -> int:
    if target.seq is not None:
        # Past the end: the stream's end instead (see ResetTarget.seq).
        last = int((await stream_info(conn, stream)).get("state", {}).get("last_seq", 0))
        return min(target.seq, last + 1)
    if isinstance(target.time, datetime):
        return await seq_at_time(conn, stream, target.time)
    if target.start or target.end:
        state = (await stream_info(conn, stream)).get("state", {})
        if target.start:
            return max(int(state.get("first_seq", 1) or 1), 1)
        return int(state.get("last_seq", 0)) + 1
    return 0


async def reset_refusal(conn: Connection, config: dict[str, Any], seq: int) -> str | None:
    """Why the server would refuse resetting a consumer with ``config`` to ``seq``, or None.

    The server's rule (consumer.go ``resetStartingSeqLocked``), checked without asking it.
    """
    if seq == 0:
        return None
    policy = config.get("deliver_policy", "all")
    if policy == "all":
        return None
    if policy == "by_start_sequence":
        start = int(config.get("opt_start_seq", 0))
        return None if seq >= start else f"below the consumer's start seq {start}"
    if policy == "by_start_time":
        stream = str(config.get("stream_name") or "")
        start_time = str(config.get("opt_start_time") or "")
        if not stream or not start_time:
            return None
        first = await seq_at_time(conn, stream, parse_time("opt_start_time", start_time))
        return None if seq >= first else f"below the consumer's start time {start_time}"
    return (
        f"a consumer with deliver_policy {policy!r} cannot be reset to a sequence "
        "(only all, by_start_sequence and by_start_time can)"
    )


async def reset_consumer(
    conn: Connection,
    stream: str,
    consumer: str,
    target: ResetTarget | None = None,
    *,
    dry_run: bool = False,
) -> ConsumerReset:
    """Reset durable ``consumer`` of ``stream`` to ``target`` (``$JS.API.CONSUMER.RESET``).

    Args:
        target: where to (default: the consumer's ack floor + 1).
        dry_run: resolve the target sequence and say whether the server would allow
            it, changing nothing.

    Raises:
        StreamNotFound / ConsumerNotFound: naming the stream or the consumer.
        ConfigError: the server is older than 2.14 (it has no consumer reset).
        JetStreamError: the server refused (``invalid reset: ...``, err_code 10204),
            the message naming the consumer and the sequence.
    """
    target = target or ResetTarget()
    before = await consumer_info(conn, stream, consumer)
    seq = await _target_seq(conn, stream, target)
    clamped = target.seq if target.seq is not None and seq != target.seq else None
    config = {**(before.get("config") or {}), "stream_name": stream}
    if dry_run:
        refusal = await reset_refusal(conn, config, seq)
        return ConsumerReset(
            stream=stream, consumer=consumer, target=target, seq=seq, dry_run=True,
            refusal=refusal, before=before, after=before, clamped_from=clamped,
        )  # fmt: skip
    require_server(conn, RESET_SINCE, "consumer reset")
    try:
        reply = await conn.api(f"CONSUMER.RESET.{stream}.{consumer}", {"seq": seq})
    except NoResponders as exc:
        # The consumer itself answers on its leader: the consumer exists (checked
        # above), so nothing answering means a server without consumer reset.
        raise ConfigError(
            f"nothing answered the consumer reset of {stream}/{consumer}: consumer reset "
            f"needs nats-server {RESET_SINCE[0]}.{RESET_SINCE[1]} or newer (or the "
            "consumer has no leader right now)"
        ) from exc
    except JetStreamError as exc:
        if exc.err_code != ErrCode.CONSUMER_INVALID_RESET:
            raise
        why = await reset_refusal(conn, config, seq)
        raise type(exc)(
            f"the server refused to reset consumer {stream}/{consumer} to seq {seq}: "
            f"{exc.description}" + (f" ({why})" if why else ""),
            code=exc.code,
            err_code=exc.err_code,
        ) from exc
    after = {k: v for k, v in reply.items() if k not in ("type", "reset_seq")}
    return ConsumerReset(
        stream=stream,
        consumer=consumer,
        target=target,
        seq=int(reply.get("reset_seq", seq)),
        before=before,
        after=after,
        clamped_from=clamped,
    )
