"""What the exporters read: stream infos' upstreams, a Spark query's progress reports,
the sink's commit records (no server, no Spark)."""

from __future__ import annotations

import math

from oncestream.spark._metrics import _commit_record, source_batches, source_positions
from oncestream.streams._internal import upstream_rows


def test_upstream_rows_of_a_mirror_and_of_cross_domain_sources() -> None:
    mirror = {"mirror": {"name": "ORDERS", "lag": 7, "active": 1_500_000_000}}
    assert upstream_rows(mirror) == [
        {"kind": "mirror", "origin": "ORDERS", "lag": 7, "idle_seconds": 1.5}
    ]
    hub = {
        "sources": [
            {"name": "test", "lag": 0, "active": -1, "external": {"api": "$JS.leaf.API"}},
            {"name": "local", "lag": 3},
        ]
    }
    rows = upstream_rows(hub)
    assert [r["origin"] for r in rows] == ["test@$JS.leaf.API", "local"]
    assert all(math.isnan(r["idle_seconds"]) for r in rows)  # never active / not reported
    assert upstream_rows({"config": {"name": "PLAIN"}}) == []


def _report(batch: int, stamp: str, start: int, end: int, latest: int, rows: int) -> dict:  # type: ignore[type-arg]
    return {
        "runId": "r1",
        "batchId": batch,
        "timestamp": stamp,
        "sources": [
            {
                "startOffset": {"ORDERS": start, "stream.created": "x"},
                "endOffset": {"ORDERS": end, "stream.created": "x"},
                "latestOffset": {"ORDERS": latest},
                "numInputRows": rows,
            },
            {"endOffset": {"kafka-topic": {"0": 5}}, "numInputRows": 9},  # not jetstream
        ],
    }


def test_source_batches_skip_idle_reports_and_other_sources() -> None:
    reports = [
        _report(0, "t0", 0, 50, 200, 50),
        _report(1, "t1", 50, 100, 200, 50),
        _report(2, "t2", 100, 100, 200, 0),  # idle: nothing read, nothing advanced
    ]
    batches = source_batches(reports)
    assert [(b.streams, b.rows) for b in batches] == [("ORDERS", 50), ("ORDERS", 50)]
    assert len({b.key for b in batches}) == 2
    assert source_positions(reports[1]) == {"ORDERS": (100, 200)}
    assert source_positions(None) == {}


def test_commit_records_are_told_from_markers() -> None:
    record = b'{"batch_id": 3, "tail_seq": 9, "stream": "OUT", "written": 5, "query_id": "q"}'
    assert _commit_record(record) is not None
    assert _commit_record(b'{"batch_id": 3, "query_id": "q", "tail_seq": 9}') is None  # marker
    assert _commit_record(b"not json") is None
