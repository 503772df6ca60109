"""`oncestream process --member` / `--static-member`: one member of a group over partitions."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from .._connection import Connection, connect
from .._dsn import parse_dsn
from .._errors import ConfigError, StreamNotFound
from .._options import ConnectOptions, parse_duration
from .._private import redact_url
from ..ledger import Ledger, ledger_from_url
from ..ledger._internal import check_ledger_target
from ..process import GroupMember, GroupOptions, GroupStats, Handler, ProcessorOptions
from ..streams import Partitioning
from ._process_extras import RecentRate, metrics_endpoint
from ._stopsignals import StopSignals

__all__ = ["group_options", "group_priority", "run_group"]

log = logging.getLogger(__name__)


def group_priority(
    standby: bool,
    takeover_after: str | None,
    overflow_min_pending: int | None,
    priority_group: str | None,
    bind: bool,
    filter_subject: str | None,
) -> dict[str, Any]:
    """The ProcessorOptions fields a member sets: ``pinned_ttl`` from --takeover-after.

    Every partition of a group is pinned already: --standby is implied (two instances
    with the same --member are each other's standby), and what a member sets per
    partition cannot be given.

    Raises:
        ConfigError: naming a flag that does not apply to a member.
    """
    clash = {
        "--standby": standby,
        "--overflow-min-pending": overflow_min_pending is not None,
        "--priority-group": priority_group is not None,
        "--bind": bind,
        "--filter-subject": filter_subject is not None,
    }
    given = [flag for flag, set_ in clash.items() if set_]
    if given:
        raise ConfigError(
            f"{', '.join(given)} do not apply with --member/--static-member: each partition's "
            "consumer is filtered to its partition and pinned (one instance applies it, the "
            "others wait; two instances with the same --member stand by for each other)"
        )
    if takeover_after is None:
        return {}
    ttl = parse_duration("--takeover-after", takeover_after)
    if ttl < 2:
        raise ConfigError(f"--takeover-after must be at least 2s, got {takeover_after!r}")
    return {"pinned_ttl": ttl}


def group_options(
    member: str | None, static_member: str | None, member_ttl: str | None, after: str | None
) -> GroupOptions:
    """GroupOptions from the flags (validated).

    Raises:
        ConfigError: both --member and --static-member, or a malformed I/N.
    """
    static: tuple[int, int] | None = None
    if static_member is not None:
        if member is not None:
            raise ConfigError("--member and --static-member exclude each other; pick one")
        index, slash, count = static_member.partition("/")
        if not slash or not index.isdigit() or not count.isdigit():
            raise ConfigError(f"--static-member must be I/N like 0/4, got {static_member!r}")
        static = (int(index), int(count))
        member = f"static-{index}-of-{count}"
    if member_ttl is None:
        return GroupOptions(member=member, static=static, after=after)
    ttl = parse_duration("--member-ttl", member_ttl)
    return GroupOptions(member=member, static=static, member_ttl=ttl, after=after)


async def run_group(
    stop: StopSignals,
    conn_options: ConnectOptions,
    stream: str,
    group: str,
    handler: Handler,
    ledger: str,
    key: str,
    proc_options: ProcessorOptions,
    options: GroupOptions,
    progress: float,
    metrics_port: int | None,
    metrics_host: str,
) -> GroupStats:
    """Run one member until SIGTERM / Ctrl-C (``stop``); return its stats."""

    def ledger_for(partition: int) -> Ledger:
        return ledger_from_url(ledger.replace("{partition}", str(partition)), key=key)  # type: ignore[arg-type]

    conn = await stop.unless_stopped(connect(conn_options), close=Connection.close)
    if conn is None:
        log.info("stop asked for while connecting: nothing was applied")
        return GroupStats()
    async with conn:
        member = GroupMember(
            conn, stream, group, handler, ledger=ledger_for, options=options,
            processor_options=proc_options,
        )  # fmt: skip
        if stop.requested:
            log.info("stop asked for before processing began: nothing was applied")
            return member.stats
        log.info(
            "member %s of group %s/%s into %s", member.member, stream, group, redact_url(ledger)
        )
        await _check_ledgers(conn, stream, ledger, key)
        stop.on_stop(member.request_stop)
        exporter = metrics_endpoint(member, metrics_port, metrics_host)
        reporter = asyncio.create_task(_report(member, progress))
        try:
            stats = await member.run()
        finally:
            reporter.cancel()
            # Waited for without suppressing CancelledError: that would swallow a
            # cancellation of this task too.
            await asyncio.wait({reporter})
            if exporter is not None:
                exporter.close()
    log.info("stopped: member %s %s", member.member, stats.totals())
    return stats


async def _check_ledgers(conn: Connection, stream: str, url: str, key: str) -> None:
    """Every partition's ledger before any partition starts, as a lone Processor's is.

    Else a partition whose SQLite path is a directory stops the member only after the
    others have made their files and consumers, and a database that refuses the
    connection (a wrong password, no such database) restarts each partition forever.
    An SQLite file is only checked (the partitions this member never runs get none);
    every other ledger is opened once and closed.

    Raises:
        ConfigError: an SQLite ledger cannot be created or is not a database.
        LedgerError: a database ledger cannot be opened.
    """
    try:
        info = await conn.stream_info(stream)
    except StreamNotFound:
        return  # GroupMember.run says so
    partitioning = Partitioning.from_config(info.get("config") or {})
    if partitioning is None:
        return  # GroupMember.run says so, with the command that partitions it
    urls = dict.fromkeys(url.replace("{partition}", str(p)) for p in range(partitioning.partitions))
    for one in urls:
        check_ledger_target(one)
    for one in urls:
        if parse_dsn(one, "--ledger").kind == "sqlite":
            continue
        store = ledger_from_url(one, key=key)  # type: ignore[arg-type]
        try:
            await asyncio.to_thread(store.open)
        finally:
            await asyncio.to_thread(store.close)


async def _report(member: GroupMember, interval: float) -> None:
    if interval <= 0:
        return
    rate = RecentRate()
    while True:
        await asyncio.sleep(interval)
        totals = member.stats.totals()
        log.info(
            "member %s: partitions %s (applying %s) applied=%d suppressed=%d rate=%.0f msg/s "
            "rebalances=%d",
            member.member,
            ",".join(map(str, member.partitions)) or "-",
            ",".join(map(str, member.active)) or "-",
            totals["applied"],
            totals["suppressed"],
            rate.update(totals["applied"]),
            member.stats.rebalances,
        )
