"""The options and counters of a :class:`~oncestream.GroupMember`."""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from .._errors import ConfigError
from .._names import check_consumer_name
from .._options import parse_duration
from ._membership import BUCKET
from ._options import ProcessorOptions, ProcessorStats

__all__ = ["PRIORITY_GROUP", "GroupOptions", "GroupStats", "check_partition_options"]

#: The pinned priority group of every partition's consumer.
PRIORITY_GROUP = "members"
#: The Processors' counters a member sums (:meth:`GroupStats.totals`).
TOTALS = ("applied", "suppressed", "failed", "dead_lettered", "takeovers", "demotions")


def default_member_name() -> str:
    """``<host>-<pid>``: unique among the members running now."""
    host = "".join(c if c.isalnum() or c in "-_" else "-" for c in socket.gethostname())
    return f"{host or 'member'}-{os.getpid()}"


@dataclass(frozen=True, kw_only=True)
class GroupOptions:
    """How a :class:`~oncestream.GroupMember` joins its group.

    Args:
        member: this member's name (default ``<host>-<pid>``). Two instances started
            with the same name run the same partitions: one applies each (the pin),
            the other waits and takes over, as ``--standby`` instances do.
        static: ``(index, count)``: member ``index`` of a fixed ``count`` takes the
            partitions ``index``, ``index + count``, ... and no membership bucket is
            used; a dead member's partitions wait for it (or an instance with the same
            index) to come back. None (default): elastic, by liveness.
        heartbeat: seconds between writes of this member's key and reads of the
            others' (elastic only): how soon a join or a leave is seen.
        member_ttl: seconds after its last write that a member is taken as gone
            (whole seconds, at least 1 and at least twice ``heartbeat``). With the
            consumers' ``pinned_ttl``, the bound on moving a dead member's partitions.
        after: a consumer that processed the stream before it was partitioned: no
            partition is applied until it has nothing pending and nothing awaiting its
            ack, so each key's older messages are applied first.
        bucket: the KV bucket of the membership (default ``oncestream_groups``).

    Raises:
        ConfigError: naming the bad value.
    """

    member: str | None = None
    static: tuple[int, int] | None = None
    heartbeat: float = 1.0
    member_ttl: float = 4.0
    after: str | None = None
    bucket: str = BUCKET

    def __post_init__(self) -> None:
        if self.member is not None:
            check_consumer_name(self.member, "member")
        if self.after is not None:
            check_consumer_name(self.after, "after")
        heartbeat = parse_duration("heartbeat", self.heartbeat)
        ttl = parse_duration("member_ttl", self.member_ttl)
        if heartbeat < 0.1:
            raise ConfigError(f"heartbeat must be at least 0.1s, got {self.heartbeat!r}")
        if ttl < 1 or ttl != int(ttl) or ttl < 2 * heartbeat:
            raise ConfigError(
                f"member_ttl must be whole seconds, at least 1s and at least twice the "
                f"heartbeat ({heartbeat:g}s), got {self.member_ttl!r}"
            )
        object.__setattr__(self, "heartbeat", heartbeat)
        object.__setattr__(self, "member_ttl", ttl)
        if self.static is not None:
            index, count = _pair(self.static)
            if count < 1 or not 0 <= index < count:
                raise ConfigError(
                    f"static must be (index, count) with 0 <= index < count, got {self.static!r}"
                )
            object.__setattr__(self, "static", (index, count))
        if not self.bucket or any(c not in _BUCKET_CHARS for c in self.bucket):
            raise ConfigError(f"bucket must be letters, digits, '_' or '-', got {self.bucket!r}")

    @property
    def name(self) -> str:
        """This member's name."""
        return self.member or default_member_name()


_BUCKET_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


def _pair(value: Any) -> tuple[int, int]:
    try:
        index, count = value
    except (TypeError, ValueError):
        raise ConfigError(f"static must be (index, count), got {value!r}") from None
    if any(isinstance(v, bool) or not isinstance(v, int) for v in (index, count)):
        raise ConfigError(f"static must be two whole numbers (index, count), got {value!r}")
    return index, count


def check_partition_options(options: ProcessorOptions) -> None:
    """A group member sets the consumer's filter and priority group itself, per partition.

    Raises:
        ConfigError: ``options`` set one of them, or ``bind``.
    """
    clash = {
        "filter_subject": options.filter_subject is not None,
        "priority_group": options.priority_group is not None,
        "bind": options.bind,
    }
    given = [name for name, set_ in clash.items() if set_]
    if given:
        raise ConfigError(
            f"a group member runs each partition's consumer with the partition's filter "
            f"subject and a pinned priority group; its ProcessorOptions must leave "
            f"{', '.join(given)} unset"
        )


@dataclass
class GroupStats:
    """Counters of a running :class:`~oncestream.GroupMember`."""

    member: str = ""
    #: The partitions this member runs now (a Processor each, active or waiting for the pin).
    partitions: list[int] = field(default_factory=list)
    #: Of those, the ones it applies now, with the pin it applies under.
    active: dict[int, str] = field(default_factory=dict)
    #: Times the assignment of this member changed (joins, leaves, expiries seen).
    rebalances: int = 0
    #: Partitions it started and stopped running over its life.
    moved_in: int = 0
    moved_out: int = 0
    #: Partitions whose Processor stopped with an error and was started again.
    restarts: int = 0
    #: The Processors of partitions it no longer runs, summed (``totals`` adds the live ones).
    finished: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TOTALS, 0))
    #: The Processor of each partition it runs now.
    processors: dict[int, ProcessorStats] = field(default_factory=dict)
    started: float = field(default_factory=time.time)

    def totals(self) -> dict[str, int]:
        """Applied, suppressed, failed, dead-lettered and takeovers over every Processor."""
        return {
            k: self.finished[k] + sum(getattr(s, k) for s in self.processors.values())
            for k in TOTALS
        }

    def retire(self, partition: int, stats: ProcessorStats) -> None:
        """Fold the counters of partition's stopped Processor into :attr:`finished`."""
        for key in TOTALS:
            self.finished[key] += getattr(stats, key)
        if self.processors.get(partition) is stats:
            del self.processors[partition]

    def status(self) -> dict[str, Any]:
        """What this member writes in its membership key (``oncestream status`` reads it)."""
        return {
            "member": self.member,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "since": round(self.started, 3),
            "partitions": list(self.partitions),
            "active": {str(p): pin for p, pin in sorted(self.active.items())},
            "rebalances": self.rebalances,
            **self.totals(),
        }
