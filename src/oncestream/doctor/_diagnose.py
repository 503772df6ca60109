"""One ``doctor`` run: ask the server, then check it, each stream and each consumer named."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

import orjson

from .._connection import Connection
from .._errors import OncestreamError
from ..streams import consumer_info, list_consumers, stream_info
from ..streams._internal import format_version, server_cluster, server_version
from ._checks import check_consumer, check_server, check_stream, check_sync_unknown
from ._findings import DoctorReport, Finding
from ._options import DoctorOptions, Target
from ._partitions import check_partitions

__all__ = ["diagnose", "read_sync_policy"]

_MONITOR_TIMEOUT = 5.0


def read_sync_policy(monitor: str) -> dict[str, Any]:
    """``{"sync_always": bool, "sync_interval": seconds}`` from the server's ``/varz``.

    Raises:
        OncestreamError: the endpoint does not answer, or answers without a
            JetStream configuration (exit 1 in the CLI).
    """
    url = f"{monitor}/varz"
    try:
        with urllib.request.urlopen(url, timeout=_MONITOR_TIMEOUT) as response:
            varz = orjson.loads(response.read())
    except (urllib.error.URLError, OSError, orjson.JSONDecodeError) as exc:
        reason = getattr(exc, "reason", exc)
        raise OncestreamError(f"cannot read {url}: {reason}") from exc
    config = (varz.get("jetstream") or {}).get("config")
    if not isinstance(config, dict):
        raise OncestreamError(f"{url} shows no JetStream configuration: is JetStream enabled?")
    return {
        "sync_always": bool(config.get("sync_always")),
        # nanoseconds; nats-server fills in its default (2m) when the config sets none
        "sync_interval": int(config.get("sync_interval") or 120e9) / 1e9,
    }


async def diagnose(
    conn: Connection, targets: Sequence[Target], options: DoctorOptions | None = None
) -> DoctorReport:
    """Check the connected server, the streams in ``targets`` and their consumers.

    A :class:`Target` without a consumer checks every consumer of its stream.

    Raises:
        StreamNotFound, ConsumerNotFound: a target that does not exist (named).
        OncestreamError: the monitoring URL does not answer.
    """
    opts = options or DoctorOptions()
    version = server_version(conn)
    cluster = server_cluster(conn)
    sync = None
    if opts.monitor is not None:
        sync = await asyncio.to_thread(read_sync_policy, opts.monitor)
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
    server = {
        "version": format_version(version) if version else None,
        "cluster": cluster,
        **(sync or {}),
    }
    return DoctorReport(server=server, findings=tuple(findings))


def _name(info: dict[str, Any]) -> str:
    return str((info.get("config") or {}).get("name"))


def _file(info: dict[str, Any]) -> bool:
    return (info.get("config") or {}).get("storage") != "memory"


def _replicas(info: dict[str, Any]) -> int:
    return int((info.get("config") or {}).get("num_replicas") or 1)
