"""The sink's message ids built by pyarrow are exactly the ids of the per-row functions.

The streaming sink builds lineage and position ids as Arrow columns and publishes rows
to one subject as columns (issue 40). ``_rows`` must give every row the subject, data
and msg id the per-row path gave it (the reference below is that path), and the
fan-out check must refuse exactly what a set of every id refuses, at the same batch,
naming the same id.
"""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

from oncestream import ConfigError
from oncestream.spark._sink import (
    JetStreamBatchWriter,
    JetStreamStreamWriter,
    SinkCommit,
    _Columns,
    _layout,
)
from oncestream.spark._sink_ids import FanOutCheck, lineage_ids, position_ids
from oncestream.spark._sink_options import SinkOptions, lineage_id, position_id

STREAMS = ["ORDERS", "A", "in-2", "x_y", "Ünïcode", "A:1", "日本"]


def test_lineage_ids_are_lineage_id_row_by_row() -> None:
    rng = random.Random(40)
    for kind in (pa.int64(), pa.int32()):
        for prefix in ("", "p-", "q:r/"):
            streams = [rng.choice(STREAMS) for _ in range(500)]
            top = 2**31 - 1 if kind == pa.int32() else 2**63 - 1
            seqs = [rng.choice((0, 1, 9, 10, top, rng.randrange(top))) for _ in range(500)]
            got = lineage_ids(pa.array(streams), pa.array(seqs, kind), prefix).to_pylist()
            assert got == [prefix + lineage_id(s, q) for s, q in zip(streams, seqs, strict=True)]
    large = lineage_ids(pa.array(["S"], pa.large_string()), pa.array([7]))
    assert large.to_pylist() == ["S:7"]


def test_position_ids_are_position_id_row_by_row() -> None:
    for prefix, first, count in (("", 0, 1), ("x-", 9_998, 5), ("", 123_456_789, 1000)):
        got = position_ids(prefix, "abc123", 17, 3, first, count).to_pylist()
        assert got == [prefix + position_id("abc123", 17, 3, first + i) for i in range(count)]


def _reference_fan_out(batches: list[list[tuple[str, int]]]) -> tuple[int, str] | None:
    """The per-row check the sink had: (batch index, id) of the first repeat, else None."""
    seen: set[str] = set()
    for index, rows in enumerate(batches):
        for stream, seq in rows:
            msg_id = lineage_id(stream, seq)
            if msg_id in seen:
                return index, msg_id
            seen.add(msg_id)
    return None


def _random_batches(rng: random.Random) -> list[list[tuple[str, int]]]:
    batches: list[list[tuple[str, int]]] = []
    next_seq = {s: rng.randrange(1, 50) for s in STREAMS[:3]}
    for _ in range(rng.randrange(1, 6)):
        stream = rng.choice(STREAMS[:3])
        size = rng.randrange(1, 40)
        start = next_seq[stream]
        rows, seq = [], start
        for _ in range(size):
            rows.append((stream, seq))
            seq += rng.choice((1, 1, 2))  # gaps: a subject filter, deleted messages
        next_seq[stream] = rows[-1][1] + 1
        shape = rng.randrange(12)
        if shape == 0:  # a row repeated in the batch (fan-out)
            rows.insert(rng.randrange(len(rows) + 1), rng.choice(rows))
        elif shape == 1 and batches:  # a row of an earlier batch again
            rows.insert(rng.randrange(len(rows) + 1), rng.choice(rng.choice(batches)))
        elif shape == 2:  # out of order (a shuffle)
            rng.shuffle(rows)
        elif shape == 3:  # two streams in one batch
            other = rng.choice(STREAMS[:3])
            rows += [(other, next_seq[other] + i) for i in range(3)]
            next_seq[other] += 3
        elif shape == 4:  # sequences going back below the stream's earlier ones
            rows = [(stream, max(1, start - 20) + i) for i in range(size)]
        batches.append(rows)
    return batches


def _check_all(batches: list[list[tuple[str, int]]], check: FanOutCheck) -> tuple[int, str] | None:
    for index, rows in enumerate(batches):
        streams = pa.array([s for s, _ in rows])
        seqs = pa.array([q for _, q in rows], pa.int64())
        try:
            check.check(streams, seqs, lineage_ids(streams, seqs))
        except ConfigError as exc:
            text = str(exc)
            assert "one input row fans out to several outputs" in text
            return index, text.split("lineage id ")[1].split("'")[1]
    return None


def test_the_fan_out_check_refuses_what_a_set_of_every_id_refuses() -> None:
    rng = random.Random(7)
    outcomes = {"refused": 0, "in Arrow": 0, "by the set": 0}
    for _ in range(3000):
        batches = _random_batches(rng)
        expected = _reference_fan_out(batches)
        check = FanOutCheck()
        assert _check_all(batches, check) == expected, batches
        if expected is not None:
            outcomes["refused"] += 1
        else:
            outcomes["in Arrow" if check._seen is None else "by the set"] += 1
    assert min(outcomes.values()) > 300, outcomes  # every outcome is exercised


# --------------------------------------------------------------------------- _rows


def _writer(streaming: bool, schema: StructType, **options: str) -> JetStreamBatchWriter:
    """A writer as a task unpickles it: the driver-side checks (which ask a server for the
    target stream) already done."""
    kind = JetStreamStreamWriter if streaming else JetStreamBatchWriter
    writer = kind.__new__(kind)
    writer.options = SinkOptions.from_spark_options(
        {"servers": "nats://127.0.0.1:4222", "stream": "OUT", **options}
    )
    writer.layout = _layout(schema, writer.options)
    writer.found_target = False
    return writer  # type: ignore[return-value]


def _as_lists(rows: object) -> tuple[list[str], list[bytes], list[str]]:
    if isinstance(rows, _Columns):
        rows = rows.lists()
    subjects, datas, _, ids = rows  # type: ignore[misc]
    return list(subjects), list(datas), list(ids)


def _lineage_batch(rng: random.Random, n: int, subjects: list[str], int32: bool) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "subject": pa.array([rng.choice(subjects) for _ in range(n)]),
            "data": pa.array([rng.randbytes(rng.randrange(0, 40)) for _ in range(n)], pa.binary()),
            "stream": pa.array(["IN"] * n),
            "sequence": pa.array(range(1000, 1000 + n), pa.int32() if int32 else pa.int64()),
        }
    )


@pytest.mark.parametrize("subjects", [["out.x"], ["out.a", "out.b"]])
@pytest.mark.parametrize("prefix", ["", "run2-"])
@pytest.mark.parametrize("int32", [False, True])
def test_rows_give_each_row_the_old_subject_data_and_lineage_id(
    subjects: list[str], prefix: str, int32: bool
) -> None:
    schema = StructType(
        [
            StructField("subject", StringType()),
            StructField("data", BinaryType()),
            StructField("stream", StringType()),
            StructField("sequence", IntegerType() if int32 else LongType()),
        ]
    )
    writer = _writer(True, schema, idPrefix=prefix)
    batch = _lineage_batch(random.Random(3), 700, subjects, int32)
    commit = SinkCommit(partition=1, batch_id=5, scope="s", id_scope="scope1")
    rows = writer._rows(batch, commit, 0, FanOutCheck())
    assert isinstance(rows, _Columns) == (len(subjects) == 1)  # one subject: as columns
    expected = (
        batch.column("subject").to_pylist(),
        batch.column("data").to_pylist(),
        [
            prefix + lineage_id("IN", q)
            for q in batch.column("sequence").to_pylist()  # the per-row path's ids
        ],
    )
    assert _as_lists(rows) == expected


def test_rows_give_each_row_the_old_position_id() -> None:
    schema = StructType([StructField("data", StringType())])
    writer = _writer(True, schema, subject="out.x", idPrefix="p-")
    batch = pa.RecordBatch.from_pydict({"data": pa.array([str(i) for i in range(300)])})
    commit = SinkCommit(partition=2, batch_id=9, scope="s", id_scope="scope9")
    rows = writer._rows(batch, commit, 10_000)
    assert isinstance(rows, _Columns)
    assert _as_lists(rows) == (
        ["out.x"] * 300,
        [str(i).encode() for i in range(300)],
        ["p-" + position_id("scope9", 9, 2, 10_000 + i) for i in range(300)],
    )


def test_rows_refuse_a_fan_out_across_batches_naming_the_id() -> None:
    schema = StructType(
        [
            StructField("subject", StringType()),
            StructField("data", BinaryType()),
            StructField("stream", StringType()),
            StructField("sequence", LongType()),
        ]
    )
    writer = _writer(True, schema)
    commit = SinkCommit(partition=0, batch_id=1, scope="s", id_scope="x")
    check = FanOutCheck()
    batch = _lineage_batch(random.Random(1), 100, ["out.x"], False)
    writer._rows(batch, commit, 0, check)
    with pytest.raises(ConfigError, match="lineage id 'IN:1050'"):
        writer._rows(batch.slice(50, 1), commit, 100, check)
