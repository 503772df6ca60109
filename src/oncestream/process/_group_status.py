"""What ``oncestream status`` and ``doctor`` say about the groups of a partitioned stream.

A group is found from the stream's consumers: ``<group>-p<i>`` filtered to
partition ``i``. Each partition's owner is the live member whose key in the
membership bucket lists the consumer's current pin as one it applies under.
"""

from __future__ import annotations

import re
from typing import Any

from .._connection import Connection
from .._errors import StreamNotFound
from ..streams import Partitioning
from ._group_options import PRIORITY_GROUP
from ._membership import BUCKET, group_members
from ._setup import consumer_filters

__all__ = ["PartitionRow", "find_groups", "group_report"]

_CONSUMER = re.compile(r"^(?P<group>.+)-p(?P<partition>\d+)$")

PartitionRow = dict[str, Any]


def find_groups(
    partitioning: Partitioning, consumers: list[dict[str, Any]]
) -> dict[str, dict[int, dict[str, Any]]]:
    """The groups among ``consumers`` (``CONSUMER.INFO`` replies): ``{group: {partition: info}}``.

    A consumer belongs to a group when it is named ``<group>-p<i>`` and filters
    exactly partition ``i``.
    """
    groups: dict[str, dict[int, dict[str, Any]]] = {}
    for info in consumers:
        config = info.get("config") or {}
        match = _CONSUMER.match(str(info.get("name") or config.get("durable_name") or ""))
        if match is None:
            continue
        partition = int(match["partition"])
        if partition >= partitioning.partitions:
            continue
        if consumer_filters(config) != (partitioning.filter_for(partition),):
            continue
        groups.setdefault(match["group"], {})[partition] = info
    return groups


def _pin(info: dict[str, Any]) -> str | None:
    for group in info.get("priority_groups") or []:
        if group.get("group") == PRIORITY_GROUP and group.get("pinned_client_id"):
            return str(group["pinned_client_id"])
    return None


async def group_report(
    conn: Connection,
    stream: str,
    partitioning: Partitioning,
    consumers: list[dict[str, Any]],
    bucket: str = BUCKET,
) -> dict[str, Any]:
    """Per group: its live members and, per partition, its owner and lag.

    Returns:
        ``{"partitioning": "...", "groups": [{"group", "members": [...], "partitions":
        [row, ...]}]}``; a row has ``partition``, ``consumer``, ``owner`` (the member
        applying it, or None), ``pending``, ``ack_pending``, ``ack_floor``.
    """
    groups = []
    for group, partitions in sorted(find_groups(partitioning, consumers).items()):
        try:
            members = await group_members(conn, stream, group, bucket)
        except StreamNotFound:  # no elastic member ever ran (static members only)
            members = {}
        by_pin = {
            pin: name
            for name, status in members.items()
            for pin in (status.get("active") or {}).values()
        }
        rows: list[PartitionRow] = []
        for partition in range(partitioning.partitions):
            info = partitions.get(partition)
            if info is None:
                rows.append(
                    {"partition": partition, "consumer": None, "owner": None, "pending": None,
                     "ack_pending": None, "ack_floor": None}
                )  # fmt: skip
                continue
            pin = _pin(info)
            rows.append(
                {
                    "partition": partition,
                    "consumer": info.get("name"),
                    "owner": by_pin.get(pin) if pin else None,
                    "pending": int(info.get("num_pending") or 0),
                    "ack_pending": int(info.get("num_ack_pending") or 0),
                    "ack_floor": int((info.get("ack_floor") or {}).get("stream_seq") or 0),
                }
            )
        groups.append(
            {
                "group": group,
                "members": [
                    {
                        "member": name,
                        "partitions": status.get("partitions") or [],
                        "active": sorted(int(p) for p in (status.get("active") or {})),
                        "rebalances": int(status.get("rebalances") or 0),
                        "applied": int(status.get("applied") or 0),
                    }
                    for name, status in sorted(members.items())
                ],
                "partitions": rows,
            }
        )
    return {"partitioning": partitioning.describe(), "groups": groups}
