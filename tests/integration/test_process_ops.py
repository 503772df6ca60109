"""`process --start-seq/--start-time/--new-only` and `--metrics-port` (scraped over HTTP)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest

from harness import free_port, publish_n
from oncestream import ConfigError, Processor, ProcessorOptions, SQLiteLedger
from oncestream.cli._process_extras import RecentRate
from oncestream.process._setup import setup_consumer
from oncestream.read import StartPosition
from tests.handlers import record
from tests.integration._cli import cli

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "from oncestream.cli import main; main()"]


async def _fill(conn, make_stream, n: int) -> None:  # type: ignore[no-untyped-def]
    await make_stream("P", ("p.>",))
    await publish_n(conn, "p.x", n, start=1)


async def test_start_positions(conn, make_stream, tmp_path) -> None:  # type: ignore[no-untyped-def]
    await _fill(conn, make_stream, 10)
    options = ProcessorOptions(start=StartPosition(seq=5), batch=5)
    proc = Processor(conn, "P", "from5", record, ledger=SQLiteLedger(str(tmp_path / "a.db")),
                     options=options)  # fmt: skip
    task = asyncio.create_task(proc.run())
    await proc.wait_until(lambda s: s.applied >= 6)
    await proc.stop()
    assert (await task).applied == 6

    new = await setup_consumer(
        conn, "P", "new", ProcessorOptions(start=StartPosition(new_only=True))
    )
    assert new.ack_wait > 0
    assert (await conn.consumer_info("P", "new"))["num_pending"] == 0
    moment = datetime(2000, 1, 1, tzinfo=UTC)
    await setup_consumer(conn, "P", "since", ProcessorOptions(start=StartPosition(time=moment)))
    info = await conn.consumer_info("P", "since")
    assert info["config"]["deliver_policy"] == "by_start_time" and info["num_pending"] == 10
    # the same start again is accepted; no start accepts any existing consumer
    await setup_consumer(conn, "P", "since", ProcessorOptions(start=StartPosition(time=moment)))
    await setup_consumer(conn, "P", "from5", ProcessorOptions())
    with pytest.raises(ConfigError, match=r"P/from5 already exists and starts at start seq 5"):
        await setup_consumer(conn, "P", "from5", ProcessorOptions(start=StartPosition(seq=3)))


def test_process_refuses_another_start(nats_server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = nats_server.url
    assert cli(url, "stream", "add", "P", "--subjects", "p.>").exit_code == 0
    assert cli(url, "consumer", "add", "P", "w", "--deliver", "new").exit_code == 0
    base = ["process", "--handler", "tests.handlers:record", "--stream", "P", "--consumer", "w",
            "--ledger", f"sqlite:///{tmp_path}/x.db"]  # fmt: skip
    refused = cli(url, *base, "--start-seq", "3")
    assert refused.exit_code == 2, refused.stderr
    text = " ".join(refused.stderr.split())
    assert "P/w" in text and "new messages only" in text and "start seq 3" in text
    for bad in (["--start-seq", "0"], ["--start-time", "someday"],
                ["--start-seq", "2", "--new-only"]):  # fmt: skip
        result = cli(url, *base, *bad)
        assert result.exit_code == 2, (bad, result.stderr)


def test_recent_rate_forgets_old_activity() -> None:
    rate = RecentRate(window=10)
    rate.update(0, now=0)
    assert rate.update(1000, now=10) == 100
    assert rate.update(1000, now=20) == 0  # idle: the rate falls to 0, not 1000/20
    assert rate.update(1500, now=25) == pytest.approx(500 / 15, rel=0.01)


def _scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        match = re.match(r'^(oncestream_\w+)\{[^}]*consumer="w"[^}]*\} (\S+)$', line)
        if match and 'le="' not in line:
            values[match.group(1)] = float(match.group(2))
        le = re.match(r'^(oncestream_\w+_bucket)\{.*le="\+Inf".*\} (\S+)$', line)
        if le:
            values[le.group(1)] = float(le.group(2))
    return values


async def test_metrics_endpoint_while_processing(nats_server, conn, make_stream, tmp_path) -> None:  # type: ignore[no-untyped-def]
    await _fill(conn, make_stream, 200)
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200")
    proc = await asyncio.create_subprocess_exec(
        *CLI, "process", "--handler", "tests.handlers:record_unless_7", "--stream", "P",
        "--consumer", "w", "--ledger", f"sqlite:///{tmp_path}/m.db", "--batch", "50",
        "--max-deliver", "1", "--dead-letter-stream", "P_DLQ", "--backoff", "100ms",
        "--metrics-port", str(port), "--server", nats_server.url,
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        async with asyncio.timeout(60):
            while True:
                await asyncio.sleep(0.2)
                assert proc.returncode is None, await proc.communicate()
                try:
                    values = await asyncio.to_thread(_scrape, port)
                except OSError:
                    continue  # not listening yet
                if (
                    values.get("oncestream_processor_applied_total", 0) >= 172
                    and values.get("oncestream_processor_dead_lettered_total", 0) >= 28
                    and values.get("oncestream_consumer_ack_pending_messages") == 0
                ):
                    break
        assert values["oncestream_processor_applied_total"] == 172
        assert values["oncestream_processor_dead_lettered_total"] == 28
        assert values["oncestream_processor_failed_total"] == 28
        assert values["oncestream_processor_duplicates_suppressed_total"] == 0
        assert values["oncestream_consumer_pending_messages"] == 0
        assert values["oncestream_consumer_ack_floor_sequence"] == 200
        # every call, failed ones and a batch's re-runs one message at a time included
        assert values["oncestream_processor_handler_duration_seconds_count"] >= 200
        assert values["oncestream_processor_batch_duration_seconds_count"] >= 4
        assert values["oncestream_processor_ledger_commit_duration_seconds_count"] >= 4
        info = await conn.consumer_info("P", "w")
        assert info["num_pending"] == 0 and info["ack_floor"]["stream_seq"] == 200
        proc.send_signal(signal.SIGTERM)
        _out, err = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.communicate()
    assert proc.returncode == 0, err.decode()


def test_metrics_port_in_use_exit_2(nats_server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = nats_server.url
    assert cli(url, "stream", "add", "P", "--subjects", "p.>").exit_code == 0
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = cli(url, "process", "--handler", "tests.handlers:record", "--stream", "P",
                     "--consumer", "w", "--ledger", f"sqlite:///{tmp_path}/x.db",
                     "--metrics-port", str(port))  # fmt: skip
    assert result.exit_code == 2 and f"127.0.0.1:{port}" in result.stderr, result.stderr


async def test_metrics_helper_for_publisher_and_processor(conn, make_stream, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from prometheus_client import CollectorRegistry

    from oncestream import Publisher, PublisherOptions
    from oncestream.metrics import instrument, serve_metrics

    await make_stream("P", ("p.>",))
    registry = CollectorRegistry()
    server = serve_metrics(0, registry=registry)
    try:
        async with Publisher(conn, PublisherOptions(stream="P")) as pub:
            pub_metrics = instrument(pub, registry)
            for i in range(1, 31):
                await pub.publish("p.x", b"%d" % i, msg_id=f"m{i}")
            await pub.flush()
        proc = Processor(conn, "P", "w", record, ledger=SQLiteLedger(str(tmp_path / "h.db")))
        proc_metrics = instrument(proc, registry)
        task = asyncio.create_task(proc.run())
        await proc.wait_until(lambda s: s.applied >= 30)

        def scrape() -> str:
            with urllib.request.urlopen(server.url, timeout=10) as response:
                return str(response.read().decode())

        text = await asyncio.to_thread(scrape)
        await proc.stop()
        await task
        assert 'oncestream_publisher_acked_total{stream="P"} 30.0' in text
        assert 'oncestream_processor_applied_total{consumer="w",stream="P"} 30.0' in text
        assert 'oncestream_consumer_pending_messages{consumer="w",stream="P"} 0.0' in text
        pub_metrics.close()
        proc_metrics.close()
        assert "oncestream_publisher_acked_total{" not in await asyncio.to_thread(scrape)
    finally:
        server.close()


async def test_applied_total_counts_this_process_as_its_help_says(
    conn, make_stream, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """A restarted worker's counter starts at 0, as docs/metrics.md and the HELP line say."""
    from prometheus_client import CollectorRegistry, generate_latest

    from oncestream import Publisher, PublisherOptions
    from oncestream.metrics import instrument

    await make_stream("Q", ("q.>",))
    ledger = str(tmp_path / "q.db")
    scraped = []
    async with Publisher(conn, PublisherOptions(stream="Q")) as pub:
        for first, last in ((1, 7), (8, 10)):  # 7 for the first worker, 3 for the next
            for i in range(first, last + 1):
                await pub.publish("q.x", b"%d" % i, msg_id=f"q{i}")
            await pub.flush()
            registry = CollectorRegistry()
            proc = Processor(conn, "Q", "w", record, ledger=SQLiteLedger(ledger))
            metrics = instrument(proc, registry)
            task = asyncio.create_task(proc.run())
            await proc.wait_caught_up(timeout=30)
            scraped.append(generate_latest(registry).decode())
            await proc.stop()
            await task
            metrics.close()
    assert "Counted by this process since it started." in scraped[1]
    applied = [
        line.rsplit(" ", 1)[1]
        for text in scraped
        for line in text.splitlines()
        if line.startswith("oncestream_processor_applied_total{")
    ]
    assert applied == ["7.0", "3.0"]
