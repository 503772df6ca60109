"""Orchestration of ``oncestream demo``: server, producer, Spark pipeline, faults, audit."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import threading
import time
import warnings
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .._connection import Connection, connect
from .._errors import ConfigError, OncestreamError
from .._options import ConnectOptions, parse_duration, parse_rate
from .._sync import run_sync
from ..audit import AuditReport, OutputSpec, audit
from ..server import JetStreamConfig, NatsServer, ServerConfig
from ..streams import StreamSpec, ensure_stream
from ._datadir import DemoDir
from ._pipeline import OUTPUTS, Pipeline
from ._plot import check_plot_path, save_latency_plot
from ._producer import ProducerReport, produce
from ._workload import Expected

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = ["DemoConfig", "DemoResult", "run_demo"]

log = logging.getLogger(__name__)

_MAX_RESTARTS = 8

#: The last line of a Python traceback: ``package.module.ErrorName: message``.
_PY_ERROR = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*: \S")


def stop_reason(text: str) -> str:
    """One line saying why a streaming query stopped, from its exception's text.

    Spark puts a Python worker's whole traceback inside its message; the line
    worth showing is the error at the traceback's end, after Spark's own head.

    Example::

        >>> stop_reason("[ERR] commit failed: Traceback (most recent call last):\n"
        ...             '  File "x.py", line 1, in f\nOperationTimeout: timed out')
        '[ERR] commit failed: OperationTimeout: timed out'
    """
    lines = [line.rstrip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return "stopped"
    head = lines[0].replace("Traceback (most recent call last):", "").strip()
    if len(lines) > 1 and head != lines[0].strip():
        # The Python traceback ends where Spark's own "JVM stacktrace:" begins.
        end = next((i for i, line in enumerate(lines) if line.startswith("JVM stacktrace")), None)
        errors = [line for line in lines[1:end] if _PY_ERROR.match(line)]
        if errors:
            head = f"{head} {errors[-1]}"
    return head[:300]


@dataclass(frozen=True, kw_only=True)
class DemoConfig:
    """What ``oncestream demo`` runs.

    Args:
        messages: orders to generate.
        hard_faults: also SIGKILL and restart the nats-server mid-run.
        keep: keep the data directory (streams, checkpoints, Parquet) afterwards.
        data_dir: where to put it (default: a new temporary directory). A new or
            empty directory, or a previous demo's (see :mod:`oncestream.demo._datadir`);
            only what the demo creates is ever deleted.
        rate: orders per second the producer publishes (None: as fast as it can).
        timeout: seconds before the demo gives up waiting for the pipeline.
        plot: where to write the end-to-end latency plot (PNG; must not exist).
            Default: ``latency.png`` in the data directory when ``keep``, else none.
        output: where the enriched orders land: ``parquet`` (the ORDERS_ENRICHED
            stream, and the revenue as a Parquet file), ``delta`` or ``iceberg`` (a
            table in the data directory, which the audit reads).
    """

    messages: int = 200_000
    hard_faults: bool = False
    keep: bool = False
    data_dir: Path | None = None
    rate: float | None = 5000.0
    timeout: float = 600.0
    plot: Path | None = None
    output: str = "parquet"

    def __post_init__(self) -> None:
        if self.output not in OUTPUTS:
            raise ConfigError(f"output must be one of {', '.join(OUTPUTS)}, got {self.output!r}")
        if self.plot is not None:
            check_plot_path(self.plot)
        if self.messages < 1000:
            raise ConfigError(f"messages must be >= 1000, got {self.messages!r}")
        if self.rate is not None:
            object.__setattr__(self, "rate", parse_rate("rate (orders per second)", self.rate))
        if parse_duration("timeout", self.timeout) <= 0:
            raise ConfigError(f"timeout must be > 0, got {self.timeout!r}")
        object.__setattr__(self, "timeout", parse_duration("timeout", self.timeout))


@dataclass
class DemoResult:
    """Everything the summary shows."""

    config: DemoConfig
    data_dir: Path
    producer: ProducerReport
    audit: AuditReport
    stored_orders: int
    revenue: list[dict[str, Any]] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    query_restarts: int = 0
    pipeline_seconds: float = 0.0
    total_seconds: float = 0.0
    revenue_path: str = ""
    #: The latency plot written, or why none was.
    plot_path: str = ""
    plot_note: str = ""

    @property
    def revenue_ok(self) -> bool:
        return bool(self.revenue) and all(row["ok"] for row in self.revenue)

    @property
    def ok(self) -> bool:
        return self.audit.ok and self.revenue_ok and self.stored_orders == self.producer.orders


class _Demo:
    def __init__(self, config: DemoConfig, console: Console) -> None:
        self.config = config
        self.console = console
        self.faults: list[str] = []
        self.restarts = 0
        self.queries: dict[str, StreamingQuery] = {}

    def say(self, text: str) -> None:
        """One line, ``[HH:MM:SS] text``: never wrapped, no source path (a log, a pipe)."""
        line = f"[{time.strftime('%H:%M:%S')}] {text}"
        self.console.print(line, soft_wrap=True, markup=False, highlight=False)

    def event(self, text: str) -> None:
        self.say(text)
        if text.startswith("fault:"):
            self.faults.append(text.removeprefix("fault: "))

    # -------------------------------------------------------------- helpers

    async def _counts(self, conn: Connection) -> tuple[int, int]:
        orders = (await conn.stream_info("ORDERS"))["state"]["messages"]
        enriched = (await conn.stream_info("ORDERS_ENRICHED"))["state"]["messages"]
        return int(orders), int(enriched)

    def _revenue_rows(self, path: str) -> int:
        import pyarrow.parquet as pq

        try:
            return int(sum(pq.read_table(path, columns=["orders"]).column(0).to_pylist()))
        except Exception:
            return -1  # absent, or being rewritten right now

    def _start(self, pipeline: Pipeline, name: str) -> None:
        starter = pipeline.start_enriched if name == "enriched" else pipeline.start_revenue
        self.queries[name] = starter()

    def _kill_query(self, pipeline: Pipeline) -> None:
        # Stop while a micro-batch is running, so the restart replays a half-written batch.
        deadline = time.monotonic() + 10
        query = self.queries["enriched"]
        while time.monotonic() < deadline and not query.status.get("isTriggerActive"):
            time.sleep(0.02)
        query.stop()
        self.event("fault: killed streaming query 'enriched' in the middle of a micro-batch")
        self._start(pipeline, "enriched")
        self.restarts += 1
        self.say("restarted query 'enriched' from its checkpoint")

    def _stop_all(self) -> None:
        # Between micro-batches, so the final stop does not abort a batch being committed.
        for query in self.queries.values():
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and query.status.get("isTriggerActive"):
                time.sleep(0.05)
            query.stop()
        self.queries.clear()

    def _revive(self, pipeline: Pipeline) -> None:
        for name, query in list(self.queries.items()):
            if query.isActive:
                continue
            reason = stop_reason(str(query.exception() or "stopped"))
            if self.restarts >= _MAX_RESTARTS:
                raise OncestreamError(f"query {name!r} keeps failing: {reason}")
            self.say(f"query '{name}' stopped ({reason}); restarting from its checkpoint")
            self._start(pipeline, name)
            self.restarts += 1

    # -------------------------------------------------------------- main

    def run(self) -> DemoResult:
        config = self.config
        started = time.monotonic()
        demo_dir = DemoDir.prepare(config.data_dir)
        data_dir = demo_dir.path
        server = NatsServer(
            ServerConfig(
                server_name="demo", jetstream=JetStreamConfig(store_dir=data_dir / "jetstream")
            ),
            work_dir=data_dir / "server",
        )
        spark = None
        try:
            server.start()
            self.say(f"nats-server ready at {server.url} (pid {server.pid})")
            options = ConnectOptions(servers=(server.url,), reconnect_wait=0.2)
            conn = run_sync(connect(options))
            for spec in (
                StreamSpec(name="ORDERS", subjects=("orders.*",)),
                StreamSpec(name="ORDERS_ENRICHED", subjects=("enriched.orders.>",)),
            ):
                run_sync(ensure_stream(conn, spec))
            self.say("streams ORDERS and ORDERS_ENRICHED created (duplicate window 2 min)")
            # The summary reports what matters; Spark's and the sink's own logs would
            # print over the progress bars (a killed query logs its aborted batch).
            os.environ.setdefault("ONCESTREAM_SINK_LOG", "ERROR")
            logging.getLogger("py4j").setLevel(logging.WARNING)
            # pyspark warns about pandas 3 on import; nothing the demo can act on.
            warnings.filterwarnings("ignore", message="PySpark does not yet fully support")
            from ..spark import local_session

            spark = local_session("oncestream-demo")
            spark.sparkContext.setLogLevel("OFF")
            _warm_up(spark)
            self.say(f"Spark {spark.version} local[2] ready (Python workers warmed up)")
            pipeline = Pipeline(
                spark=spark,
                url=server.url,
                data_dir=str(data_dir),
                max_per_trigger=max(2000, config.messages // 8),
                output=config.output,
            )
            result = self._run_pipeline(server, options, conn, pipeline)
            result.data_dir = data_dir
            self._plot(result, data_dir)
            result.total_seconds = time.monotonic() - started
            return result
        finally:
            for query in self.queries.values():
                try:
                    query.stop()
                except Exception:
                    pass
            if spark is not None:
                spark.stop()
            server.close()
            if not config.keep:
                demo_dir.cleanup()

    def _plot(self, result: DemoResult, data_dir: Path) -> None:
        config = self.config
        if config.output != "parquet":
            # Latency is output store time minus input store time, per message: a stream's.
            result.plot_note = f"no latency plot: the {config.output} table keeps no time per row"
            return
        path = config.plot or (data_dir / "latency.png" if config.keep else None)
        if path is None:
            result.plot_note = "run with --keep or --plot PATH for a latency plot"
            return
        points = result.audit.outputs[0].latency_points if result.audit.outputs else []
        note = save_latency_plot(points, path, f"end-to-end latency, {len(points):,} orders")
        if note is None:
            result.plot_path = str(path)
        else:
            result.plot_note = f"no latency plot: {note}"

    def _run_pipeline(
        self, server: NatsServer, options: ConnectOptions, conn: Connection, pipeline: Pipeline
    ) -> DemoResult:
        config, total = self.config, self.config.messages
        expected = Expected()
        produced = [0]
        outcome: dict[str, Any] = {}
        first_slice = min(2000, total // 10)
        warm = threading.Event()

        async def gate() -> None:
            await asyncio.to_thread(warm.wait, config.timeout)

        def producer_thread() -> None:
            try:
                outcome["report"] = asyncio.run(
                    produce(
                        options,
                        "ORDERS",
                        total,
                        expected,
                        rate=config.rate,
                        progress=lambda n: produced.__setitem__(0, n),
                        first_slice=first_slice,
                        gate=gate,
                    )
                )
            except BaseException as exc:
                outcome["error"] = exc

        self._start(pipeline, "enriched")
        self._start(pipeline, "revenue")
        where = pipeline.table_output or "ORDERS_ENRICHED"
        self.say(f"streaming queries 'enriched' (-> {where}) and 'revenue' (-> Parquet) started")
        thread = threading.Thread(target=producer_thread, name="demo-producer", daemon=True)
        pipeline_started = time.monotonic()
        thread.start()
        killed_query = killed_server = False
        deadline = time.monotonic() + config.timeout
        columns = (
            TextColumn("{task.description:<28}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=self.console, transient=False) as progress:
            t_pub = progress.add_task("publish -> ORDERS", total=total)
            target = {"delta": "Delta table", "iceberg": "Iceberg table"}.get(
                config.output, "ORDERS_ENRICHED"
            )
            t_enr = progress.add_task(f"ORDERS -> {target}", total=total)
            t_rev = progress.add_task("ORDERS -> revenue Parquet", total=total)
            while True:
                if time.monotonic() > deadline:
                    raise OncestreamError(f"the pipeline did not finish within {config.timeout:g}s")
                if "error" in outcome:
                    raise OncestreamError(f"producer failed: {outcome['error']}")
                try:
                    orders, enriched = run_sync(self._counts(conn), timeout=10)
                except (OncestreamError, TimeoutError):
                    orders, enriched = -1, -1  # server restarting
                if pipeline.table_output is not None:
                    enriched = pipeline.enriched_rows()
                revenue_rows = self._revenue_rows(pipeline.revenue_path)
                progress.update(t_pub, completed=produced[0])
                if enriched >= 0:
                    progress.update(t_enr, completed=enriched)
                if revenue_rows >= 0:
                    progress.update(t_rev, completed=revenue_rows)
                if not killed_query and enriched >= total * 0.35:
                    killed_query = True
                    self._kill_query(pipeline)
                if config.hard_faults and not killed_server and enriched >= total * 0.65:
                    killed_server = True
                    server.kill()
                    self.event("fault: SIGKILLed the nats-server")
                    server.restart()
                    self.say(f"nats-server restarted on the same port and store (pid {server.pid})")
                if not warm.is_set() and min(enriched, revenue_rows) >= first_slice:
                    warm.set()
                    self.say(
                        f"pipeline produced its first {first_slice:,} outputs; "
                        "the producer continues at its rate"
                    )
                self._revive(pipeline)
                producer_done = "report" in outcome
                if (
                    producer_done
                    and orders == total
                    and enriched >= total
                    and revenue_rows >= total
                ):
                    break
                time.sleep(0.5)
        pipeline_seconds = time.monotonic() - pipeline_started
        warm.set()
        thread.join(timeout=30)
        self._stop_all()
        self.say("pipeline caught up; queries stopped; auditing")
        output = OutputSpec.parse(pipeline.table_output or "stream:ORDERS_ENRICHED")
        report = run_sync(audit(conn, "ORDERS", [output], key="field:order_id"))
        stored = int(run_sync(conn.stream_info("ORDERS"))["state"]["messages"])
        run_sync(conn.close())
        return DemoResult(
            config=config,
            data_dir=Path(pipeline.data_dir),
            producer=outcome["report"],
            audit=report,
            stored_orders=stored,
            revenue=_check_revenue(pipeline.revenue_path, expected),
            faults=self.faults,
            query_restarts=self.restarts,
            pipeline_seconds=pipeline_seconds,
            revenue_path=pipeline.revenue_path,
        )


def _warm_up(spark: Any) -> None:
    """Start the Python workers and import what the pipeline's tasks need, before timing."""

    def touch(batches: Any) -> Any:
        from oncestream.spark._internal import warm_worker

        warm_worker()

        yield from batches

    spark.range(0, 2, numPartitions=2).mapInArrow(touch, "id long").collect()


def _check_revenue(path: str, expected: Expected) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    table = pq.read_table(path).to_pylist()
    found = {row["region"]: (int(row["orders"]), Decimal(row["revenue"])) for row in table}
    rows = []
    for region in sorted(set(found) | set(expected.by_region)):
        want = expected.by_region.get(region, (0, Decimal("0.00")))
        got = found.get(region, (0, Decimal("0.00")))
        rows.append(
            {
                "region": region,
                "expected_orders": want[0],
                "orders": got[0],
                "expected_revenue": str(want[1]),
                "revenue": str(got[1]),
                "ok": want == got,
            }
        )
    return rows


def run_demo(config: DemoConfig | None = None, console: Console | None = None) -> DemoResult:
    """Run the whole demo and return its result (the caller prints the summary).

    Raises:
        OncestreamError: when a component fails for good or the pipeline times out.
    """
    return _Demo(config or DemoConfig(), console or Console(stderr=True)).run()
