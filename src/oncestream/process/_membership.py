"""Who is in a group: each live member keeps a key in a KV bucket that expires without it.

Every member of a group writes its key ``<stream>.<group>.<member>`` in the bucket
``oncestream_groups`` (a JetStream KV bucket: stream ``KV_oncestream_groups``,
readable with ``nats kv``) every ``heartbeat`` seconds, with a per-message TTL
(``Nats-TTL``, nats-server 2.11+) of ``member_ttl``. A member that dies, freezes or
loses the server stops writing and its key expires; one that stops cleanly
deletes it. The live members are the keys the bucket holds (one ``STREAM.INFO``
with a subjects filter per round: no watcher to keep alive).

This is the membership of Synadia's elastic partitioned consumer groups
(orbit.go ``pcgroups``, a KV bucket) with one difference: there the bucket holds
a membership an operator edits, and a member that dies keeps its partitions
until an instance with the same name comes back; here membership is liveness,
so the partitions of a dead member move to the live ones.

The value of a key says what the member runs (for ``oncestream status``): its
partitions, the ones it applies (with the pin it applies under), counts.
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any

from .._connection import Connection
from .._errors import ConfigError, ErrCode, JetStreamError, StreamNotFound, jetstream_error
from .._headers import MSG_TTL
from ..streams import add_stream, last_message

__all__ = ["BUCKET", "Membership", "bucket_stream", "group_members", "member_prefix"]

log = logging.getLogger(__name__)

#: The KV bucket that holds the members of every group.
BUCKET = "oncestream_groups"


def bucket_stream(bucket: str = BUCKET) -> str:
    """The stream behind a KV bucket."""
    return f"KV_{bucket}"


def member_prefix(stream: str, group: str, bucket: str = BUCKET) -> str:
    """The subject prefix of a group's member keys (``$KV.<bucket>.<stream>.<group>``)."""
    return f"$KV.{bucket}.{stream}.{group}"


class Membership:
    """One member's key in the bucket, and the group's live members.

    Args:
        conn: an open connection.
        stream, group, member: the group's stream, its name and this member's name.
        member_ttl: seconds after its last write that a member's key expires (whole
            seconds: the server's TTLs are).
        replicas: replicas of the bucket when it is created here.
    """

    def __init__(
        self,
        conn: Connection,
        stream: str,
        group: str,
        member: str,
        *,
        member_ttl: float,
        replicas: int = 1,
        bucket: str = BUCKET,
    ) -> None:
        self.conn = conn
        self.stream, self.group, self.member = stream, group, member
        self.bucket = bucket
        self.prefix = member_prefix(stream, group, bucket)
        self.key = f"{self.prefix}.{member}"
        self.ttl = f"{max(1, math.ceil(member_ttl))}s"
        self.replicas = replicas

    async def ensure_bucket(self) -> None:
        """Create the bucket when it does not exist; refuse one that cannot expire keys.

        Raises:
            ConfigError: the bucket exists without per-message TTLs (``allow_msg_ttl``).
        """
        name = bucket_stream(self.bucket)
        try:
            info = await self.conn.stream_info(name)
        except StreamNotFound:
            config = {
                "name": name,
                "subjects": [f"$KV.{self.bucket}.>"],
                "storage": "file",
                "retention": "limits",
                "discard": "new",
                "max_msgs_per_subject": 1,
                "num_replicas": self.replicas,
                "allow_rollup_hdrs": True,
                "deny_delete": True,
                "allow_direct": True,
                "allow_msg_ttl": True,
            }
            try:
                await add_stream(self.conn, config)
            except JetStreamError as exc:
                if exc.err_code != ErrCode.STREAM_NAME_EXIST:
                    raise
            return
        if not (info.get("config") or {}).get("allow_msg_ttl"):
            raise ConfigError(
                f"the group membership bucket {self.bucket} (stream {name}) exists without "
                "per-message TTLs (allow_msg_ttl), so a dead member's key would never expire; "
                f"delete it with `oncestream stream rm {name}` (it holds only the live "
                "members' keys, which they write again) and start the members again"
            )

    async def beat(self, status: dict[str, Any]) -> None:
        """Write this member's key (alive for ``member_ttl`` more), its value ``status``.

        Raises:
            JetStreamError: the server refused the write.
            OperationTimeout: no answer.
        """
        reply = await self.conn.request(
            self.key, json.dumps(status).encode(), headers={MSG_TTL: self.ttl}
        )
        answer = json.loads(reply.data or b"{}")
        if "error" in answer:
            raise jetstream_error(answer["error"])

    async def members(self) -> list[str]:
        """The names of the live members of the group (keys not expired), sorted."""
        info = await self.conn.api(
            f"STREAM.INFO.{bucket_stream(self.bucket)}", {"subjects_filter": f"{self.prefix}.>"}
        )
        subjects = (info.get("state") or {}).get("subjects") or {}
        cut = len(self.prefix) + 1
        return sorted(s[cut:] for s in subjects)

    async def leave(self) -> None:
        """Delete this member's key (a clean stop: the others need not wait for its expiry)."""
        await self.conn.api(f"STREAM.PURGE.{bucket_stream(self.bucket)}", {"filter": self.key})


async def group_members(
    conn: Connection, stream: str, group: str, bucket: str = BUCKET
) -> dict[str, dict[str, Any]]:
    """Every live member of a group and the status it last wrote (``oncestream status``).

    Raises:
        StreamNotFound: no group ever ran (the bucket does not exist).
    """
    prefix = member_prefix(stream, group, bucket)
    info = await conn.api(
        f"STREAM.INFO.{bucket_stream(bucket)}", {"subjects_filter": f"{prefix}.>"}
    )
    found: dict[str, dict[str, Any]] = {}
    for subject in sorted((info.get("state") or {}).get("subjects") or {}):
        message = await last_message(conn, bucket_stream(bucket), subject)
        if message is None:
            continue  # expired between the two reads
        try:
            found[subject[len(prefix) + 1 :]] = json.loads(message.data or b"{}")
        except ValueError:
            found[subject[len(prefix) + 1 :]] = {}
    return found
