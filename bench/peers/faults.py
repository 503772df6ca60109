"""The same faults on the jetstream path and on Spark's Kafka path: what each lost or duplicated.

Rows (each on fresh servers, every process started here stopped by PID):

1. sink, driver SIGKILL after micro-batch 1 was written, before Spark's commit
   (2000 inputs, 500 per batch). jetstream: tests/spark/_sink_driver_job.py, the
   driver of tests/spark/test_sink_kill.py, lineage ids. Kafka: foreachBatch with
   Spark's Kafka writer (the streaming Kafka sink has no point between "written" and
   "committed" where a job can plant a kill; its commit is a no-op, so the two are the
   same writes). Then one clean restart.
2. source -> Parquet, driver SIGKILL mid-stream after two non-empty batches of 20
   (150 inputs), then a restart with Trigger.AvailableNow. jetstream:
   tests/spark/_driver_job.py, the driver of tests/spark/test_source_kill.py.
3. pipeline source -> sink, SIGKILL of the server (nats-server / the Kafka broker)
   after two non-empty batches of 500 (5000 inputs), restarted 2 s later on the same
   store; the query keeps running (it is restarted once if it failed).

Counts: ``lost`` = inputs with no output, ``duplicated`` = extra outputs of an input.
Output: a rich table and bench/results/faults-*.json. Usage: python bench/peers/faults.py
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.peers.kafka import KafkaBroker

from harness import make_streams, order_ids_on, publish_orders
from oncestream.server import NatsServer
from oncestream.streams import StreamSpec

ROOT = Path(__file__).resolve().parents[2]
JOB = Path(__file__).with_name("_fault_job.py")
RESULTS = ROOT / "bench" / "results"


def _env() -> dict[str, str]:
    path = os.pathsep.join((str(ROOT / "src"), str(ROOT)))
    return dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYTHONPATH=path)


def _start(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        args,
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _finish(proc: subprocess.Popen[str], timeout: float = 300) -> int:
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise
    if proc.returncode not in (0, -9):
        print(f"    job exit {proc.returncode}: {err[-1500:]}", flush=True)
    return int(proc.returncode)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def _wait_batches(proc: subprocess.Popen[str], batches: int) -> int:
    seen = 0
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("PROGRESS") and int(line.split()[2]) > 0:
            seen += 1
            if seen >= batches:
                break
    return seen


def _job(*args: str) -> list[str]:
    return [sys.executable, str(JOB), *args]


def _kafka_counts(bootstrap: str, topic: str) -> Counter[str]:
    proc = _start(_job("count", "kafka", bootstrap, topic))
    out, err = proc.communicate(timeout=300)
    line = next((x for x in out.splitlines() if x.startswith("COUNTS ")), None)
    if line is None:
        raise RuntimeError(f"count failed: {err[-1500:]}")
    return Counter(json.loads(line.removeprefix("COUNTS ")))


def _produce(bootstrap: str, n: int) -> None:
    if _finish(_start(_job("produce", "kafka", bootstrap, "in", str(n)))) != 0:
        raise RuntimeError("produce failed")


def _tally(counts: Counter[Any], expected: Iterable[Any]) -> dict[str, int]:
    want = set(expected)
    return {
        "inputs": len(want),
        "outputs": sum(counts.values()),
        "lost": len(want - set(counts)),
        "duplicated": sum(n - 1 for k, n in counts.items() if k in want and n > 1),
        "unexpected": sum(n for k, n in counts.items() if k not in want),
    }


def _orders(n: int) -> list[str]:
    return [f"o{i:06d}" for i in range(n)]


def _orders_in(url: str, count: int) -> None:
    """Streams IN and OUT (a 2 min duplicate window), and ``count`` orders in IN."""
    make_streams(
        url,
        StreamSpec(name="IN", subjects=("in.>",)),
        StreamSpec(name="OUT", subjects=("out.>",), duplicate_window=120.0),
    )
    publish_orders(url, "IN", "in.orders", count)


def sink_kill_jetstream(work: Path) -> dict[str, Any]:
    with NatsServer() as server:
        url = server.url
        _orders_in(url, 2000)
        job = [
            sys.executable,
            str(ROOT / "tests" / "spark" / "_sink_driver_job.py"),
            url,
            str(work / "chk"),
        ]
        killed = _finish(_start([*job, "lineage", "before:1"]))
        restarted = _finish(_start([*job, "lineage", "none"]))
        return {
            "killed": killed,
            "restart": restarted,
            **_tally(order_ids_on(url, "OUT", "out.orders"), _orders(2000)),
        }


def sink_kill_kafka(work: Path) -> dict[str, Any]:
    with KafkaBroker() as broker:
        _produce(broker.bootstrap, 2000)
        job = _job("sink", "kafka", broker.bootstrap, str(work / "chk"))
        killed = _finish(_start([*job, "before:1"]))
        restarted = _finish(_start([*job, "none"]))
        return {
            "killed": killed,
            "restart": restarted,
            **_tally(_kafka_counts(broker.bootstrap, "out"), _orders(2000)),
        }


def _parquet_column(path: Path, column: str) -> Counter[int]:
    import pyarrow.dataset as ds

    table = ds.dataset(str(path), format="parquet").to_table(columns=[column])
    return Counter(int(v) for v in table.column(column).to_pylist())


def source_kill_jetstream(work: Path) -> dict[str, Any]:
    import asyncio

    from harness import publish_n
    from oncestream import ConnectOptions, connect
    from oncestream.streams import ensure_stream

    async def fill(url: str) -> None:
        async with await connect(ConnectOptions(servers=(url,))) as conn:
            await ensure_stream(conn, StreamSpec(name="KILL", subjects=("kill.>",)))
            await publish_n(conn, "kill.x", 150, data=lambda i: b"m%d" % i)

    with NatsServer() as server:
        asyncio.run(fill(server.url))
        base = [
            sys.executable,
            "-m",
            "tests.spark._driver_job",
            "stream",
            server.url,
            "KILL",
            str(work / "out"),
            str(work / "chk"),
        ]
        proc = _start([*base, "run"])
        _wait_batches(proc, 2)
        _kill_group(proc)
        restarted = _finish(_start([*base, "finish"]))
        counts = _parquet_column(work / "out", "sequence")
        return {"killed": proc.returncode, "restart": restarted, **_tally(counts, range(1, 151))}


def source_kill_kafka(work: Path) -> dict[str, Any]:
    with KafkaBroker() as broker:
        _produce(broker.bootstrap, 150)
        base = _job("source", "kafka", broker.bootstrap, str(work / "out"), str(work / "chk"))
        proc = _start([*base, "run"])
        _wait_batches(proc, 2)
        _kill_group(proc)
        restarted = _finish(_start([*base, "finish"]))
        counts = _parquet_column(work / "out", "offset")
        return {"killed": proc.returncode, "restart": restarted, **_tally(counts, range(150))}


def _server_kill(server: Any, fmt: str, target: str, work: Path) -> dict[str, Any]:
    job = _job("pipe", fmt, target, str(work / "chk"))
    proc = _start(job)
    _wait_batches(proc, 2)
    server.kill()
    time.sleep(2)
    server.start()
    first = _finish(proc, timeout=600)
    record: dict[str, Any] = {"query": "survived" if first == 0 else f"failed (exit {first})"}
    if first != 0:
        record["restart"] = _finish(_start(job), timeout=600)
    return record


def server_kill_jetstream(work: Path) -> dict[str, Any]:
    with NatsServer() as server:
        url = server.url
        _orders_in(url, 5000)
        record = _server_kill(server, "jetstream", url, work)
        return {**record, **_tally(order_ids_on(url, "OUT", "out.orders"), _orders(5000))}


def server_kill_kafka(work: Path) -> dict[str, Any]:
    with KafkaBroker() as broker:
        _produce(broker.bootstrap, 5000)
        record = _server_kill(broker, "kafka", broker.bootstrap, work)
        return {**record, **_tally(_kafka_counts(broker.bootstrap, "out"), _orders(5000))}


ROWS = (
    (
        "driver SIGKILL after batch 1 written, before Spark's commit",
        "sink",
        sink_kill_jetstream,
        sink_kill_kafka,
    ),
    (
        "driver SIGKILL mid-stream, restart",
        "source -> Parquet",
        source_kill_jetstream,
        source_kill_kafka,
    ),
    (
        "server SIGKILL mid-stream, restarted after 2 s",
        "source -> sink",
        server_kill_jetstream,
        server_kill_kafka,
    ),
)


def main() -> int:
    from rich.console import Console
    from rich.table import Table

    records = []
    for fault, path, ours, kafka in ROWS:
        for system, run in (("oncestream jetstream", ours), ("Spark kafka", kafka)):
            print(f"  {path}: {fault}: {system}", flush=True)
            with tempfile.TemporaryDirectory(prefix="peers-fault-") as work:
                try:
                    rec = {"fault": fault, "path": path, "system": system, **run(Path(work))}
                except Exception as exc:
                    rec = {"fault": fault, "path": path, "system": system, "error": repr(exc)}
            print(f"    {rec}", flush=True)
            records.append(rec)
    t = Table(title="The same faults on both paths (one run each)")
    for col in ("path", "fault", "system", "inputs", "outputs", "lost", "duplicated"):
        t.add_column(
            col, justify="right" if col in ("inputs", "outputs", "lost", "duplicated") else "left"
        )
    for r in records:
        cells = [str(r.get(k, "error")) for k in ("inputs", "outputs", "lost", "duplicated")]
        t.add_row(r["path"], r["fault"], r["system"], *cells)
    console = Console()
    width = console.measure(t, options=console.options.update(width=100_000)).maximum
    Console(width=width, no_color=True, highlight=False).print(t)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / time.strftime("faults-%Y%m%d-%H%M%S.json")
    out.write_text(
        json.dumps(
            {
                "date": time.strftime("%Y-%m-%d %H:%M"),
                "loadavg": os.getloadavg(),
                "results": records,
            },
            indent=2,
        )
    )
    print(f"results written to {out}")
    ours_ok = all(
        r.get("lost") == 0 and r.get("duplicated") == 0
        for r in records
        if r["system"].startswith("oncestream")
    )
    return 0 if ours_ok else 1


if __name__ == "__main__":
    sys.exit(main())
