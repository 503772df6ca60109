"""A member of a group of Processors that share a partitioned stream: :class:`GroupMember`.

A partitioned stream (:class:`~oncestream.streams.Partitioning`) stores each key's
messages in one of N partitions. A group applies partition ``p`` through one
durable consumer, ``<group>-p<p>``, filtered to it, in a pinned priority group,
with the ledger of that partition. Each member runs a :class:`Processor` for every
partition assigned to it (:mod:`oncestream.process._assignment`, from the live
members of :mod:`oncestream.process._membership`), on one connection.

What keeps each message applied once and each key in order is the active/standby
takeover of :mod:`oncestream.process._pinning`, per partition; the assignment only
steers which member competes for which partition:

- the server delivers a partition's messages to one pull request's pin at a time;
- a member that starts running a partition waits as a standby until the server
  pins it (the partition is new, its old member released it, or the old member's
  pin expired after ``pinned_ttl`` because it died or froze), then fences the
  partition in its ledger and resets the consumer to its ack floor before it
  applies anything: what the old member held unacknowledged comes again, in
  stream order, and what it applied is found in the ledger;
- a member that stops running a partition (the assignment moved it, or it stops)
  finishes its batch, acks, hands back what it buffered, and unpins the consumer
  if the pin is still its own, so the new member takes over at once;
- a member that was frozen and wakes up finds its batch refused by the fence (or
  its pull refused by the server) and waits as a standby.

Members that see different membership for a moment may both run a partition
(the pin and the fence decide) or neither (it waits): never unsafe, only slower.

Example::

    member = GroupMember(conn, "ORDERS", "billing", handle,
                         ledger="sqlite:///billing-{partition}.db")
    await member.run()           # until member.request_stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from .._connection import Connection, connect
from .._errors import (
    ConfigError,
    ConsumerNotFound,
    LedgerUnusable,
    MaxDeliverError,
    OncestreamError,
    OperationTimeout,
    StreamNotFound,
)
from .._logthrottle import LogThrottle
from .._names import MAX_NAME_LEN, check_consumer_name, check_stream_name, subjects_overlap
from .._options import ConnectOptions
from ..ledger import Ledger, ledger_from_url
from ..streams import Partitioning
from ..streams._internal import MAX_PARTITIONS
from ._applying import BatchHandler, Handler
from ._assignment import assign, static_partitions
from ._group_options import (
    PRIORITY_GROUP,
    GroupOptions,
    GroupStats,
    check_partition_options,
)
from ._membership import Membership
from ._options import ProcessorOptions, ProcessorStats
from ._pinning import require_reset
from ._processor import Processor
from ._setup import check_handler, consumer_filters

__all__ = ["GroupMember", "partition_consumer", "partition_ledgers"]

log = logging.getLogger(__name__)

#: Seconds before a partition whose Processor stopped with an error is started again.
_RESTART_DELAY = 1.0

PartitionLedgers = Callable[[int], Ledger]


def partition_consumer(group: str, partition: int) -> str:
    """The durable consumer that applies ``partition`` for ``group``: ``<group>-p<partition>``."""
    return f"{group}-p{partition}"


def partition_ledgers(url: str) -> PartitionLedgers:
    """The ledger of each partition from a database URL.

    ``{partition}`` in the URL is replaced by the partition's number: one SQLite file
    per partition (``sqlite:///billing-{partition}.db``), which every member on the
    host opens. A URL without it is one ledger shared by every partition: PostgreSQL
    for members on several hosts (its rows are keyed by stream sequence, so the
    partitions' consumers, whose filters are disjoint, share it safely).

    Raises:
        ConfigError: the URL is not a ledger URL (see :func:`~oncestream.ledger_from_url`).
    """
    ledger_from_url(url.replace("{partition}", "0"))  # validated now, not at the first start
    if "{partition}" in url:
        return lambda partition: ledger_from_url(url.replace("{partition}", str(partition)))
    return lambda _partition: ledger_from_url(url)


class _Running:
    """One partition's Processor and its task; :meth:`release` hands the partition back once."""

    def __init__(self, processor: Processor, task: asyncio.Task[ProcessorStats]) -> None:
        self.processor = processor
        self.task = task
        self._release: asyncio.Task[None] | None = None

    @property
    def releasing(self) -> bool:
        """Whether :meth:`release` was called."""
        return self._release is not None

    def release(self, how: Callable[[], Coroutine[Any, Any, None]]) -> asyncio.Task[None] | None:
        """Start ``how()`` (finish, ack, unpin) the first time; None after that."""
        if self._release is not None:
            return None
        self._release = asyncio.create_task(how())
        return self._release


class GroupMember:
    """Apply the partitions of a partitioned stream assigned to this member, exactly once.

    Args:
        conn: a :class:`Connection` (not closed here) or :class:`ConnectOptions`.
        stream: a partitioned stream (``StreamSpec(partitions=N)``).
        group: the group's name; partition ``p`` is applied through consumer
            ``<group>-p<p>`` (created when missing).
        handler, batch_handler: as :class:`Processor`'s (one of them).
        ledger: the ledger of each partition: a URL (:func:`partition_ledgers`:
            ``sqlite:///billing-{partition}.db``, or one PostgreSQL ledger for all),
            or ``ledger(partition) -> Ledger``, called each time this member starts
            running the partition.
        options: :class:`GroupOptions` (member name, static or elastic, timings).
        processor_options: each partition's :class:`ProcessorOptions` (batch,
            ``pinned_ttl``, dead letters, ...); the filter and priority group are set
            per partition.

    Raises:
        ConfigError: a bad name, handler, URL or option.

    Example::

        member = GroupMember(conn, "ORDERS", "billing", handle,
                             ledger="postgresql://app@db/billing",
                             options=GroupOptions(member="host-a"))
        await member.run()
    """

    def __init__(
        self,
        conn: Connection | ConnectOptions,
        stream: str,
        group: str,
        handler: Handler | None = None,
        *,
        ledger: str | PartitionLedgers,
        options: GroupOptions | None = None,
        processor_options: ProcessorOptions | None = None,
        batch_handler: BatchHandler | None = None,
    ) -> None:
        if (handler is None) == (batch_handler is None):
            raise ConfigError(
                "give the GroupMember either handler or batch_handler, not "
                + ("both" if handler is not None else "neither")
            )
        check_handler(handler or batch_handler, "handler" if handler else "batch_handler")
        self.stream = check_stream_name(stream)
        self.group = check_consumer_name(group, "group")
        longest = partition_consumer(group, MAX_PARTITIONS - 1)
        if len(longest.encode()) > MAX_NAME_LEN:
            raise ConfigError(
                f"group: {group!r} is too long: its partitions' consumers <group>-p<N> "
                f"({longest!r}) must fit nats-server's {MAX_NAME_LEN} bytes; give a group "
                f"name of at most {MAX_NAME_LEN - len(longest.encode()) + len(group.encode())} "
                "bytes"
            )
        self.options = options or GroupOptions()
        self.processor_options = processor_options or ProcessorOptions()
        check_partition_options(self.processor_options)
        self._ledger = partition_ledgers(ledger) if isinstance(ledger, str) else ledger
        if not callable(self._ledger):
            raise ConfigError(f"ledger must be a URL or ledger(partition), got {ledger!r}")
        self._handler, self._batch_handler = handler, batch_handler
        self._conn_arg = conn
        self.conn: Connection | None = conn if isinstance(conn, Connection) else None
        self.member = self.options.name
        self.stats = GroupStats(member=self.member)
        #: The stream's partitioning (known once :meth:`run` has read the stream).
        self.partitioning: Partitioning | None = None
        self._running: dict[int, _Running] = {}
        self._releases: set[asyncio.Task[None]] = set()
        self._wanted: list[int] | None = None
        self._stop = asyncio.Event()
        self._started = asyncio.Event()
        self._fatal: BaseException | None = None
        self._gate_open = self.options.after is None
        self._notes = LogThrottle(log)
        self._restart_at: dict[int, float] = {}
        #: Called with ``(processor, True)`` when a partition's Processor starts here and
        #: ``(processor, False)`` when it has stopped (what :mod:`oncestream.metrics` follows).
        self.processor_listeners: list[Callable[[Processor, bool], None]] = []

    # -- lifecycle ----------------------------------------------------------

    async def run(self) -> GroupStats:
        """Run the assigned partitions until :meth:`request_stop`; then release them.

        Raises:
            ConfigError: the stream is not partitioned, the server is older than 2.14,
                a partition's consumer or ledger is refused (as :meth:`Processor.run`).
            StreamNotFound: the stream does not exist.
            LedgerUnusable: a partition's ledger cannot be used.
            MaxDeliverError: a partition's Processor failed with it (a consumer's
                ``max_deliver`` without a dead-letter stream), or was released with a
                message the server stopped delivering left to a ``consumer reset``; the
                message names what to do.
        """
        owned = self.conn is None
        if self.conn is None:
            assert isinstance(self._conn_arg, ConnectOptions)
            self.conn = await connect(self._conn_arg)
        conn = self.conn
        membership: Membership | None = None
        try:
            info = await conn.stream_info(self.stream)
            config = info.get("config") or {}
            partitioning = Partitioning.from_config(config)
            if partitioning is None:
                raise ConfigError(
                    f"stream {self.stream} is not partitioned (no partition subject transform); "
                    "create it with partitions: StreamSpec(partitions=N) or `oncestream stream "
                    "add --partitions N`, or partition it in place with `oncestream stream edit "
                    f"{self.stream} --partitions N`"
                )
            self.partitioning = partitioning
            require_reset(conn, "a group member (a partition that moves is reset)")
            if self.options.static is None:
                membership = Membership(
                    conn,
                    self.stream,
                    self.group,
                    self.member,
                    member_ttl=self.options.member_ttl,
                    replicas=int(config.get("num_replicas") or 1),
                    bucket=self.options.bucket,
                )
                await membership.ensure_bucket()
            self._started.set()
            await self._loop(membership)
            if self._fatal is not None:
                raise self._fatal
        finally:
            if membership is not None:  # the others stop waiting for its key to expire
                with contextlib.suppress(Exception):
                    await membership.leave()
            await self._release_all()
            if owned:
                await conn.close()
            self._started.set()
        if self._fatal is not None:
            raise self._fatal  # found as the partitions were released
        return self.stats

    def request_stop(self) -> None:
        """Ask :meth:`run` to release its partitions and return (signal-handler safe)."""
        self._stop.set()

    async def stop(self) -> None:
        """Release every partition (each finishes its batch and acks) and leave the group."""
        self.request_stop()
        await self._release_all()

    async def wait_running(self, timeout: float = 10.0) -> None:
        """Wait until the member has read the stream and joined."""
        async with asyncio.timeout(timeout):
            await self._started.wait()

    async def wait_for(self, predicate: Callable[[GroupMember], bool], timeout: float) -> None:
        """Wait until ``predicate(member)`` holds, checked every 50 ms.

        Raises:
            OperationTimeout: ``timeout`` seconds passed first.
        """
        deadline = time.monotonic() + timeout
        while not predicate(self):
            if time.monotonic() > deadline:
                raise OperationTimeout(f"condition not met in {timeout}s; {self.stats.status()}")
            await asyncio.sleep(0.05)  # counters of several Processors: no one event

    @property
    def partitions(self) -> list[int]:
        """The partitions this member runs now (applying or waiting for their pin)."""
        return sorted(self._running)

    @property
    def active(self) -> list[int]:
        """The partitions this member applies now (it holds their pin and fence)."""
        return sorted(p for p, r in self._running.items() if r.processor.active_pin)

    def processor(self, partition: int) -> Processor | None:
        """The Processor of ``partition`` on this member (None: not running it)."""
        running = self._running.get(partition)
        return running.processor if running else None

    # -- the rounds ---------------------------------------------------------------

    async def _loop(self, membership: Membership | None) -> None:
        assert self.partitioning is not None
        count = self.partitioning.partitions
        rounds = 0
        while not self._stop.is_set() and self._fatal is None:
            rounds += 1
            wanted = self._wanted
            if membership is None:
                assert self.options.static is not None
                wanted = static_partitions(count, *self.options.static)
                if not wanted and rounds == 1:
                    # Not an error (a deployment may run more static members than the
                    # stream has partitions for now), but it must not look like work.
                    index, of = self.options.static
                    log.warning(
                        "%s: static member %d/%d gets none of the stream's %d partitions: "
                        "it applies nothing",
                        self, index, of, count,
                    )  # fmt: skip
            else:
                try:
                    self._publish_status()
                    await membership.beat(self.stats.status())
                    live = set(await membership.members()) | {self.member}
                    # Members started together see each other from their second round:
                    # the first only announces this one (else each would start every
                    # partition, then hand most back).
                    wanted = assign(count, live)[self.member] if rounds > 1 else None
                except OncestreamError as exc:
                    # The partitions stay as they are: their pins and fences still hold.
                    self._notes.log(logging.WARNING, "membership", "%s: membership: %s", self, exc)
            if wanted is not None:
                if self._wanted is not None and wanted != self._wanted:
                    self.stats.rebalances += 1
                    log.info("%s: partitions %s -> %s", self, self._wanted, wanted)
                self._wanted = wanted
                if await self._gate():
                    await self._reconcile(wanted)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.options.heartbeat):
                    await self._stop.wait()

    async def _gate(self) -> bool:
        """``after``: True once that consumer has finished the messages stored before."""
        if self._gate_open:
            return True
        assert self.conn is not None and self.partitioning is not None
        after = self.options.after
        assert after is not None
        try:
            info = await self.conn.consumer_info(self.stream, after)
        except ConsumerNotFound:
            raise ConfigError(
                f"after: consumer {self.stream}/{after} does not exist (the consumer that "
                "processed the stream before it was partitioned)"
            ) from None
        mapped = f"*.{self.partitioning.subjects}"
        filters = consumer_filters(info.get("config") or {}) or (">",)
        if any(subjects_overlap(f, mapped) for f in filters):
            raise ConfigError(
                f"after: consumer {self.stream}/{after} (filters {' '.join(filters)}) also "
                f"takes the partitioned subjects {mapped}; give it the filter "
                f"{self.partitioning.subjects} (`oncestream consumer edit`), so it finishes "
                "the messages stored before the stream was partitioned and nothing else"
            )
        left = int(info.get("num_pending") or 0) + int(info.get("num_ack_pending") or 0)
        if left:
            self._notes.log(
                logging.INFO,
                "after",
                "%s: waiting for consumer %s to finish the %d messages stored before the "
                "stream was partitioned",
                self,
                after,
                left,
            )
            return False
        log.info("%s: consumer %s has finished; applying partitions", self, after)
        self._gate_open = True
        return True

    async def _reconcile(self, wanted: list[int]) -> None:
        now = time.monotonic()
        for partition, running in list(self._running.items()):
            if running.task.done():
                self._finished(partition, running)
        for partition in wanted:
            if partition in self._running or self._restart_at.get(partition, 0.0) > now:
                continue
            self._start(partition)
        for partition in sorted(set(self._running) - set(wanted)):
            self._hand_back(partition, self._running[partition])
        self._publish_status()

    def _hand_back(self, partition: int, running: _Running) -> None:
        task = running.release(functools.partial(self._release, partition, running))
        if task is not None:
            self._releases.add(task)
            task.add_done_callback(self._releases.discard)

    def _start(self, partition: int) -> None:
        assert self.conn is not None and self.partitioning is not None
        options = dataclasses.replace(
            self.processor_options,
            filter_subject=self.partitioning.filter_for(partition),
            priority_group=PRIORITY_GROUP,
            policy="pinned",
        )
        processor = Processor(
            self.conn,
            self.stream,
            partition_consumer(self.group, partition),
            self._handler,
            ledger=self._ledger(partition),
            options=options,
            batch_handler=self._batch_handler,
        )
        task = asyncio.create_task(processor.run(), name=f"{self}-p{partition}")
        self._running[partition] = _Running(processor, task)
        self.stats.processors[partition] = processor.stats
        for listener in self.processor_listeners:
            listener(processor, True)
        self.stats.moved_in += 1
        log.info("%s: running partition %d", self, partition)

    def _finished(self, partition: int, running: _Running) -> None:
        """A partition's Processor ended by itself: fatal errors end the member."""
        del self._running[partition]
        self._retire(partition, running.processor)
        if running.task.cancelled():
            return
        exc = running.task.exception()
        if exc is None:
            return
        # A MaxDeliverError names what to change before a restart, and often a message to
        # get back by a reset: a restart would be refused, or skip that message.
        if isinstance(exc, ConfigError | LedgerUnusable | StreamNotFound | MaxDeliverError):
            self._fatal = exc
            self._stop.set()
            return
        self.stats.restarts += 1
        self._restart_at[partition] = time.monotonic() + _RESTART_DELAY
        log.warning("%s: partition %d stopped (%s); starting it again", self, partition, exc)

    async def _release(self, partition: int, running: _Running) -> None:
        """Stop running ``partition``: finish the batch, ack, and unpin it if still ours."""
        pin = running.processor.active_pin
        try:
            await running.processor.stop()
            try:
                await running.task
            except MaxDeliverError as exc:  # a drop left to a reset: the member fails too
                log.error("%s: partition %d: %s", self, partition, exc)
                self._fatal = self._fatal or exc
                self._stop.set()
            except Exception:  # it ended as it was released: nothing is owed
                pass
            if pin is not None:
                await self._unpin(partition, pin)
        finally:
            if self._running.get(partition) is running:
                del self._running[partition]
                self._retire(partition, running.processor)
                self.stats.moved_out += 1
                log.info("%s: released partition %d", self, partition)

    async def _unpin(self, partition: int, pin: str) -> None:
        """Hand the pin over now instead of after ``pinned_ttl``, when it is still ``pin``."""
        assert self.conn is not None
        consumer = partition_consumer(self.group, partition)
        try:
            info = await self.conn.consumer_info(self.stream, consumer)
            groups = info.get("priority_groups") or []
            if any(
                g.get("group") == PRIORITY_GROUP and g.get("pinned_client_id") == pin
                for g in groups
            ):
                await self.conn.api(
                    f"CONSUMER.UNPIN.{self.stream}.{consumer}", {"group": PRIORITY_GROUP}
                )
        except OncestreamError as exc:  # the pin then expires after pinned_ttl
            log.debug("%s: unpin of partition %d skipped: %s", self, partition, exc)

    async def _release_all(self) -> None:
        for partition, running in list(self._running.items()):
            self._hand_back(partition, running)
        while self._releases:
            await asyncio.gather(*list(self._releases), return_exceptions=True)

    def _retire(self, partition: int, processor: Processor) -> None:
        for listener in self.processor_listeners:
            listener(processor, False)
        self.stats.retire(partition, processor.stats)

    def _publish_status(self) -> None:
        self.stats.partitions = self.partitions
        self.stats.active = {
            p: r.processor.active_pin
            for p, r in sorted(self._running.items())
            if r.processor.active_pin
        }

    def __str__(self) -> str:
        return f"{self.stream}/{self.group}/{self.member}"
