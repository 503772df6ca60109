"""``doctor`` on a partitioned stream: its layout, its groups' consumers and members.

What a group relies on (docs/production.md, "Scaling out"): every partition's
consumer pinned (one member applies it at a time), with explicit acks and the
same ``pinned_ttl`` across partitions; live members while messages wait; the
membership bucket able to expire a dead member's key; and messages stored before
the stream was partitioned finished by the consumer that processed them.
"""

from __future__ import annotations

from typing import Any

from .._connection import Connection
from .._errors import OncestreamError, StreamNotFound
from ..process._internal import find_groups, group_report
from ..streams import Partitioning
from ._findings import Finding

__all__ = ["check_partitions"]

_BUCKET_STREAM = "KV_oncestream_groups"


async def check_partitions(
    conn: Connection, info: dict[str, Any], consumers: list[dict[str, Any]]
) -> list[Finding]:
    """The findings of a partitioned stream (none for one that is not partitioned)."""
    config = info.get("config") or {}
    stream = str(config.get("name"))
    target = f"stream {stream}"
    partitioning = Partitioning.from_config(config)
    if partitioning is None:
        transform = config.get("subject_transform") or {}
        if "partition(" in str(transform.get("dest") or "").lower():
            return [
                Finding(
                    severity="note",
                    target=target,
                    check="partitions",
                    message=f"a partitioning subject transform oncestream does not recognise "
                    f"({transform.get('src')} -> {transform.get('dest')}): `oncestream process "
                    "--member` needs <partition>.<subject>, the {{partition(N,...)}} token first",
                    fix=f"oncestream stream add NEW --subjects {transform.get('src')} "
                    "--partitions N",
                )
            ]
        return []
    found = [
        Finding(
            severity="ok",
            target=target,
            check="partitions",
            message=f"{partitioning.describe()}: each key's messages in one partition",
        )
    ]
    found += await _unmapped(conn, stream, partitioning, target)
    found += await _bucket(conn, target)
    groups = find_groups(partitioning, consumers)
    if not groups:
        found.append(
            Finding(
                severity="note",
                target=target,
                check="group",
                message="no group has run on it yet (no consumers <group>-p<i>)",
                fix=f"oncestream process --stream {stream} --consumer GROUP --member NAME "
                "--ledger 'sqlite:///GROUP-{partition}.db' --handler ...",
            )
        )
        return found
    report = await group_report(conn, stream, partitioning, consumers)
    for group in report["groups"]:
        found += _group(stream, partitioning, group, groups[group["group"]])
    return found


async def _unmapped(
    conn: Connection, stream: str, partitioning: Partitioning, target: str
) -> list[Finding]:
    try:
        info = await conn.api(f"STREAM.INFO.{stream}", {"subjects_filter": partitioning.subjects})
    except OncestreamError:
        return []
    subjects = (info.get("state") or {}).get("subjects") or {}
    held = sum(int(n) for n in subjects.values())
    if not held:
        return []
    return [
        Finding(
            severity="note",
            target=target,
            check="unmapped",
            message=f"{held} messages were stored before the stream was partitioned (on "
            f"{partitioning.subjects}, in no partition): a group does not apply them; the "
            "consumer that processed the stream before must finish them, and the group's "
            "members start after it with --after",
            fix=f"oncestream process --stream {stream} --consumer GROUP --member NAME "
            "--after OLD_CONSUMER ...",
        )
    ]


async def _bucket(conn: Connection, target: str) -> list[Finding]:
    try:
        info = await conn.stream_info(_BUCKET_STREAM)
    except StreamNotFound:
        return []
    if (info.get("config") or {}).get("allow_msg_ttl"):
        return []
    return [
        Finding(
            severity="breaks",
            target=target,
            check="membership",
            message=f"the membership bucket ({_BUCKET_STREAM}) cannot expire keys "
            "(allow_msg_ttl off): a dead member would keep its partitions for ever; members "
            "refuse to start",
            fix=f"oncestream stream rm {_BUCKET_STREAM} (it holds only live members' keys)",
        )
    ]


def _group(
    stream: str,
    partitioning: Partitioning,
    group: dict[str, Any],
    consumers: dict[int, dict[str, Any]],
) -> list[Finding]:
    name = group["group"]
    target = f"group {stream}/{name}"
    found: list[Finding] = []
    ttls = set()
    for partition, info in sorted(consumers.items()):
        config = info.get("config") or {}
        if config.get("priority_policy") != "pinned_client":
            found.append(
                Finding(
                    severity="breaks",
                    target=f"consumer {stream}/{info.get('name')}",
                    check="pinned",
                    message=f"partition {partition}'s consumer is not pinned (priority policy "
                    f"{config.get('priority_policy') or 'none'}): two members could apply the "
                    "partition at once, and its keys' order would not hold",
                    fix=f"oncestream consumer rm {stream} {info.get('name')} (a member creates "
                    "it again, pinned; the ledger keeps what was applied)",
                )
            )
        ttls.add(int(config.get("priority_timeout") or 0))
    if len(ttls) > 1:
        found.append(
            Finding(
                severity="warning",
                target=target,
                check="pinned-ttl",
                message=f"its partitions' consumers take over after different times "
                f"({', '.join(f'{t / 1e9:g}s' for t in sorted(ttls))}): members started with "
                "another --takeover-after are refused on some partitions",
                fix=f"oncestream consumer edit {stream} {name}-pN --takeover-after 10s, for "
                "each partition",
            )
        )
    missing = [r["partition"] for r in group["partitions"] if r["consumer"] is None]
    waiting = [
        r["partition"]
        for r in group["partitions"]
        if r["consumer"] is not None and r["owner"] is None and (r["pending"] or r["ack_pending"])
    ]
    members = [m["member"] for m in group["members"]]
    if not members and (waiting or missing):
        found.append(
            Finding(
                severity="warning",
                target=target,
                check="members",
                message="no member is alive and messages wait",
                fix=f"oncestream process --stream {stream} --consumer {name} --member NAME ...",
            )
        )
    elif waiting:
        found.append(
            Finding(
                severity="note",
                target=target,
                check="owners",
                message=f"partitions {', '.join(map(str, waiting))} have messages waiting and "
                "no member applying them now (a move in progress: a member's pin expires "
                "after --takeover-after, its key after --member-ttl)",
            )
        )
    else:
        found.append(
            Finding(
                severity="ok",
                target=target,
                check="members",
                message=f"{len(members)} live members over {partitioning.partitions} partitions"
                + (f"; partitions {', '.join(map(str, missing))} never ran" if missing else ""),
            )
        )
    return found
