"""The sink killed and restarted after the target's duplicate window expired.

See tests/spark/test_sink_kill.py for the kill points and the two session kinds; split
from it so that the suite's two workers share the kill tests.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from harness import make_streams, publish_orders
from oncestream import ConnectOptions, connect
from oncestream.server import NatsServer
from oncestream.streams import StreamSpec
from tests.integration.test_publisher import StoredMsg, read_back
from tests.spark._sink_drivers import Drivers, ingest_cases
from tests.spark._sink_helpers import (
    await_window_passed,
    run_audit,
    stream_state,
)

RETRY_JOB = Path(__file__).with_name("_sink_retry_job.py")
ROOT = Path(__file__).resolve().parents[2]


@ingest_cases(soak=(("acks", "classic"), ("fast", "classic")))  # both: test_sink_kill
def test_killed_outside_dedup_window(
    nats_server: NatsServer, tmp_path: Path, ingest: str, mode: str, drivers: Drivers
) -> None:
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
    assert drivers.run(url, checkpoint, "position", "before:1", ingest=ingest) == -9
    assert stream_state(url, "OUT")["messages"] == 1000
    await_window_passed(url, "OUT", "out.probe")  # the server can no longer help
    assert drivers.run(url, checkpoint, "position", "after:2", ingest=ingest) == -9
    assert stream_state(url, "OUT")["messages"] == 1500
    await_window_passed(url, "OUT", "out.probe")
    assert drivers.run(url, checkpoint, "position", "none", ingest=ingest) == 0
    report = run_audit(url, "IN", "stream:OUT", key="field:order_id")
    assert report.ok, report.to_dict()
    assert stream_state(url, "OUT")["messages"] == 2000


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
