"""The audit against a real server: planted missing, duplicated and unexpected rows are found."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from oncestream import Connection
from oncestream.audit._audit import OutputSpec, audit, read_stream


async def _fill(conn: Connection, subject: str, ids: list[str], *, msg_ids: bool) -> None:
    js = conn.nc.jetstream()
    for order_id in ids:
        headers = {"Nats-Msg-Id": f"m-{order_id}"} if msg_ids else None
        await js.publish(subject, orjson.dumps({"order_id": order_id}), headers=headers)


async def test_stream_output_with_planted_faults(conn: Connection, make_stream) -> None:  # type: ignore[no-untyped-def]
    await make_stream("IN", ("in.>",))
    await make_stream("OUT", ("out.>",), duplicate_window=0.1)
    ids = [f"o{i:04d}" for i in range(300)]
    await _fill(conn, "in.x", ids, msg_ids=True)
    # The output loses o0007, holds o0011 twice and one stray row.
    planted = [i for i in ids if i != "o0007"] + ["o0011", "stray"]
    await _fill(conn, "out.x", planted, msg_ids=False)

    report = await audit(conn, "IN", [OutputSpec.parse("stream:OUT")], key="field:order_id")
    out = report.outputs[0]
    assert not report.ok
    assert (report.expected, out.found, out.missing, out.duplicated, out.unexpected) == (
        300,
        299,
        1,
        1,
        1,
    )
    assert out.missing_samples == ["o0007"]
    assert out.duplicated_samples == ["o0011"]
    assert out.unexpected_samples == ["stray"]
    assert out.latency_ms is not None and out.latency_ms["p50"] >= 0


async def test_exact_copy_by_msg_id_and_lineage(conn: Connection, make_stream) -> None:  # type: ignore[no-untyped-def]
    await make_stream("IN", ("in.>",))
    await make_stream("OUT", ("out.>",))
    ids = [f"o{i}" for i in range(50)]
    await _fill(conn, "in.x", ids, msg_ids=True)
    js = conn.nc.jetstream()
    seq = 0
    async for chunk in read_stream(conn, "IN", batch=7):
        for record in chunk:
            seq += 1
            assert record.seq == seq
            headers = {"Nats-Msg-Id": f"IN:{record.seq}", "X-Src": record.msg_id or ""}
            await js.publish("out.x", record.data, headers=headers)
    assert seq == 50
    lineage = await audit(conn, "IN", [OutputSpec.parse("stream:OUT")], key="lineage")
    assert lineage.ok, lineage.to_dict()
    assert lineage.outputs[0].found == 50
    # By msg id the output (which carries lineage ids) holds nothing of the input.
    by_id = await audit(conn, "IN", [OutputSpec.parse("stream:OUT")], key="msg_id")
    assert by_id.outputs[0].missing == 50 and by_id.outputs[0].unexpected == 50


async def test_parquet_and_sqlite_outputs(conn: Connection, make_stream, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    await make_stream("IN", ("in.>",))
    ids = [f"o{i}" for i in range(40)]
    await _fill(conn, "in.x", ids, msg_ids=True)
    parquet_dir = tmp_path / "pq"
    parquet_dir.mkdir()
    pq.write_table(pa.table({"order_id": ids[:20]}), parquet_dir / "part-0.parquet")
    pq.write_table(pa.table({"order_id": ids[19:]}), parquet_dir / "part-1.parquet")
    db = tmp_path / "out.db"
    with sqlite3.connect(db) as sql:
        sql.execute("CREATE TABLE orders (order_id TEXT, amount REAL)")
        sql.executemany("INSERT INTO orders VALUES (?, 1.0)", [(i,) for i in ids[1:]])
    report = await audit(
        conn,
        "IN",
        [OutputSpec.parse(f"parquet:{parquet_dir}"), OutputSpec.parse(f"sql:{db}#orders")],
        key="field:order_id",
    )
    parquet, table = report.outputs
    assert (parquet.found, parquet.duplicated, parquet.duplicated_samples) == (40, 1, ["o19"])
    assert (table.found, table.missing, table.missing_samples) == (39, 1, ["o0"])
    assert not report.ok


async def test_postgres_output(conn: Connection, make_stream, postgres_url: str) -> None:  # type: ignore[no-untyped-def]
    import psycopg

    await make_stream("IN", ("in.>",))
    await _fill(conn, "in.x", ["a", "b", "c"], msg_ids=True)
    with psycopg.connect(postgres_url, autocommit=True) as pg:
        pg.execute("CREATE TABLE t (msg_id text)")
        pg.execute("INSERT INTO t VALUES ('m-a'), ('m-b'), ('m-c')")
    report = await audit(conn, "IN", [OutputSpec.parse(f"sql:{postgres_url}#t")], key="msg_id")
    assert report.ok, report.to_dict()


async def test_delta_and_iceberg_outputs(conn: Connection, make_stream, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """``delta:PATH`` and ``iceberg:WAREHOUSE#NS.TABLE``: planted faults found in each table."""
    import pytest
    from deltalake import write_deltalake

    from oncestream import ConfigError
    from oncestream.spark import iceberg

    await make_stream("IN", ("in.>",))
    ids = [f"o{i}" for i in range(30)]
    await _fill(conn, "in.x", ids, msg_ids=True)
    write_deltalake(str(tmp_path / "delta"), pa.table({"order_id": ids[:20]}))
    write_deltalake(str(tmp_path / "delta"), pa.table({"order_id": ids[19:]}), mode="append")
    lake = str(tmp_path / "lake")
    writer = iceberg("shop.orders", warehouse=lake, query_name="q")
    writer.write_arrow(pa.table({"order_id": ids[1:]}), "q", 0)  # type: ignore[attr-defined]
    specs = [
        OutputSpec.parse(f"delta:{tmp_path}/delta"),
        OutputSpec.parse(f"iceberg:{lake}#shop.orders"),
    ]
    report = await audit(conn, "IN", specs, key="field:order_id")
    delta_out, iceberg_out = report.outputs
    assert (delta_out.found, delta_out.duplicated, delta_out.duplicated_samples) == (30, 1, ["o19"])
    assert (iceberg_out.found, iceberg_out.missing, iceberg_out.missing_samples) == (29, 1, ["o0"])
    assert iceberg_out.output == f"iceberg:{lake}#shop.orders"
    # The catalog's database URL names the same catalog.
    by_url = OutputSpec.parse(f"iceberg:sqlite:///{lake}/catalog.db#shop.orders")
    assert (await audit(conn, "IN", [by_url], key="field:order_id")).outputs[0].found == 29
    for bad, message in (
        (f"iceberg:{lake}", "needs 'iceberg:CATALOG#NAMESPACE.TABLE'"),
        (f"iceberg:{lake}#orders", "needs 'iceberg:CATALOG#NAMESPACE.TABLE'"),
    ):
        with pytest.raises(ConfigError, match=message):
            OutputSpec.parse(bad)
    for missing, message in (
        (f"iceberg:{lake}#shop.nothing", "no table 'shop.nothing'"),
        (f"iceberg:{tmp_path}/none#shop.orders", "no catalog at"),
        (f"delta:{tmp_path}/none", "no Delta table there"),
    ):
        with pytest.raises(ConfigError, match=message):
            await audit(conn, "IN", [OutputSpec.parse(missing)], key="field:order_id")
