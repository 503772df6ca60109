"""One ``doctor`` run: ask the server, then check it, each stream and each consumer named."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from .._connection import Connection
from .._errors import ConfigError
from ..streams import consumer_info, list_consumers, stream_info
from ..streams._internal import (
    connected_server_name,
    format_version,
    server_cluster,
    server_version,
)
from ._checks import check_consumer, check_server, check_stream, check_sync_unknown, stream_servers
from ._findings import DoctorReport, Finding
from ._monitor import ServerSync, read_sync_policy
from ._options import DoctorOptions, Target
from ._partitions import check_partitions

__all__ = ["diagnose"]


async def diagnose(
    conn: Connection, targets: Sequence[Target], options: DoctorOptions | None = None
) -> DoctorReport:
    """Check the connected server, the streams in ``targets`` and their consumers.

    A :class:`Target` without a consumer checks every consumer of its stream.

    Each monitoring URL (``options.monitor``) tells the fsync policy of its own
    server only: a stream's policy is judged on the servers its info names (leader
    and replicas), and one whose servers were not all read gets a note, not an ok.

    Raises:
        StreamNotFound, ConsumerNotFound: a target that does not exist (named).
        ConfigError: a monitoring URL that is not a NATS monitoring endpoint, or is
            that of a server outside the cluster (or the single server) connected to.
        OncestreamError: a monitoring URL does not answer.
    """
    opts = options or DoctorOptions()
    version = server_version(conn)
    cluster = server_cluster(conn)
    read = await asyncio.gather(*(asyncio.to_thread(read_sync_policy, m) for m in opts.monitors))
    checked: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    for target in targets:
        info = await stream_info(conn, target.stream)
        if target.consumer is None:
            consumers = await list_consumers(conn, target.stream)
        else:
            consumers = [await consumer_info(conn, target.stream, target.consumer)]
        checked.append((info, consumers))
    replicas = max(
        (int((info.get("config") or {}).get("num_replicas") or 1) for info, _ in checked),
        default=None,
    )
    findings: list[Finding] = check_server(version, cluster=cluster, replicas=replicas)
    sync = _by_server(read, [info for info, _ in checked], conn) if read else None
    if sync is None:
        files = [info for info, _ in checked if _file(info)]
        findings += check_sync_unknown(
            [_name(i) for i in files if _replicas(i) == 1],
            [_name(i) for i in files if _replicas(i) > 1],
        )
    for info, consumers in checked:
        findings += check_stream(info, options=opts, version=version, cluster=cluster, sync=sync)
        findings += await check_partitions(conn, info, consumers)
        stream = _name(info)
        for consumer in consumers:
            findings += check_consumer(stream, consumer, options=opts)
    server: dict[str, Any] = {
        "version": format_version(version) if version else None,
        "cluster": cluster,
    }
    if sync is not None:
        policies = list(sync.values())
        server["sync_always"] = all(p.sync_always for p in policies)
        server["sync_interval"] = max(p.sync_interval for p in policies)
        server["monitored"] = [p.to_json() for p in policies]
    return DoctorReport(server=server, findings=tuple(findings))


def _by_server(
    read: Sequence[ServerSync], infos: Sequence[dict[str, Any]], conn: Connection
) -> dict[str, ServerSync]:
    """The policies read, by server name; a server unrelated to what is checked is refused.

    Related: a server holding a checked stream, the server connected to, or a server
    of the cluster connected to (or of a checked stream's cluster).

    Raises:
        ConfigError: naming the URL, the server it answered for and the expected ones.
    """
    connected = connected_server_name(conn)
    cluster = server_cluster(conn)
    holding = {server for info in infos for server in stream_servers(info)}
    clusters = {str((info.get("cluster") or {}).get("name") or "") for info in infos}
    clusters = (clusters | {cluster or ""}) - {""}
    found: dict[str, ServerSync] = {}
    for policy in read:
        related = (
            policy.server in holding
            or policy.server == connected
            or (policy.cluster is not None and policy.cluster in clusters)
        )
        if not related:
            theirs = f"cluster {policy.cluster!r}" if policy.cluster else "outside any cluster"
            ours = (
                f"a server of cluster {cluster!r}, which this connection reached (via server "
                f"{connected!r})"
                if cluster
                else f"the server this connection reached ({connected!r}, outside any cluster)"
            )
            raise ConfigError(
                f"--monitor {policy.url} is the monitoring endpoint of server "
                f"{policy.server!r} ({theirs}), not of {ours}: its fsync policy says nothing "
                "about the streams checked; give the monitoring URL of each server holding them"
            )
        found.setdefault(policy.server, policy)
    return found


def _name(info: dict[str, Any]) -> str:
    return str((info.get("config") or {}).get("name"))


def _file(info: dict[str, Any]) -> bool:
    return (info.get("config") or {}).get("storage") != "memory"


def _replicas(info: dict[str, Any]) -> int:
    return int((info.get("config") or {}).get("num_replicas") or 1)
