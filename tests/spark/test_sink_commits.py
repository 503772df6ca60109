"""The sink's commit records and attempt markers against a real server (no SparkSession).

Issue 19: every control record belongs to one query (a new query on a reused
checkpoint path must neither read nor be swallowed by the old query's), and a
``duplicate`` PubAck on one is checked by reading the subject back.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from oncestream._connection import Connection
from oncestream._errors import PublishError
from oncestream.spark._commits import (
    COMMITS_STREAM,
    AttemptMarker,
    CommitRecord,
    CommitStore,
)
from oncestream.spark._sink import _read_after

DOC = Path(__file__).resolve().parents[2] / "docs" / "spark-sink.md"


async def _store(conn: Connection) -> CommitStore:
    store = CommitStore(conn, "SINK_COMMITS_T")
    await store.ensure()
    return store


def _record(batch: int, query: str | None) -> CommitRecord:
    return CommitRecord(batch_id=batch, tail_seq=10 * batch, stream="OUT", query_id=query)


async def test_records_are_scoped_by_query(conn: Connection) -> None:
    store = await _store(conn)
    await store.record("s", _record(0, "q1"))
    await store.record("s", _record(1, "q1"))
    await store.record("s", _record(1, "q1"))  # a re-commit after a restart: duplicate, fine
    assert await store.last("s", "q1") == _record(1, "q1")
    # A new query on the same path: q1's records are not its own, and its own records
    # (same batch ids) are stored, not dropped as duplicates of q1's.
    assert await store.last("s", "q2") is None
    await store.record("s", _record(0, "q2"))
    assert await store.last("s", "q2") == _record(0, "q2")
    assert await store.last("s", "q1") is None
    info = await conn.stream_info("SINK_COMMITS_T")
    assert info["state"]["messages"] == 3


async def test_a_duplicate_record_that_is_not_there_fails(conn: Connection) -> None:
    store = await _store(conn)
    await store.record("d", _record(0, "q1"))
    await store.record("d", _record(0, "q2"))  # someone else's record is now the last one
    with pytest.raises(PublishError, match=r"batch 0 of query q1 .* dropped .* as a duplicate"):
        await store.record("d", _record(0, "q1"))


async def test_attempt_markers_are_scoped_by_query(conn: Connection) -> None:
    store = await _store(conn)
    first = AttemptMarker(batch_id=0, query_id="q1", tail_seq=5, target_created="t")
    assert await store.mark_attempt("m", 0, first) is None
    again = AttemptMarker(batch_id=0, query_id="q1", tail_seq=9, target_created="t")
    assert await store.mark_attempt("m", 0, again) == first  # the earlier attempt's tail
    other = AttemptMarker(batch_id=0, query_id="q2", tail_seq=12, target_created="t")
    assert await store.mark_attempt("m", 0, other) is None  # q1's marker is not q2's
    assert await store.mark_attempt("m", 0, other) == other
    # q1 again, while q2's marker is the last one: the server drops q1's as a duplicate,
    # and reading back shows it is not there. Two queries on one path: an error.
    with pytest.raises(PublishError, match="does not hold it"):
        await store.mark_attempt("m", 0, again)


async def test_records_of_earlier_versions(conn: Connection) -> None:
    """Records and markers written without a query id (before issue 19)."""
    store = await _store(conn)
    subject = store.subject("old")
    js = conn.nc.jetstream()
    legacy_start = CommitRecord(batch_id=-1, tail_seq=7, stream="OUT")
    await js.publish(subject, legacy_start.to_json())
    await js.publish(f"{subject}.p0", orjson.dumps({"batch_id": 0}))
    assert await store.last("old", "q1") == legacy_start  # a start record: only a tail
    marker = AttemptMarker(batch_id=0, query_id="q1", tail_seq=9)
    assert await store.mark_attempt("old", 0, marker, last=None) is None
    await js.publish(f"{subject}.p1", orjson.dumps({"batch_id": 0}))
    await js.publish(subject, _record(3, None).to_json())  # a commit: not trusted
    assert await store.last("old", "q1") is None
    earlier = await store.mark_attempt("old", 1, marker, last=legacy_start)
    assert earlier == AttemptMarker(batch_id=0)
    assert _read_after(earlier, marker, legacy_start) == 7


def test_read_after() -> None:
    now = AttemptMarker(batch_id=2, query_id="q", tail_seq=90, target_created="t1")
    same = AttemptMarker(batch_id=2, query_id="q", tail_seq=40, target_created="t1")
    assert _read_after(same, now, None) == 40
    recreated = AttemptMarker(batch_id=2, query_id="q", tail_seq=40, target_created="t0")
    assert _read_after(recreated, now, None) == 0


def test_doc_names_the_records_subject() -> None:
    """docs/spark-sink.md gives the records' subject; it must be the one the code uses."""
    text = DOC.read_text()
    found = re.findall(r"`(oncestream\.sink\.commits\.[^`]*)`", text)
    assert found, "docs/spark-sink.md no longer names the commit records' subject"
    store: Any = CommitStore(None, COMMITS_STREAM)  # type: ignore[arg-type]
    expected = {store.subject("<scope>"), store.subject("<scope>") + ".p<partition>"}
    assert set(found) == expected, found
