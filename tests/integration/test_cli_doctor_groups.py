"""`oncestream doctor` on a partitioned stream: each check of docs/production.md's
"Operating it" made to fail, with its severity, message and exit code.

The docs promise that doctor "checks the layout, that every partition's consumer is
pinned with one --takeover-after, that members are alive while messages wait, the
membership bucket, and messages stored before partitioning". Exit codes: 0 when nothing
breaks a guarantee (notes and warnings allowed), 1 when a finding does.
"""

from __future__ import annotations

from typing import Any

from harness import publish_n
from oncestream import Connection
from oncestream.server import NatsServer
from tests.integration._cli import cli, with_conn
from tests.integration.test_cli_doctor import _doctor


def _findings(report: dict[str, Any], check: str) -> list[dict[str, Any]]:
    return [f for f in report["findings"] if f["check"] == check]


def _consumer(url: str, partition: int, *, ttl_s: int | None) -> None:
    """Group svc's consumer of ``partition``, pinned after ``ttl_s`` (None: not pinned)."""
    config: dict[str, Any] = {
        "durable_name": f"svc-p{partition}",
        "filter_subject": f"{partition}.jobs.*",
        "ack_policy": "explicit",
    }
    if ttl_s is not None:
        config.update(
            priority_policy="pinned_client",
            priority_groups=["members"],
            priority_timeout=ttl_s * 1_000_000_000,
        )

    async def make(conn: Connection) -> None:
        await conn.api(
            f"CONSUMER.CREATE.JOBS.svc-p{partition}", {"stream_name": "JOBS", "config": config}
        )

    with_conn(url, make)


def test_doctor_names_each_broken_part_of_a_partitioned_setup(nats_server: NatsServer) -> None:
    url = nats_server.url
    assert cli(url, "stream", "add", "JOBS", "--subjects", "jobs.*").exit_code == 0
    with_conn(url, lambda conn: publish_n(conn, "jobs.k1", 3))  # before partitioning
    edited = cli(url, "stream", "edit", "JOBS", "--partitions", "4", "--partition-key", "1")
    assert edited.exit_code == 0, edited.output

    # The layout, the messages stored before partitioning, no group yet: notes, exit 0.
    code, report = _doctor(url, "JOBS")
    assert code == 0, report
    assert [f["severity"] for f in _findings(report, "partitions")] == ["ok"]
    [unmapped] = _findings(report, "unmapped")
    assert unmapped["severity"] == "note"
    assert "3 messages were stored before the stream was partitioned" in unmapped["message"]
    assert "--after OLD_CONSUMER" in unmapped["fix"]
    assert "no group has run on it yet" in _findings(report, "group")[0]["message"]

    # A partition's consumer not pinned: breaks (exit 1); two --takeover-after: a warning;
    # messages waiting and no member alive: a warning.
    _consumer(url, 0, ttl_s=2)
    _consumer(url, 1, ttl_s=5)
    _consumer(url, 2, ttl_s=None)
    for key in range(8):
        with_conn(url, lambda conn, key=key: publish_n(conn, f"jobs.k{key}", 1, start=3 + key))
    code, report = _doctor(url, "JOBS")
    assert code == 1, report
    [pinned] = _findings(report, "pinned")
    assert (pinned["severity"], pinned["target"]) == ("breaks", "consumer JOBS/svc-p2")
    assert "partition 2's consumer is not pinned (priority policy none)" in pinned["message"]
    assert pinned["fix"].startswith("oncestream consumer rm JOBS svc-p2")
    [ttl] = _findings(report, "pinned-ttl")
    # The unpinned consumer's timeout (0) is listed too: it is reported above as well.
    assert ttl["severity"] == "warning" and "2s, 5s)" in ttl["message"], ttl
    [members] = _findings(report, "members")
    assert members["severity"] == "warning", members
    assert members["message"] == "no member is alive and messages wait"

    # Warnings alone do not fail: exit 0 once the unpinned consumer is gone.
    assert cli(url, "consumer", "rm", "JOBS", "svc-p2", "--force").exit_code == 0
    code, report = _doctor(url, "JOBS")
    assert code == 0, report
    assert {f["check"] for f in report["findings"] if f["severity"] == "warning"} >= {
        "pinned-ttl",
        "members",
    }

    # A membership bucket that cannot expire a dead member's key: breaks.
    async def bucket(conn: Connection) -> None:
        await conn.api(
            "STREAM.CREATE.KV_oncestream_groups",
            {"name": "KV_oncestream_groups", "subjects": ["$KV.oncestream_groups.>"]},
        )

    with_conn(url, bucket)
    code, report = _doctor(url, "JOBS")
    assert code == 1, report
    [bucket_finding] = _findings(report, "membership")
    assert bucket_finding["severity"] == "breaks"
    assert "cannot expire keys (allow_msg_ttl off)" in bucket_finding["message"]
