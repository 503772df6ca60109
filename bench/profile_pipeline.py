"""Where the streaming pipeline's CPU goes, per process, on a warm JVM (issue 40).

The bench-peers ``pipeline`` query (``readStream`` of N stored messages ->
``selectExpr("'out.x' AS subject", "data", "stream", "sequence")`` -> ``writeStream``
jetstream, ``Trigger.AvailableNow``, N/10 per micro-batch) run twice: a warm-up on
another input of N/10 messages, then the timed run. Prints CPU microseconds per message
of every process of the tree and of the nats-server inside the timed window: the JVM,
each reused Python worker (``pyspark.daemon``), each one-off Python process Spark starts
for a Python data source (by module: ``create_data_source``, ``plan_data_source_read``,
``python_streaming_source_runner``, ...), this driver and the server.

Options: ``--mode lineage`` (the bench's query) or ``msgid`` (a ``msg_id`` column
instead of ``stream`` + ``sequence``); the pipeline's two halves alone, each a streaming
query of the same micro-batches: ``--mode read`` (the same source and columns into
Spark's ``noop`` sink) and ``--mode write`` (the same columns, read from Parquet files
of the same rows, 2 files per micro-batch, into the same sink), with ``--ids`` and
``--subject`` for their columns; ``--batched`` creates the output stream with
``allow_batched``; ``--py-spy DIR`` records each Python worker with py-spy
(collapsed stacks, one file per process); ``--jfr FILE`` records the JVM with Java
Flight Recorder; ``--conf k=v`` adds Spark settings; ``--cold`` skips the warm-up
(as bench-peers measures it: the first query of a fresh JVM and fresh Python workers).

Run: ``SPARK_LOCAL_IP=127.0.0.1 flock /tmp/oncestream-heavy.lock .venv/bin/python
bench/profile_pipeline.py 1e6``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._cpu import CpuSampler, role_of
from bench.bench_publish import measure_publisher_async
from bench.scale import make_stream

from oncestream import ConnectOptions, connect
from oncestream.server import NatsServer
from oncestream.streams import StreamSpec, ensure_stream


def _key(cmd: str) -> str:
    """A process's name in the table: the Python module Spark started, else its role."""
    if " -m " in cmd:
        return cmd.split(" -m ")[-1].split()[0]
    return role_of(cmd)


async def _setup(url: str, n: int, batched: bool) -> None:
    await make_stream(url, duplicate_window=120, storage="file")
    await measure_publisher_async(url, n, "SCALE", fresh=False, subject="scale.x")
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        await ensure_stream(conn, StreamSpec(name="WARMIN", subjects=("warmin.>",)))
        for name in ("OUT", "WARMOUT"):
            await ensure_stream(
                conn,
                StreamSpec(name=name, subjects=(name.lower() + ".>",), allow_batched=batched),
            )
    await measure_publisher_async(url, max(1, n // 10), "WARMIN", fresh=False, subject="warmin.x")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("n", type=float)
    parser.add_argument(
        "--mode",
        choices=("lineage", "msgid", "read", "write", "batch-read", "batch-write"),
        default="lineage",
    )
    parser.add_argument(
        "--ids",
        choices=("lineage", "msgid"),
        default="",
        help="read/write modes: the id columns (default lineage: stream + sequence)",
    )
    parser.add_argument(
        "--subject",
        choices=("column", "option"),
        default="column",
        help="the output subject as a column (default) or as the sink's option",
    )
    parser.add_argument("--batched", action="store_true")
    parser.add_argument(
        "--batches", type=int, default=10, help="micro-batches of the streaming source (10)"
    )
    parser.add_argument("--py-spy", dest="pyspy", default="")
    parser.add_argument("--jfr", default="")
    parser.add_argument("--perf", default="", help="perf record of the JVM (frame pointers)")
    parser.add_argument("--conf", action="append", default=[])
    parser.add_argument("--detail", action="store_true", help="every process's CPU")
    parser.add_argument("--cold", action="store_true", help="no warm-up query (as bench-peers)")
    parser.add_argument("--json", default="", help="also write the table here")
    args = parser.parse_args()
    n = int(args.n)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from oncestream.spark import local_session

    conf = {"spark.driver.memory": "2g", "spark.python.worker.memory": "256m"}
    conf.update(dict(c.split("=", 1) for c in args.conf))
    if args.perf:  # Java frames for perf: frame pointers, and a symbol map (jcmd) at the end
        conf["spark.driver.extraJavaOptions"] = "-XX:+PreserveFramePointer"
    with NatsServer() as server:
        url = server.url
        asyncio.run(_setup(url, n, args.batched))
        spark = local_session("profile-pipeline", conf=conf)
        spark.sparkContext.setLogLevel("ERROR")

        files = {}
        if args.mode in ("write", "batch-write"):  # the source's rows, as Parquet: 20 files
            files = {
                name: _parquet(spark, name, size)
                for name, size in (("WARMIN", n // 10), ("SCALE", n))
            }
        ids = (
            ["concat(stream, ':', cast(sequence as string)) AS msg_id"]
            if args.mode == "msgid" or args.ids == "msgid"
            else ["stream", "sequence"]
        )

        def columns(out: str) -> list[str]:
            """What reaches the sink: the subject (a column, or none), data, the ids."""
            subject = [f"'{out.lower()}.x' AS subject"] if args.subject == "column" else []
            return [*subject, "data", *ids]

        def sink_options(out: str) -> dict[str, str]:
            options = {"servers": url, "stream": out}
            if args.subject == "option":
                options["subject"] = f"{out.lower()}.x"
            return options

        def run(stream: str, out: str) -> Any:
            if args.mode == "batch-read":  # the same source and columns, as one batch read
                spark.read.format("jetstream").options(
                    servers=url, stream=stream, startingOffsets="earliest"
                ).load().selectExpr("data", "stream", "sequence").write.format("noop").mode(
                    "overwrite"
                ).save()
                return None
            if args.mode == "batch-write":  # the same rows and sink, as one batch write
                spark.read.parquet(files[stream]).selectExpr(*columns(out)).write.format(
                    "jetstream"
                ).options(**sink_options(out)).mode("append").save()
                return None
            if args.mode == "write":  # 2 files per micro-batch
                src = (
                    spark.readStream.schema(spark.read.parquet(files[stream]).schema)
                    .option("maxFilesPerTrigger", "2")
                    .parquet(files[stream])
                )
            else:
                src = (
                    spark.readStream.format("jetstream")
                    .options(servers=url, stream=stream, startingOffsets="earliest")
                    .option("maxMessagesPerTrigger", str(max(1, n // args.batches)))
                    .load()
                )
            df = src.selectExpr(*columns(out))
            writer = (
                df.writeStream.format("noop")
                if args.mode == "read"
                else df.writeStream.format("jetstream").options(**sink_options(out))
            )
            query = (
                writer.option("checkpointLocation", tempfile.mkdtemp(prefix="profile-pipeline-"))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            if query.exception() is not None:
                raise SystemExit(f"query failed: {query.exception()}")
            return query

        if not args.cold:
            run("WARMIN", "WARMOUT")
        sampler = CpuSampler(interval=0.1, also=(server.pid,)).start()
        spies = _start_pyspy(args.pyspy) if args.pyspy else []
        jvm = _jvm_pid() if args.jfr or args.perf else None
        perf = None
        if jvm is not None and args.jfr:
            _jcmd(jvm, "JFR.start", "name=timed", "settings=profile")
        if jvm is not None and args.perf:
            perf = subprocess.Popen(
                ["perf", "record", "-F", "499", "-g", "-p", str(jvm), "-o", args.perf],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        t0 = time.perf_counter()
        query = run("SCALE", "OUT")
        wall = time.perf_counter() - t0
        sampler.stop()
        if jvm is not None and args.jfr:
            _jcmd(jvm, "JFR.stop", "name=timed", f"filename={Path(args.jfr).resolve()}")
        if jvm is not None and perf is not None:
            perf.send_signal(signal.SIGINT)
            perf.wait(timeout=120)
            _jcmd(jvm, "Compiler.perfmap")  # /tmp/perf-<pid>.map, read by perf report
        for proc in spies:
            proc.send_signal(signal.SIGINT)
        for proc in spies:
            proc.wait(timeout=60)
        batches = len(query.recentProgress) if query is not None else 0
        spark.stop()
    per: dict[str, list[float]] = {}
    for used, cmd in sampler.processes().values():
        profiler = any(name in cmd for name in ("py-spy", "jcmd", "perf record"))
        if used > 0 and not profiler:
            per.setdefault(_key(cmd), []).append(used)
    load = os.getloadavg()
    print(
        f"N={n:,} mode={args.mode} batched={args.batched} wall={wall:.1f}s "
        f"rate={n / wall:,.0f}/s batches={batches} load={load[0]:.2f}"
    )
    total = 0.0
    rows = []
    for key, used in sorted(per.items(), key=lambda kv: -sum(kv[1])):
        total += sum(used)
        rows.append({"process": key, "count": len(used), "us_per_msg": 1e6 * sum(used) / n})
        print(f"  {1e6 * sum(used) / n:7.2f} us/msg  {sum(used):6.2f}s  x{len(used):<3d} {key}")
    print(f"  {1e6 * total / n:7.2f} us/msg  {total:6.2f}s  total")
    if args.detail:
        for pid, (used, cmd) in sorted(sampler.processes().items()):
            if used > 0.005:
                print(f"    pid {pid:>7d} {used:6.2f}s  {cmd[:150]}")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "n": n,
                    "wall": wall,
                    "load": load,
                    "mode": args.mode,
                    "argv": sys.argv[1:],
                    "commit": _commit(),
                    "rows": rows,
                }
            )
        )


def _parquet(spark: Any, stream: str, n: int) -> str:
    """``n`` rows shaped as the source's (``data`` 128 bytes, ``stream``, ``sequence``)
    in 20 Parquet files; returns their directory."""
    from pyspark.sql import functions as F

    path = tempfile.mkdtemp(prefix=f"profile-pipeline-{stream.lower()}-")
    spark.range(1, n + 1, numPartitions=20).select(
        F.expr("cast(lpad(cast(id as string), 128, 'x') as binary)").alias("data"),
        F.lit(stream).alias("stream"),
        F.col("id").alias("sequence"),
    ).write.mode("overwrite").parquet(path)
    return path


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def _children() -> list[tuple[int, str]]:
    """(pid, command line) of every process on the machine."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            found.append((int(entry), parent, cmd))
    mine = {os.getpid()}
    for _ in range(5):  # the tree below this process
        mine |= {pid for pid, parent, _ in found if parent in mine}
    return [(pid, cmd) for pid, _, cmd in found if pid in mine and pid != os.getpid()]


def _jvm_pid() -> int | None:
    return next((pid for pid, cmd in _children() if "java" in cmd.split(" ")[0]), None)


def _jcmd(pid: int, *args: str) -> None:
    subprocess.run(["jcmd", str(pid), *args], check=True, capture_output=True)


def _start_pyspy(out: str) -> list[subprocess.Popen[bytes]]:
    """py-spy on the reused Python workers alive now (one-off processes start later)."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    Path(out).mkdir(parents=True, exist_ok=True)
    procs = []
    for pid, cmd in _children():
        if cmd.endswith("pyspark.daemon pyspark.worker "):
            argv = [spy, "record", "-p", str(pid), "-r", "100", "-f", "raw", "--nonblocking"]
            procs.append(
                subprocess.Popen(
                    [*argv, "-o", f"{out}/{pid}.txt"],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
    return procs


if __name__ == "__main__":
    main()
