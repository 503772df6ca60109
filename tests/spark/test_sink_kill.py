"""A streaming query killed between writing and committing a micro-batch, then restarted.

The driver runs in a subprocess (tests/spark/_sink_driver_job.py) whose whole
process group is SIGKILLed at the planted point. After the restart the output
stream must hold every input exactly once, whether or not the replay happens
inside the target's duplicate window.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from oncestream import ConnectOptions, connect
from oncestream.server import NatsServer
from oncestream.spark._session import scratch_root
from oncestream.streams import StreamSpec
from tests.integration.test_publisher import StoredMsg, read_back
from tests.spark._sink_helpers import (
    make_streams,
    order_ids_on,
    publish_orders,
    raw_headers_of,
    run_audit,
    stream_state,
)

JOB = Path(__file__).with_name("_sink_driver_job.py")
RETRY_JOB = Path(__file__).with_name("_sink_retry_job.py")
ROOT = Path(__file__).resolve().parents[2]
#: PIDs of the drivers run_job started, in order.
DRIVERS: list[int] = []


def run_job(
    url: str,
    checkpoint: Path,
    ids: str,
    kill: str,
    subject: str = "out.orders",
    spark_log: Path | None = None,
    ingest: str = "auto",
) -> int:
    # This checkout's sources first: the venv may have another checkout installed (worktrees).
    path = os.pathsep.join((str(ROOT / "src"), str(ROOT)))
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYTHONPATH=path)
    if spark_log is not None:
        env["ONCESTREAM_SPARK_LOG"] = str(spark_log)
    proc = subprocess.Popen(
        [sys.executable, str(JOB), url, str(checkpoint), ids, kill, subject, ingest],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    DRIVERS.append(proc.pid)
    try:
        _, err = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait()
        raise
    if proc.returncode not in (0, -9):
        raise AssertionError(err.decode(errors="replace")[-3000:])
    if spark_log is not None:  # Spark's own lines went to the file, none to the console
        assert "NativeCodeLoader" in spark_log.read_text(errors="replace")
        assert b"NativeCodeLoader" not in err and b" WARN " not in err, err[-2000:]
    return proc.returncode


#: The sink on both Publisher paths and in atomic batches; "fast" and "atomic" refuse to run
#: without what they need (no silent fallback).
INGEST = pytest.mark.parametrize("ingest", ["acks", "fast", "atomic"])


@INGEST
def test_killed_before_commit_inside_dedup_window(
    nats_server: NatsServer, tmp_path: Path, ingest: str
) -> None:
    url = nats_server.url
    make_streams(
        url,
        StreamSpec(name="IN", subjects=("in.>",)),
        StreamSpec(
            name="OUT",
            subjects=("out.>",),
            duplicate_window=120.0,
            allow_batched=ingest == "fast",
            allow_atomic=ingest == "atomic",
        ),
    )
    publish_orders(url, "IN", "in.orders", 2000)
    checkpoint = tmp_path / "chk"
    assert run_job(url, checkpoint, "lineage", "before:1", ingest=ingest) == -9
    # The killed JVM's scratch files are in its driver's folder, not loose in /tmp.
    killed = scratch_root() / str(DRIVERS[-1])
    assert any(p.name.startswith("blockmgr-") for p in killed.iterdir()), list(killed.iterdir())
    # Batch 1 was written, neither the sink nor Spark committed it.
    assert stream_state(url, "OUT")["messages"] == 1000
    log = tmp_path / "spark.log"
    assert run_job(url, checkpoint, "lineage", "none", spark_log=log, ingest=ingest) == 0
    assert not killed.exists(), "the next local_session removes a killed driver's scratch"
    report = run_audit(url, "IN", "stream:OUT", key="lineage")
    assert report.ok, report.to_dict()
    assert stream_state(url, "OUT")["messages"] == 2000
    # The atomic path really ran: stored messages keep their batch headers.
    assert (b"Nats-Batch-Id" in raw_headers_of(url, "OUT", 2000)) is (ingest == "atomic")


def test_killed_before_commit_with_a_msg_id_column(nats_server: NatsServer, tmp_path: Path) -> None:
    """The sink's columns path (fast ingest, one subject, a msg_id column) through a kill."""
    url = nats_server.url
    make_streams(
        url,
        StreamSpec(name="IN", subjects=("in.>",)),
        StreamSpec(name="OUT", subjects=("out.>",), duplicate_window=120.0, allow_batched=True),
    )
    publish_orders(url, "IN", "in.orders", 2000)
    checkpoint = tmp_path / "chk"
    assert run_job(url, checkpoint, "column", "before:1", ingest="fast") == -9
    assert stream_state(url, "OUT")["messages"] == 1000
    assert run_job(url, checkpoint, "column", "none", ingest="fast") == 0
    report = run_audit(url, "IN", "stream:OUT", key="field:order_id")
    assert report.ok, report.to_dict()
    assert stream_state(url, "OUT")["messages"] == 2000


@INGEST
def test_killed_outside_dedup_window(nats_server: NatsServer, tmp_path: Path, ingest: str) -> None:
    """Position ids, a 1 s window and restarts after it expired: only the sink's records help."""
    url = nats_server.url
    make_streams(
        url,
        StreamSpec(name="IN", subjects=("in.>",)),
        StreamSpec(
            name="OUT",
            subjects=("out.>",),
            duplicate_window=1.0,
            allow_batched=ingest == "fast",
            allow_atomic=ingest == "atomic",
        ),
    )
    publish_orders(url, "IN", "in.orders", 2000)
    checkpoint = tmp_path / "chk"
    assert run_job(url, checkpoint, "position", "before:1", ingest=ingest) == -9
    assert stream_state(url, "OUT")["messages"] == 1000
    time.sleep(1.5)  # let the 1 s duplicate window expire: the server can no longer help
    assert run_job(url, checkpoint, "position", "after:2", ingest=ingest) == -9
    assert stream_state(url, "OUT")["messages"] == 1500
    time.sleep(1.5)
    assert run_job(url, checkpoint, "position", "none", ingest=ingest) == 0
    report = run_audit(url, "IN", "stream:OUT", key="field:order_id")
    assert report.ok, report.to_dict()
    assert stream_state(url, "OUT")["messages"] == 2000


def test_new_query_on_a_reused_path_killed_between_the_commits(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """Issue 19: a deleted checkpoint's path reused within the commit stream's window.

    Query A runs to the end; its checkpoint is deleted and query B starts on the same
    path (a new query id, batch ids from 0 again, A's commit records and markers still
    inside the records stream's duplicate window). B dies once before the sink's commit
    of batch 0 (no commit record of B exists yet) and once after the sink recorded batch
    1 but before Spark's commit; each restart comes after the target's 1 s window.
    Neither A's control records nor A's rows may swallow B's: 0 duplicated, 0 missing.
    """
    url = nats_server.url
    make_streams(
        url,
        StreamSpec(name="IN", subjects=("in.>",)),
        StreamSpec(name="OUT", subjects=("out.>",), duplicate_window=1.0),
    )
    publish_orders(url, "IN", "in.orders", 2000)
    checkpoint = tmp_path / "chk"
    assert run_job(url, checkpoint, "position", "none", "out.old") == 0
    shutil.rmtree(checkpoint)
    assert run_job(url, checkpoint, "position", "before:0", "out.new") == -9
    assert len(order_ids_on(url, "OUT", "out.new")) == 500
    time.sleep(1.5)  # past the target's window: only the sink's records can help
    assert run_job(url, checkpoint, "position", "after:1", "out.new") == -9
    assert len(order_ids_on(url, "OUT", "out.new")) == 1000
    time.sleep(1.5)
    assert run_job(url, checkpoint, "position", "none", "out.new") == 0
    for subject in ("out.old", "out.new"):
        counts = order_ids_on(url, "OUT", subject)
        duplicated = sorted(k for k, n in counts.items() if n > 1)
        missing = sorted({f"o{i:06d}" for i in range(2000)} - set(counts))
        assert (len(duplicated), len(missing)) == (0, 0), (subject, duplicated[:5], missing[:5])


def test_atomic_batch_write_task_retried_midway_stores_each_row_once(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """Issue 38: a batch-write task of ingest=atomic fails after 16,000 rows and is retried.

    Batch writes keep no commit records: the retry sends the rows again and the
    batches its failed attempt stored are refused (10201) for ids stored before
    the retry began. Shown failing before the stream was searched for them: one
    row per batch, a few hundred rows a second, past the 20 s window.
    """
    url = nats_server.url
    make_streams(
        url,
        StreamSpec(name="OUT", subjects=("out.>",), duplicate_window=20.0, allow_atomic=True),
    )
    marker = tmp_path / "failed-once"
    path = os.pathsep.join((str(ROOT / "src"), str(ROOT)))
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYTHONPATH=path)
    proc = subprocess.run(
        [sys.executable, str(RETRY_JOB), url, str(marker)],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]
    assert marker.exists(), "the planted task failure did not happen"
    counts = Counter(m.msg_id for m in asyncio.run(_read_back(url, "OUT")))
    twice = sorted(str(k) for k, n in counts.items() if n > 1)
    assert (len(counts), sum(counts.values()), len(twice)) == (40_000, 40_000, 0), twice[:5]


async def _read_back(url: str, stream: str) -> list[StoredMsg]:
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        return await read_back(conn, stream)
