"""Trace context from the Publisher to the Processor's ledger outcome (real SDK, real server).

The Spark hop (source ``headers`` column, sink writing it back) is tests/spark/test_tracing.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from opentelemetry.trace import SpanKind

from oncestream import (
    Connection,
    Processor,
    ProcessorOptions,
    Publisher,
    PublisherOptions,
    SQLiteLedger,
)
from oncestream.ledger import LedgerEntry
from oncestream.tracing._otel import OUTCOME
from tests._tracing import span_exporter
from tests.handlers import record


def _fails_for_7(msg: Any, tx: Any) -> None:
    if int(msg.data) == 7:
        raise ValueError("seven")
    record(msg, tx)


async def test_one_trace_per_record_from_publish_to_the_ledger_outcome(
    conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    exporter = span_exporter()
    await make_stream("JOBS", ("jobs.>",))
    async with Publisher(conn, PublisherOptions(stream="JOBS", tracing=True)) as pub:
        futures = [await pub.publish("jobs.x", b"%d" % n, msg_id=f"j-{n}") for n in range(1, 9)]
        await asyncio.gather(*futures)
    ledger = SQLiteLedger(tmp_path / "l.db")
    with ledger, ledger.transaction() as tx:  # seq 1 was applied by an earlier run
        tx.claim([LedgerEntry("JOBS", 1)])
    opts = ProcessorOptions(
        batch=20, tracing=True, max_deliver=2, backoff=(0.05,), dead_letter_stream="DLQ",
        prune_interval=0,
    )  # fmt: skip
    proc = Processor(conn, "JOBS", "w", _fails_for_7, ledger=ledger, options=opts)
    task = asyncio.create_task(proc.run())
    await proc.wait_until(lambda s: s.applied == 6 and s.dead_lettered == 1)
    await proc.stop()
    await task

    spans = exporter.get_finished_spans()
    producers = {
        s.attributes["messaging.message.id"]: s for s in spans if s.kind == SpanKind.PRODUCER
    }
    consumers = [s for s in spans if s.kind == SpanKind.CONSUMER]
    assert sorted(producers) == [f"j-{n}" for n in range(1, 9)]
    assert len({s.context.trace_id for s in producers.values()}) == 8  # one trace per record
    outcomes: dict[str, list[str]] = {}
    for span in consumers:
        producer = producers[span.attributes["messaging.message.id"]]
        assert span.context.trace_id == producer.context.trace_id
        assert span.parent is not None and span.parent.span_id == producer.context.span_id
        outcomes.setdefault(span.attributes["messaging.message.id"], []).append(
            span.attributes[OUTCOME]
        )
    assert outcomes.pop("j-1") == ["duplicate_suppressed"]
    assert outcomes.pop("j-7") == ["retried", "dead_lettered"]
    assert outcomes == {f"j-{n}": ["applied"] for n in (2, 3, 4, 5, 6, 8)}
    # A fast-ingest batch (the default on streams oncestream creates) names no sequence:
    # the attribute is left out rather than set to 0.
    assert producers["j-3"].attributes.get("messaging.nats.sequence") in (None, 3)


async def test_tracing_off_adds_no_header_and_no_span(conn: Connection, make_stream) -> None:  # type: ignore[no-untyped-def]
    exporter = span_exporter()
    await make_stream("JOBS", ("jobs.>",))
    async with Publisher(conn, PublisherOptions(stream="JOBS")) as pub:
        await (await pub.publish("jobs.x", b"1", msg_id="j-1"))
        await asyncio.gather(*await pub.publish_many(["jobs.x"], [b"2"], ["j-2"]))
    js = conn.nc.jetstream()
    for seq in (1, 2):
        stored = await js.get_msg("JOBS", seq=seq)
        assert "traceparent" not in (stored.headers or {})
    assert exporter.get_finished_spans() == ()


async def test_publish_many_with_tracing_gives_each_message_its_context(
    conn: Connection, make_stream
) -> None:  # type: ignore[no-untyped-def]
    exporter = span_exporter()
    await make_stream("JOBS", ("jobs.>",))
    async with Publisher(conn, PublisherOptions(stream="JOBS", tracing=True)) as pub:
        await asyncio.gather(
            *await pub.publish_many(["jobs.a", "jobs.b"], [b"1", b"2"], ["a", "b"])
        )
    js = conn.nc.jetstream()
    parents = [(await js.get_msg("JOBS", seq=seq)).headers["traceparent"] for seq in (1, 2)]
    spans = exporter.get_finished_spans()
    assert [f"{s.context.span_id:016x}" for s in spans] == [p.split("-")[2] for p in parents]


def test_cli_publish_and_process_trace_with_the_otel_environment(
    nats_server, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """``--trace`` with ``OTEL_TRACES_EXPORTER=console``: spans on stderr, one trace id."""
    import json
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(root), OTEL_TRACES_EXPORTER="console")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", "from oncestream.cli import main; main()", *args,
             "--server", nats_server.url],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    assert cli("stream", "add", "JOBS", "--subjects", "jobs.>").returncode == 0
    (tmp_path / "in.jsonl").write_text('{"id": "a", "n": 1}\n')
    published = cli("publish", "in.jsonl", "--stream", "JOBS", "--subject", "jobs.x",
                    "--id-field", "id", "--trace", "--no-progress")  # fmt: skip
    assert published.returncode == 0, published.stderr
    got = cli("stream", "get", "JOBS", "1", "--json")
    traceparent = json.loads(got.stdout)["headers"]["traceparent"][0]
    trace_id = traceparent.split("-")[1]
    assert f'"trace_id": "0x{trace_id}"' in published.stderr
    env["OTEL_TRACES_EXPORTER"] = "bogus"
    refused = cli("publish", "in.jsonl", "--stream", "JOBS", "--subject", "jobs.x",
                  "--id-field", "id", "--trace", "--no-progress")  # fmt: skip
    assert refused.returncode == 2 and "OTEL_TRACES_EXPORTER must be one of" in refused.stderr


def test_cli_names_an_unknown_otel_propagator(nats_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Issue 38: ``OTEL_PROPAGATORS=bogus`` was a ValueError traceback from OpenTelemetry's
    import; it is bad usage (exit 2) naming the variable, its value and what is installed."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = dict(
        os.environ, PYTHONPATH=str(root), OTEL_TRACES_EXPORTER="none", OTEL_PROPAGATORS="bogus"
    )

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", "from oncestream.cli import main; main()", *args,
             "--server", nats_server.url],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    assert cli("stream", "add", "PROP", "--subjects", "prop.>").returncode == 0
    (tmp_path / "in.jsonl").write_text('{"id": "a"}\n')
    (tmp_path / "noop.py").write_text("def handle(msg, tx):\n    pass\n")
    for args in (
        ("publish", "in.jsonl", "--stream", "PROP", "--subject", "prop.x", "--id-field", "id",
         "--trace", "--no-progress"),
        ("process", "--stream", "PROP", "--consumer", "c", "--handler", "noop:handle",
         "--ledger", "sqlite:///l.db", "--trace"),
    ):  # fmt: skip
        refused = cli(*args)
        assert refused.returncode == 2, refused.stderr
        assert "Traceback" not in refused.stderr
        assert "OTEL_PROPAGATORS='bogus': Propagator bogus not found" in refused.stderr
        assert "installed: baggage, tracecontext" in refused.stderr
