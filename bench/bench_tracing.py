"""What tracing costs (group "tracing"): Publisher and Processor with tracing off and on.

One fresh server; each case alternates off/on runs (``BENCH_TRACING_ROUNDS``,
best of them kept, as the machine's noise is one-sided). Off is the baseline.
Tracing off is free by construction except one test per message on the hot
path (``if self._tracer is not None``, twice in ``Publisher.publish``, once per
batch in the Processor): the last line measures that test with ``timeit`` and
reports it as a share of the Publisher's time per message, the figure the
"off costs < 2%" claim rests on (an off/off-without-the-code comparison would
need two builds; the branch is the whole difference between them).
Spans go to a TracerProvider with no exporter (the SDK's work, not an exporter's).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
import tempfile
import time
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import PAYLOAD_128, fresh_server, report
from bench.bench_publish import _fresh_stream
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from oncestream import ConnectOptions, Processor, ProcessorOptions, SQLiteLedger, connect
from oncestream.publish import Publisher, PublisherOptions

N_PUB = int(os.environ.get("BENCH_TRACING_PUBLISH", "100000"))
N_PROC = int(os.environ.get("BENCH_TRACING_PROCESS", "50000"))
ROUNDS = int(os.environ.get("BENCH_TRACING_ROUNDS", "3"))
GROUP = "tracing"


async def publish(url: str, n: int, tracing: bool, stream: str = "BTR") -> float:
    await _fresh_stream(url, stream)
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        pub = Publisher(conn, PublisherOptions(stream=stream, tracing=tracing))
        await pub.start()
        start = time.perf_counter()
        for i in range(n):
            await pub.publish("btr.x", PAYLOAD_128, msg_id=f"t-{i}")
        await pub.flush()
        elapsed = time.perf_counter() - start
        await pub.close()
    return n / elapsed


def handler(msg, tx) -> None:  # type: ignore[no-untyped-def]
    tx.execute("INSERT INTO effects (body) VALUES (?)", (msg.data,))


async def process(url: str, n: int, tracing: bool, work: Path) -> float:
    await publish(url, n, False, stream="BTR")  # fill
    db = work / f"l-{time.monotonic_ns()}.db"
    sqlite3.connect(db).execute("CREATE TABLE effects (body BLOB)").connection.commit()
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        opts = ProcessorOptions(tracing=tracing, prune_interval=0)
        proc = Processor(conn, "BTR", "w", handler, ledger=SQLiteLedger(db), options=opts)
        task = asyncio.create_task(proc.run())
        await proc.wait_running()
        start = time.perf_counter()
        await proc.wait_until(lambda s: s.applied >= n, timeout=600)
        elapsed = time.perf_counter() - start
        await proc.stop()
        await task
    return n / elapsed


async def main() -> None:
    trace.set_tracer_provider(TracerProvider())
    server = fresh_server()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            best: dict[tuple[str, bool], float] = {}
            for _ in range(ROUNDS):
                for tracing in (False, True):
                    rate = await publish(server.url, N_PUB, tracing)
                    best[("publish", tracing)] = max(best.get(("publish", tracing), 0), rate)
                    rate = await process(server.url, N_PROC, tracing, Path(tmp))
                    best[("process", tracing)] = max(best.get(("process", tracing), 0), rate)
            for path, n in (("publish", N_PUB), ("process", N_PROC)):
                name = "Publisher" if path == "publish" else "Processor + SQLite"
                report(f"{GROUP}-{path}", f"{name}, tracing off", best[(path, False)],
                       baseline=True, n=n, rounds=ROUNDS)  # fmt: skip
                report(f"{GROUP}-{path}", f"{name}, tracing on", best[(path, True)], n=n,
                       rounds=ROUNDS)  # fmt: skip
    finally:
        server.close()
    # The off path's only extra work: two `is not None` tests per publish.
    holder = type("H", (), {"tracer": None})()
    per_test = min(
        timeit.repeat("h.tracer is not None", globals={"h": holder}, number=1_000_000, repeat=5)
    )
    per_test /= 1_000_000
    per_message = 1 / best[("publish", False)]
    report(
        GROUP,
        "tracing off: its per-message test, share of a publish",
        round(100 * 2 * per_test / per_message, 3),
        "%",
        ns_per_test=round(per_test * 1e9, 1),
    )


if __name__ == "__main__":
    asyncio.run(main())
