"""A real Prometheus (Debian's binary) scrapes a running pipeline and sees every documented metric.

The pipeline: `oncestream publish` publishing a file at a slow `--rate` (so it
is still running when scraped), `oncestream process` applying, `oncestream
metrics` reporting the streams (a mirror and a sourcing stream among them), and
a Spark driver streaming the stream through the ``jetstream`` source into the
``jetstream`` sink, each with its metrics endpoint. Prometheus scrapes all four
every second; the test asks its HTTP API until every metric docs/metrics.md
lists has been stored, and that no ``oncestream_*`` metric is undocumented.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harness import publish_n, stop_group
from oncestream import Connection
from oncestream.server._internal import free_ports
from oncestream.streams import StreamSource, StreamSpec, ensure_stream
from tests._prometheus import PrometheusServer
from tests.integration._cli import with_conn

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "metrics.md"
CLI = [sys.executable, "-c", "from oncestream.cli import main; main()"]
_ROW = re.compile(r"^\| `(oncestream_[a-z_]+)` \| (counter|gauge|histogram) \|")


def documented() -> dict[str, str]:
    """``{metric name: type}`` of every row of docs/metrics.md's metric tables."""
    return {m[1]: m[2] for line in DOC.read_text().splitlines() if (m := _ROW.match(line))}


def stored_names(name: str, kind: str) -> set[str]:
    """The series names Prometheus stores for a documented metric."""
    if kind == "histogram":
        return {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    return {name}


def test_docs_list_metrics_with_types_and_units() -> None:
    docs = documented()
    assert len(docs) >= 35, sorted(docs)
    for name, kind in docs.items():
        assert name.endswith("_total") == (kind == "counter"), name
        if kind == "histogram":
            assert name.endswith(("_seconds", "_rows")), name
    text = DOC.read_text()
    for name in docs:  # every metric's unit is in the unit column of its row
        row = next(line for line in text.splitlines() if line.startswith(f"| `{name}` "))
        assert row.count("|") >= 5 and row.split("|")[3].strip(), row


async def _streams(conn: Connection) -> None:
    await ensure_stream(conn, StreamSpec(name="ORDERS", subjects=("orders.>",)))
    await ensure_stream(conn, StreamSpec(name="OUT", subjects=("out.>",)))
    await ensure_stream(conn, StreamSpec(name="ORDERS_COPY", mirror=StreamSource(name="ORDERS")))
    await ensure_stream(conn, StreamSpec(name="ALL_ORDERS", sources=(StreamSource(name="ORDERS"),)))
    await publish_n(conn, "orders.n", 500)
    # A partitioned stream for a group member (its partitions' Processors and its own gauges).
    await ensure_stream(
        conn, StreamSpec(name="PARTS", subjects=("parts.*",), partitions=2, partition_key=(1,))
    )
    for key in range(4):
        await publish_n(conn, f"parts.k{key}", 10, start=key * 10)


def _start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            args,
            cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200"),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _tails(logs: dict[str, Path]) -> str:
    return "\n".join(f"--- {name}:\n{path.read_text()[-1500:]}" for name, path in logs.items())


@pytest.mark.timeout(400)
def test_prometheus_scrapes_every_documented_metric(nats_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    url = nats_server.url
    with_conn(url, _streams)
    process_port, publish_port, streams_port, spark_port, member_port = free_ports(5)
    logs = {n: tmp_path / f"{n}.log" for n in ("process", "publish", "metrics", "spark", "member")}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        procs["process"] = _start(
            [*CLI, "process", "--handler", "tests.handlers:record", "--stream", "ORDERS",
             "--consumer", "billing", "--filter-subject", "orders.n",
             "--ledger", f"sqlite:///{tmp_path / 'ledger.db'}", "--progress", "0",
             "--metrics-port", str(process_port), "--server", url],
            logs["process"],
        )  # fmt: skip
        procs["member"] = _start(
            [*CLI, "process", "--handler", "tests.handlers:record", "--stream", "PARTS",
             "--consumer", "parts", "--member", "m1",
             "--ledger", f"sqlite:///{tmp_path}/parts-{{partition}}.db", "--progress", "0",
             "--metrics-port", str(member_port), "--server", url],
            logs["member"],
        )  # fmt: skip
        records = tmp_path / "orders.jsonl"
        records.write_bytes(b"".join(b'{"id": "k%d", "n": %d}\n' % (i, i) for i in range(5000)))
        procs["publish"] = _start(
            [*CLI, "publish", str(records), "--stream", "ORDERS", "--subject", "orders.json",
             "--id-field", "id", "--rate", "50", "--no-progress",
             "--metrics-port", str(publish_port), "--server", url],
            logs["publish"],
        )  # fmt: skip
        procs["metrics"] = _start(
            [*CLI, "metrics", "--metrics-port", str(streams_port), "--server", url],
            logs["metrics"],
        )
        procs["spark"] = _start(
            [sys.executable, "-m", "tests.integration._spark_metrics_job", url, "ORDERS", "OUT",
             str(tmp_path / "checkpoint"), str(spark_port)],
            logs["spark"],
        )  # fmt: skip
        ports = (process_port, publish_port, streams_port, spark_port, member_port)
        targets = [f"127.0.0.1:{p}" for p in ports]
        wanted = {s for n, k in documented().items() for s in stored_names(n, k)}
        with PrometheusServer(targets) as prom:
            try:
                names = prom.wait_for(
                    prom.names,
                    lambda got: wanted <= got,
                    timeout=240,
                    what="every documented metric",
                )
            except AssertionError as exc:
                missing = sorted(wanted - prom.names())
                raise AssertionError(f"missing {missing}\n{_tails(logs)}") from exc
            ours = {n for n in names if n.startswith("oncestream_")}
            assert ours <= wanted, f"undocumented: {sorted(ours - wanted)}"
            # A few values, as Prometheus stored them.
            acked = prom.wait_for(
                lambda: prom.query('oncestream_publisher_acked_total{stream="ORDERS"}'),
                lambda r: bool(r) and float(r[0]["value"][1]) >= 50,
                timeout=60,
                what="50 publishes acked",
            )
            assert acked
            latency = prom.query("oncestream_publisher_ack_duration_seconds_count")
            assert latency and float(latency[0]["value"][1]) > 0, latency
            applied = prom.wait_for(
                lambda: prom.query('sum(oncestream_processor_applied_total{consumer="billing"})'),
                lambda r: bool(r) and float(r[0]["value"][1]) == 500,
                timeout=60,
                what="500 applied",
            )
            assert applied
            grouped = prom.wait_for(
                lambda: prom.query('sum(oncestream_group_active_partitions{group="parts"})'),
                lambda r: bool(r) and float(r[0]["value"][1]) == 2,
                timeout=60,
                what="both partitions applied by the member",
            )
            assert grouped
            mirror = prom.query('oncestream_stream_mirror_lag_messages{stream="ORDERS_COPY"}')
            assert mirror and mirror[0]["metric"]["origin"] == "ORDERS", mirror
            source = prom.query('oncestream_stream_source_lag_messages{stream="ALL_ORDERS"}')
            assert source and source[0]["metric"]["origin"] == "ORDERS", source
            sink = prom.query('oncestream_spark_sink_rows_total{stream="OUT"}')
            assert sink and float(sink[0]["value"][1]) > 0, sink
            up = prom.query("up")
            assert {r["value"][1] for r in up} == {"1"}, up
    finally:
        for proc in procs.values():
            stop_group(proc, signal.SIGTERM, timeout=30)
