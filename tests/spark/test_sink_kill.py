"""A streaming query killed between writing and committing a micro-batch, then restarted.

The driver is killed at the planted point as a machine failure would kill it,
on a classic session and under Spark Connect. Classic: the driver is a
subprocess (tests/spark/_sink_driver_job.py) whose whole session is
SIGKILLed. Connect: the driver is the Connect server, where the sink's commit
runs; each killed run has a server of its own (SIGKILLed with its Python
workers; the client sees its query fail), and the restart runs on the test
session's shared server. After the restart the output stream must hold every
input exactly once, whether or not the replay happens inside the target's
duplicate window. Restarts "after the window" wait for the server to drop the
window's ids (``await_window_passed``), not for a fixed time.

Under Connect the tests run once per kill point and id kind; the ingest paths
(``acks``/``fast``/``atomic``) run in the executors' tasks alike under both, so
they run classic only (a Connect server start is 10-20 s of CI time per kill).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import make_streams, order_ids_on, publish_orders
from oncestream.server import NatsServer
from oncestream.spark._session import scratch_root
from oncestream.streams import StreamSpec
from tests.spark._connect_server import ConnectServer, job_env
from tests.spark._sink_helpers import (
    await_window_passed,
    raw_headers_of,
    run_audit,
    stream_state,
)

JOB = Path(__file__).with_name("_sink_driver_job.py")
#: PIDs of the drivers run_job started, in order.
DRIVERS: list[int] = []


class Drivers:
    """Runs the sink's driver job on a classic session or through Spark Connect."""

    def __init__(self, mode: str, request: pytest.FixtureRequest, work: Path) -> None:
        self.mode = mode
        self.request = request
        self.work = work
        self.started = 0
        self.clients = 0

    def run(
        self,
        url: str,
        checkpoint: Path,
        ids: str,
        kill: str,
        subject: str = "out.orders",
        spark_log: Path | None = None,
        ingest: str = "auto",
        stream: str = "OUT",
    ) -> int:
        """Run the job to its end (0) or to the planted kill (-9)."""
        args = [str(JOB), url, str(checkpoint), ids, kill, subject, ingest, stream]
        if self.mode == "classic":
            return self._classic(args, spark_log)
        if kill == "none":
            server: ConnectServer = self.request.getfixturevalue("connect_server")
            code, err = self._client([*args, server.url])
            if code != 0:
                raise AssertionError(f"{err[-3000:]}\nserver log:\n{server.log_tail()}")
            return code
        self.started += 1
        server = ConnectServer(self.work / f"connect-{self.started}").start()
        try:
            code, err = self._client([*args, server.url], server)
            assert server.proc is not None
            if server.proc.poll() is None:
                raise AssertionError(
                    f"the Connect server survived the planted kill (client exit {code}):\n"
                    f"{err[-3000:]}\nserver log:\n{server.log_tail()}"
                )
            return -9 if server.proc.returncode == -9 else server.proc.returncode
        finally:
            server.kill()

    def _client(self, args: list[str], killed: ConnectServer | None = None) -> tuple[int, str]:
        """Run the Connect client to its end, or until the server ``killed`` dies.

        A client whose server died retries for minutes (pyspark's retry policy): it is
        stopped once the server is gone.
        """
        self.clients += 1
        err_path = self.work / f"client-{self.clients}.err"
        with err_path.open("wb") as err:
            client = subprocess.Popen(
                [sys.executable, *args], env=job_env(), stdout=subprocess.DEVNULL, stderr=err,
                start_new_session=True,
            )  # fmt: skip
        try:
            deadline = time.monotonic() + 240
            while client.poll() is None and time.monotonic() < deadline:
                if killed is not None and killed.proc is not None:
                    try:
                        killed.proc.wait(timeout=0.5)  # the server's end is the event
                    except subprocess.TimeoutExpired:
                        continue
                    break
                try:
                    client.wait(timeout=0.5)
                except subprocess.TimeoutExpired:
                    continue
        finally:
            if client.poll() is None:
                os.killpg(client.pid, 9)
            client.wait(timeout=30)
        return client.returncode, err_path.read_text(errors="replace")

    @staticmethod
    def _classic(args: list[str], spark_log: Path | None) -> int:
        env = job_env()
        if spark_log is not None:
            env["ONCESTREAM_SPARK_LOG"] = str(spark_log)
        proc = subprocess.Popen(
            [sys.executable, *args],
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


@pytest.fixture
def drivers(request: pytest.FixtureRequest, tmp_path: Path) -> Drivers:
    """The sink's driver job, on the session kind the test's ``mode`` names."""
    return Drivers(request.node.callspec.params["mode"], request, tmp_path)


#: The sink on both Publisher paths and in atomic batches (classic), and under Connect;
#: "fast" and "atomic" refuse to run without what they need (no silent fallback).
INGEST = pytest.mark.parametrize(
    ("ingest", "mode"),
    [("acks", "classic"), ("fast", "classic"), ("atomic", "classic"), ("acks", "connect")],
)
BOTH = pytest.mark.parametrize("mode", ["classic", "connect"])


@INGEST
def test_killed_before_commit_inside_dedup_window(
    nats_server: NatsServer, tmp_path: Path, ingest: str, mode: str, drivers: Drivers
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
    assert drivers.run(url, checkpoint, "lineage", "before:1", ingest=ingest) == -9
    killed = scratch_root() / str(DRIVERS[-1]) if mode == "classic" else None
    if killed is not None:
        # The killed JVM's scratch files are in its driver's folder, not loose in /tmp.
        assert any(p.name.startswith("blockmgr-") for p in killed.iterdir()), list(killed.iterdir())
    # Batch 1 was written, neither the sink nor Spark committed it.
    assert stream_state(url, "OUT")["messages"] == 1000
    log = tmp_path / "spark.log" if mode == "classic" else None
    assert drivers.run(url, checkpoint, "lineage", "none", spark_log=log, ingest=ingest) == 0
    if killed is not None:
        assert not killed.exists(), "the next local_session removes a killed driver's scratch"
    report = run_audit(url, "IN", "stream:OUT", key="lineage")
    assert report.ok, report.to_dict()
    assert stream_state(url, "OUT")["messages"] == 2000
    # The atomic path really ran: stored messages keep their batch headers.
    assert (b"Nats-Batch-Id" in raw_headers_of(url, "OUT", 2000)) is (ingest == "atomic")


@BOTH
def test_killed_before_commit_with_a_msg_id_column(
    nats_server: NatsServer, tmp_path: Path, mode: str, drivers: Drivers
) -> None:
    """The sink's columns path (fast ingest, one subject, a msg_id column) through a kill."""
    url = nats_server.url
    make_streams(
        url,
        StreamSpec(name="IN", subjects=("in.>",)),
        StreamSpec(name="OUT", subjects=("out.>",), duplicate_window=120.0, allow_batched=True),
    )
    publish_orders(url, "IN", "in.orders", 2000)
    checkpoint = tmp_path / "chk"
    assert drivers.run(url, checkpoint, "column", "before:1", ingest="fast") == -9
    assert stream_state(url, "OUT")["messages"] == 1000
    assert drivers.run(url, checkpoint, "column", "none", ingest="fast") == 0
    report = run_audit(url, "IN", "stream:OUT", key="field:order_id")
    assert report.ok, report.to_dict()
    assert stream_state(url, "OUT")["messages"] == 2000


@INGEST
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


@BOTH
def test_without_the_stream_option_a_restart_after_the_window_adds_nothing(
    nats_server: NatsServer, tmp_path: Path, mode: str, drivers: Drivers
) -> None:
    """Issue 37: the protection beyond the window does not depend on option ``stream``.

    The sink is not told its target; it finds OUT, the one stream that captures
    ``out.orders``. Killed after writing batch 1 and restarted once OUT's 1 s
    window has dropped those ids, the restart sends none of them again: the task
    reads what the killed attempt stored. Before, without ``stream`` the window
    check and this read were off, and the restart stored batch 1 a second time.
    """
    url = nats_server.url
    make_streams(
        url,
        StreamSpec(name="IN", subjects=("in.>",)),
        StreamSpec(name="OUT", subjects=("out.>",), duplicate_window=1.0),
    )
    publish_orders(url, "IN", "in.orders", 2000)
    checkpoint = tmp_path / "chk"
    assert drivers.run(url, checkpoint, "position", "before:1", stream="-") == -9
    assert stream_state(url, "OUT")["messages"] == 1000
    await_window_passed(url, "OUT", "out.probe")
    assert drivers.run(url, checkpoint, "position", "none", stream="-") == 0
    counts = order_ids_on(url, "OUT", "out.orders")
    duplicated = sorted(k for k, n in counts.items() if n > 1)
    missing = sorted({f"o{i:06d}" for i in range(2000)} - set(counts))
    assert (len(duplicated), len(missing)) == (0, 0), (duplicated[:5], missing[:5])
    assert stream_state(url, "OUT")["messages"] == 2000


@BOTH
def test_new_query_on_a_reused_path_killed_between_the_commits(
    nats_server: NatsServer, tmp_path: Path, mode: str, drivers: Drivers
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
    assert drivers.run(url, checkpoint, "position", "none", "out.old") == 0
    shutil.rmtree(checkpoint)
    assert drivers.run(url, checkpoint, "position", "before:0", "out.new") == -9
    assert len(order_ids_on(url, "OUT", "out.new")) == 500
    await_window_passed(url, "OUT", "out.probe")  # only the sink's records can help
    assert drivers.run(url, checkpoint, "position", "after:1", "out.new") == -9
    assert len(order_ids_on(url, "OUT", "out.new")) == 1000
    await_window_passed(url, "OUT", "out.probe")
    assert drivers.run(url, checkpoint, "position", "none", "out.new") == 0
    for subject in ("out.old", "out.new"):
        counts = order_ids_on(url, "OUT", subject)
        duplicated = sorted(k for k, n in counts.items() if n > 1)
        missing = sorted({f"o{i:06d}" for i in range(2000)} - set(counts))
        assert (len(duplicated), len(missing)) == (0, 0), (subject, duplicated[:5], missing[:5])
