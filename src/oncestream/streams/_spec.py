"""Streams from a typed spec: create, update or check one; lineage ids.

Stream and consumer administration and single-message reads are in
:mod:`oncestream.streams._admin`; ranges of messages are read by :mod:`oncestream.read`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .._connection import Connection
from .._errors import ConfigError, ErrCode, JetStreamError, StreamNotFound
from .._names import check_stream_name, check_subject_filter, subject_matches
from .._options import parse_duration, parse_int, seconds_to_ns
from ._admin import add_stream, update_stream
from ._partitions import MAX_PARTITIONS, Partitioning
from ._version import server_version

__all__ = [
    "FAST_INGEST_SINCE",
    "StreamSource",
    "StreamSpec",
    "captures_subject",
    "check_partitioning_change",
    "create_stream_if_missing",
    "ensure_stream",
    "lineage_id",
    "overlapping_streams",
    "stream_exists",
]


#: The first nats-server release that takes fast-ingest batches (``allow_batched``, ADR-50).
FAST_INGEST_SINCE = (2, 14)


@dataclass(frozen=True, kw_only=True)
class StreamSource:
    """A mirror or source of another stream, possibly in another JetStream domain.

    Args:
        name: the origin stream.
        domain: the origin's JetStream domain (sets the external API prefix).
        api_prefix: explicit external API prefix (instead of ``domain``).
        deliver_prefix: optional external delivery prefix (cross-account).
        filter_subject: only copy these subjects (sources only).
    """

    name: str
    domain: str | None = None
    api_prefix: str | None = None
    deliver_prefix: str | None = None
    filter_subject: str | None = None

    def __post_init__(self) -> None:
        check_stream_name(self.name, "StreamSource name")
        if self.filter_subject is not None:
            check_subject_filter(self.filter_subject, "StreamSource filter_subject")
        if self.domain and self.api_prefix:
            raise ConfigError("StreamSource: give domain or api_prefix, not both")

    def to_api(self) -> dict[str, Any]:
        result: dict[str, Any] = {"name": self.name}
        prefix = self.api_prefix or (f"$JS.{self.domain}.API" if self.domain else None)
        if prefix:
            result["external"] = {"api": prefix}
            if self.deliver_prefix:
                result["external"]["deliver"] = self.deliver_prefix
        if self.filter_subject:
            result["filter_subject"] = self.filter_subject
        return result


@dataclass(frozen=True, kw_only=True)
class StreamSpec:
    """What a stream should look like.

    Args:
        name: stream name (nats-server's rules, see :mod:`oncestream._names`).
        subjects: subjects it captures (empty for a mirror).
        storage: ``"file"`` (survives restarts) or ``"memory"``.
        duplicate_window: time within which equal ``Nats-Msg-Id`` s are dropped
            (seconds, or a duration string like ``"2m"``).
        max_age: time to keep messages (0 = forever).
        max_msgs, max_bytes, max_msgs_per_subject: limits (-1 = none).
        replicas: 1, 3 or 5 in a cluster.
        allow_direct: enable direct get (fast reads, last-by-subject lookups).
        allow_batched: accept fast-ingest batches (a :class:`~oncestream.Publisher`
            then sends them by default, see ``PublisherOptions.ingest``). None (the
            default): on when the stream is created on nats-server 2.14+ and is not
            a mirror, and an existing stream keeps its setting when
            :func:`ensure_stream` updates it; True / False: exactly that. Raises
            the stream's required API level, so servers older than 2.14 in a
            cluster cannot host it: give False in a cluster of mixed releases.
        allow_atomic: accept atomic batches, stored all-or-nothing (nats-server
            2.12+; ``ProducerSession(batch_size>1)``, ``AtomicPublisher``, the
            Spark sink's ``ingest=atomic``).
        partitions: spread the messages over this many partitions by key (0: none).
            The stream then captures its one subject pattern and the server stores
            each message under ``<partition>.<subject>`` (a stream subject transform,
            see :class:`Partitioning`), for a group of Processors
            (:class:`~oncestream.GroupMember`) to share.
        partition_key: the 1-based indexes of the ``*`` tokens of the subject that
            form the key (``("orders.*.*",)`` with ``(2,)``: the third token); empty:
            the whole subject is the key.
        mirror: mirror another stream instead of capturing subjects.
        sources: aggregate other streams.
        extra: further raw API config keys.

    Example::

        await ensure_stream(conn, StreamSpec(name="ORDERS", subjects=("orders.>",)))
    """

    name: str
    subjects: tuple[str, ...] = ()
    storage: Literal["file", "memory"] = "file"
    duplicate_window: float = 120.0
    max_age: float = 0.0
    max_msgs: int = -1
    max_bytes: int = -1
    max_msgs_per_subject: int = -1
    replicas: int = 1
    allow_direct: bool = True
    allow_batched: bool | None = None
    allow_atomic: bool = False
    partitions: int = 0
    partition_key: tuple[int, ...] = ()
    mirror: StreamSource | None = None
    sources: tuple[StreamSource, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_stream_name(self.name, "stream name")
        for subject in self.subjects:
            check_subject_filter(subject, f"stream {self.name!r} subject")
        for name in ("duplicate_window", "max_age"):
            object.__setattr__(self, name, parse_duration(name, getattr(self, name)))
        if self.storage not in ("file", "memory"):
            raise ConfigError(f"storage must be 'file' or 'memory', got {self.storage!r}")
        if self.mirror is not None and (self.subjects or self.sources):
            raise ConfigError("a mirror stream cannot also have subjects or sources")
        if self.mirror is None and not self.sources and not self.subjects:
            raise ConfigError(f"stream {self.name!r} needs subjects, a mirror or sources")
        if self.allow_batched and self.mirror is not None:
            raise ConfigError("a mirror stream cannot allow batched publishing (allow_batched)")
        if self.allow_atomic and self.mirror is not None:
            raise ConfigError("a mirror stream cannot allow atomic batches (allow_atomic)")
        for name in ("max_msgs", "max_bytes", "max_msgs_per_subject"):
            parse_int(name, getattr(self, name), minimum=-1)
        if self.replicas not in (1, 2, 3, 4, 5):
            raise ConfigError(f"replicas must be 1..5, got {self.replicas!r}")
        self._check_partitions()

    def _check_partitions(self) -> None:
        # Checked before the "0 = none" test: False, 0.0 and None compare equal to 0 or
        # are falsy, and were taken as "not partitioned" (or blamed on partition_key).
        if (
            isinstance(self.partitions, bool)
            or not isinstance(self.partitions, int)
            or not 0 <= self.partitions <= MAX_PARTITIONS
        ):
            raise ConfigError(
                f"stream {self.name!r}: partitions must be a whole number from 1 to "
                f"{MAX_PARTITIONS} (0: not partitioned), got {self.partitions!r}"
            )
        if self.partitions == 0 and not self.partition_key:
            return
        if not self.partitions:
            raise ConfigError(f"stream {self.name!r}: partition_key needs partitions (> 0)")
        if len(self.subjects) != 1 or self.mirror is not None or self.sources:
            raise ConfigError(
                f"stream {self.name!r}: a partitioned stream captures exactly one subject "
                f"pattern (the one it maps to partitions) and no mirror or sources; got "
                f"subjects {list(self.subjects)}"
            )
        if "subject_transform" in self.extra:
            raise ConfigError(
                f"stream {self.name!r}: partitions set the stream's subject_transform; "
                "do not also give one in extra"
            )
        _ = self.partitioning  # validates the pattern, count and key

    @property
    def partitioning(self) -> Partitioning | None:
        """How the stream is partitioned (None: it is not)."""
        if not self.partitions:
            return None
        return Partitioning(
            subjects=self.subjects[0], partitions=self.partitions, key=tuple(self.partition_key)
        )

    def batched_on(self, server: tuple[int, ...] | None) -> bool:
        """Whether the stream allows fast-ingest batches when created on release ``server``.

        ``allow_batched=None`` (the default) means: where the server takes them
        (2.14+; None, a server that did not say its version, is taken as too old).
        """
        if self.allow_batched is not None:
            return self.allow_batched
        return self.mirror is None and server is not None and server[:2] >= FAST_INGEST_SINCE

    def to_api(self, server: tuple[int, ...] | None = None) -> dict[str, Any]:
        """The stream config as the JetStream API expects it, for nats-server release ``server``.

        ``server`` decides ``allow_batched=None`` (see :meth:`batched_on`); without
        it the default is off.
        """
        config: dict[str, Any] = {
            "name": self.name,
            "storage": self.storage,
            "retention": "limits",
            "discard": "old",
            "num_replicas": self.replicas,
            "duplicate_window": seconds_to_ns(self.duplicate_window),
            "max_age": seconds_to_ns(self.max_age),
            "max_msgs": self.max_msgs,
            "max_bytes": self.max_bytes,
            "max_msgs_per_subject": self.max_msgs_per_subject,
            "allow_direct": self.allow_direct,
        }
        if self.subjects:
            config["subjects"] = list(self.subjects)
        if self.mirror is not None:
            config["mirror"] = self.mirror.to_api()
            config["mirror_direct"] = self.allow_direct
        if self.sources:
            config["sources"] = [source.to_api() for source in self.sources]
        if self.batched_on(server):
            config["allow_batched"] = True
        if self.allow_atomic:
            config["allow_atomic"] = True
        partitioning = self.partitioning
        if partitioning is not None:
            config["subject_transform"] = partitioning.transform()
        config.update(self.extra)
        return config


async def stream_exists(conn: Connection, name: str) -> bool:
    """Whether stream ``name`` exists (other errors of the lookup propagate)."""
    try:
        await conn.stream_info(name)
    except StreamNotFound:
        return False
    return True


async def create_stream_if_missing(conn: Connection, spec: StreamSpec) -> dict[str, Any]:
    """Create the stream when it does not exist; an existing one is returned unchanged.

    Returns:
        The server's stream info.
    """
    try:
        return await conn.stream_info(spec.name)
    except StreamNotFound:
        pass
    try:
        return await add_stream(conn, spec.to_api(server_version(conn)))
    except JetStreamError as exc:  # created concurrently with another config
        if exc.err_code != ErrCode.STREAM_NAME_EXIST:
            raise
        return await conn.stream_info(spec.name)


async def overlapping_streams(
    conn: Connection, subjects: tuple[str, ...]
) -> dict[str, tuple[str, ...]]:
    """The existing streams whose subjects overlap any of ``subjects``, with their subjects.

    What a ``subjects overlap with an existing stream`` (10065) refusal does not
    say: the server's ``STREAM.NAMES`` filter matches the same overlaps.

    Example::

        await overlapping_streams(conn, ("orders.eu.>",))  # {"ORDERS": ("orders.>",)}
    """
    found: dict[str, tuple[str, ...]] = {}
    for subject in subjects:
        reply = await conn.api("STREAM.NAMES", {"subject": subject})
        for name in reply.get("streams") or ():
            if name not in found:
                info = await conn.stream_info(name)
                found[name] = tuple(info["config"].get("subjects") or ())
    return found


async def owning_stream(conn: Connection, subject: str) -> str | None:
    """The stream that captures publish subject ``subject``, or None when none does.

    The server's ``STREAM.NAMES`` filtered by the subject: a subject belongs to
    one stream at most (the server refuses overlapping stream subjects, 10065).

    Raises:
        ConfigError: the server names several streams (never seen; not guessed).

    Example::

        await owning_stream(conn, "orders.eu")  # "ORDERS"
    """
    reply = await conn.api("STREAM.NAMES", {"subject": subject})
    names = sorted(reply.get("streams") or ())
    if len(names) > 1:
        raise ConfigError(f"subject {subject!r} is captured by several streams: {names}")
    return names[0] if names else None


def captures_subject(config: dict[str, Any], subject: str) -> bool:
    """Whether a stream with ``config`` (``STREAM.INFO``'s) stores a publish to ``subject``.

    What ``STREAM.NAMES`` filtered by the subject tells, read from one stream's own
    config (for a user who may read it but not list streams). A stream captures its
    ``subjects`` (wildcards included); a partitioned stream's subject transform
    changes the subject it stores (``<partition>.<subject>``), not the one it
    captures, so its published pattern is matched, never the stored one. A mirror
    captures nothing.

    Example::

        captures_subject({"subjects": ["orders.>"]}, "orders.eu")  # True
    """
    if config.get("mirror"):
        return False
    return any(subject_matches(str(pattern), subject) for pattern in config.get("subjects") or ())


async def ensure_stream(conn: Connection, spec: StreamSpec) -> dict[str, Any]:
    """Create the stream, or update it when it exists with a different config.

    A new stream allows fast-ingest batches where the server takes them, unless
    ``spec.allow_batched`` says otherwise; an existing one keeps its
    ``allow_batched`` when the spec leaves it at None (``oncestream doctor``
    suggests the edit).

    Returns:
        The server's stream info.

    Raises:
        JetStreamError: if the server refuses the config (e.g. changing storage).
    """
    try:
        info = await conn.stream_info(spec.name)
    except StreamNotFound:
        return await add_stream(conn, spec.to_api(server_version(conn)))
    config = spec.to_api()
    check_partitioning_change(info, spec.partitioning)
    if spec.allow_batched is None and (info.get("config") or {}).get("allow_batched"):
        config["allow_batched"] = True
    return await update_stream(conn, config)


def check_partitioning_change(info: dict[str, Any], wanted: Partitioning | None) -> None:
    """Refuse to change how a stream that holds messages is partitioned.

    The server maps only messages stored after the change: the ones stored before
    keep their subjects (unpartitioned, or under the old partition numbers), so a
    group would miss them or take a key's messages from two partitions at once.

    Raises:
        ConfigError: naming the stream, both layouts and what to do instead.
    """
    config = info.get("config") or {}
    name = config.get("name")
    current = Partitioning.from_config(config)
    if current == wanted:
        return
    held = int((info.get("state") or {}).get("messages", 0))
    if not held:
        return
    now = current.describe() if current else "not partitioned"
    then = wanted.describe() if wanted else "not partitioned"
    if current is None and wanted is not None:
        how = (
            f"partition it in place with `oncestream stream edit {name} --partitions "
            f"{wanted.partitions}"
            + (f" --partition-key {','.join(map(str, wanted.key))}" if wanted.key else "")
            + "`: messages stored from then on are mapped, the ones stored before keep "
            "their subjects and are applied first by the consumer that processed them "
            "(start the group with --after <that consumer>; docs/production.md, "
            "'Scaling out'); or create a new partitioned stream and publish into it"
        )
    else:
        how = (
            "a key's older messages would stay in their old partition while its new ones "
            "go to another; let every consumer finish the stream and purge it, or create "
            "a new stream with the new layout"
        )
    raise ConfigError(
        f"stream {name} holds {held} messages and is {now}; refusing to make it {then}: {how}"
    )


def lineage_id(stream: str, sequence: int) -> str:
    """The message id of an output derived from input ``stream`` / ``sequence``.

    The jetstream sink assigns it to rows that carry the source's ``stream``
    and ``sequence`` columns; the audit's ``lineage`` key computes it.

    Example::

        lineage_id("ORDERS", 17)  # -> "ORDERS:17"
    """
    return f"{stream}:{sequence}"
