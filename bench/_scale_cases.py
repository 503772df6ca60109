"""One bench-scale case in its own process, so its peak RSS is its own (see bench/scale.py).

Usage: ``python bench/_scale_cases.py CASE --url URL --n N --stream S [...]``; prints
one ``CASE-JSON {...}`` line with ``rate`` (msg/s) and case-specific extras. The
stream exists already (created by bench/scale.py with the run's spec); the read
cases (processor-*, spark-source) expect it to hold exactly N messages.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import PAYLOAD_128
from bench.bench_process import insert_rows, processor, sqlite_ledger
from bench.bench_publish import measure_publisher_async

from oncestream import ConnectOptions, PostgresLedger, connect
from oncestream.publish import ProducerSession
from oncestream.streams import StreamSpec

CASES = (
    "publisher",
    "publisher-fast",
    "producer-batch",
    "processor-sqlite",
    "processor-sqlite-batch",
    "processor-sqlite-ackall",
    "processor-postgres",
    "processor-postgres-merge",
    "processor-postgres-each",
    "processor-postgres-batch",
    "spark-source",
    "spark-sink",
    "spark-sink-fast",
    "spark-sink-atomic",
)
WRITE_CASES = (
    "publisher",
    "publisher-fast",
    "producer-batch",
    "spark-sink",
    "spark-sink-fast",
    "spark-sink-atomic",
)
#: Cases on a stream with allow_batched: the Publisher's fast-ingest path (required, not auto).
FAST_CASES = ("publisher-fast", "spark-sink-fast")
SUBJECT = "scale.x"


def scale_spec(
    name: str,
    *,
    duplicate_window: float,
    storage: str,
    atomic: bool = False,
    batched: bool | None = False,
) -> StreamSpec:
    """The one stream config every case (and nats.go) runs against.

    ``batched``: ``allow_batched`` (None: StreamSpec's default, on where the server takes it).
    """
    return StreamSpec(
        name=name,
        subjects=("scale.>",),
        storage=storage,  # type: ignore[arg-type]
        duplicate_window=duplicate_window,
        allow_batched=batched,
        extra={"allow_atomic": True} if atomic else {},
    )


def spark_conf(memory: str) -> dict[str, str]:
    """Bounded memory: local mode runs the executor inside the driver JVM."""
    return {
        "spark.driver.memory": memory,
        "spark.executor.memory": memory,
        "spark.python.worker.memory": "256m",
        "spark.ui.enabled": "false",
    }


async def _stored(url: str, stream: str) -> int:
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        return int((await conn.stream_info(stream))["state"]["messages"])


async def _producer(url: str, n: int, stream: str, batch: int) -> dict[str, Any]:
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        session = ProducerSession(
            conn, stream=stream, subject_prefix="scale.src", producer_id="p1", batch_size=batch
        )
        await session.start()
        started = time.perf_counter()
        stored = await session.run((i, PAYLOAD_128) for i in range(n))
        elapsed = time.perf_counter() - started
        await session.close()
    if stored != n or await _stored(url, stream) != n:
        raise SystemExit(f"producer stored {stored} of {n}")
    return {"rate": n / elapsed, "seconds": elapsed, "batch_size": batch}


#: PostgresLedger(merge_inserts=...) of a case (none: the default).
_MERGE = {"processor-postgres-merge": True, "processor-postgres-each": False}


def _pg_insert(msg: Any, tx: Any) -> None:
    tx.execute("INSERT INTO effects (body) VALUES (%s)", (msg.data,))


def _pg_copy(msgs: Any, tx: Any) -> None:
    """The batch handler of docs/processing.md's PostgreSQL example: COPY."""
    with tx.connection.cursor().copy("COPY effects (body) FROM STDIN") as copy:
        for msg in msgs:
            copy.write_row((msg.data,))


async def processor_case(
    url: str,
    n: int,
    stream: str,
    pg_url: str | None,
    *,
    batched: bool = False,
    ack_policy: str = "explicit",
    merge_inserts: bool | str | None = None,
) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    extra: dict[str, Any] = {"ack_policy": ack_policy}
    suffix = ("_batch" if batched else "") + ("_ackall" if ack_policy == "all" else "")
    suffix += {None: "", True: "_merge", False: "_each"}.get(merge_inserts, "")
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        if pg_url is None:
            ledger: Any = sqlite_ledger(work)
            rate, rows = await processor(
                conn,
                n,
                work,
                stream=stream,
                consumer="scale_sqlite" + suffix,
                ledger=ledger,
                batch_handler=insert_rows if batched else None,
                ack_policy=ack_policy,
            )
        else:
            # (Only when set: the case runs against older oncestreams too.)
            options = {} if merge_inserts is None else {"merge_inserts": merge_inserts}
            ledger = PostgresLedger(pg_url, **options)
            ledger.open()
            ledger.connection.execute("CREATE TABLE effects (id BIGSERIAL PRIMARY KEY, body BYTEA)")
            ledger.connection.commit()
            rate, rows = await processor(
                conn,
                n,
                work,
                stream=stream,
                consumer="scale_pg" + suffix,
                ledger=ledger,
                handler=_pg_insert,
                batch_handler=_pg_copy if batched else None,
                ack_policy=ack_policy,
            )
    if rows != n:
        raise SystemExit(f"processor applied {rows} rows, expected {n}")
    # What the Processor's pruning leaves once every message is acked (its prune loop
    # waits prune_grace after the ack floor; here the floor is N and final).
    ledger.open()
    before = ledger.applied_count(stream)
    pruned = 0
    for _ in range(n // 10_000 + 2):
        deleted = ledger.prune(stream, n, 10_000)
        pruned += deleted
        if deleted == 0:
            break
    extra["ledger_rows_before_prune"] = before
    extra["ledger_rows_after_prune"] = ledger.applied_count(stream)
    if pg_url is None:
        con = ledger.connection
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = con.execute(
            "SELECT sum(pgsize) FROM dbstat WHERE name LIKE 'oncestream_applied%'"
        ).fetchone()
        extra["ledger_bytes_after_prune"] = int(pages[0] or 0) if pages else None
        extra["db_file_bytes"] = sum(p.stat().st_size for p in work.glob("effects.db*"))
    else:
        con = ledger.connection
        con.commit()
        con.autocommit = True
        con.execute("VACUUM oncestream_applied")
        size = con.execute("SELECT pg_total_relation_size('oncestream_applied')").fetchone()
        extra["ledger_bytes_after_prune"] = int(size[0])
    ledger.close()
    for path in work.glob("*"):
        path.unlink()
    work.rmdir()
    return {"rate": rate, **extra}


def _timed_cpu(used: dict[str, float], args: argparse.Namespace) -> dict[str, Any]:
    """CPU seconds of a Spark case's timed part (its JVM start-up and warm-ups left out).

    ``client`` is every process of the case's tree (driver, JVM, Python
    workers); ``server`` is the nats-server, counted only with ``--server-pid``.
    """
    if not used:
        return {}
    client = sum(v for role, v in used.items() if role != "nats-server")
    timed = {"client": round(client, 3), "roles": used}
    if args.server_pid:
        timed["server"] = used.get("nats-server", 0.0)
    return {"timed_cpu": timed}


def run_case(args: argparse.Namespace) -> dict[str, Any]:
    conf = spark_conf(args.spark_memory)
    if args.case in ("publisher", "publisher-fast"):
        ingest = "fast" if args.case == "publisher-fast" else "acks"
        rate = asyncio.run(
            measure_publisher_async(
                args.url, args.n, args.stream, fresh=False, subject=SUBJECT, ingest=ingest
            )
        )
        return {"rate": rate, "ingest": ingest}
    if args.case == "producer-batch":
        return asyncio.run(_producer(args.url, args.n, args.stream, args.batch))
    if args.case.startswith("processor-"):
        batched = args.case.endswith("-batch")
        policy = "all" if args.case.endswith("-ackall") else "explicit"
        pg_url = None
        if args.case.startswith("processor-postgres"):
            if not args.pg_url:
                raise SystemExit(f"{args.case} needs --pg-url")
            pg_url = args.pg_url
        return asyncio.run(
            processor_case(
                args.url,
                args.n,
                args.stream,
                pg_url,
                batched=batched,
                ack_policy=policy,
                merge_inserts=_MERGE.get(args.case),
            )
        )
    if args.case == "spark-source":
        from bench.bench_spark_source import spark_read

        used: dict[str, float] = {}
        got = spark_read(
            args.url,
            args.n,
            stream=args.stream,
            methods=("consumer",),
            conf=conf,
            cpu=used,
            server_pid=args.server_pid,
        )
        rate, seconds = got["consumer"]
        return {
            "rate": rate,
            "seconds": seconds,
            "spark_memory": args.spark_memory,
            **_timed_cpu(used, args),
        }
    if args.case in ("spark-sink", "spark-sink-fast", "spark-sink-atomic"):
        from bench.bench_spark_sink import sink_rate

        ingest = {"spark-sink-fast": "fast", "spark-sink-atomic": "atomic"}.get(args.case, "acks")
        spec = scale_spec(
            args.stream,
            duplicate_window=args.duplicate_window,
            storage=args.storage,
            batched=ingest == "fast",
            atomic=ingest == "atomic",
        )
        used: dict[str, float] = {}
        rate = sink_rate(
            args.url,
            args.n,
            stream=args.stream,
            partitions=2,
            conf=conf,
            spec=spec,
            ingest=ingest,
            cpu=used,
            server_pid=args.server_pid,
        )
        return {
            "rate": rate,
            "spark_memory": args.spark_memory,
            "tasks": 2,
            "ingest": ingest,
            **_timed_cpu(used, args),
        }
    raise SystemExit(f"unknown case {args.case!r} (allowed: {', '.join(CASES)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", choices=CASES)
    parser.add_argument("--url", required=True)
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--stream", default="SCALE")
    parser.add_argument("--pg-url")
    parser.add_argument("--batch", type=int, default=1000, help="ProducerSession batch_size")
    parser.add_argument("--spark-memory", default="2g")
    parser.add_argument("--duplicate-window", type=float, default=120.0)
    parser.add_argument("--storage", default="file")
    parser.add_argument(
        "--server-pid", type=int, help="the nats-server's pid (its CPU in a timed part)"
    )
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    result = run_case(args)
    print("CASE-JSON " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
