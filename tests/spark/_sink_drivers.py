"""The sink kill tests' driver runner: the sink's driver job on a classic session or
through Spark Connect, killed at a planted point (tests/spark/test_sink_kill*.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.spark._connect_server import ConnectServer, job_env

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
        return self.run_job(args, kill != "none", spark_log)

    def run_job(self, args: list[str], kills: bool, spark_log: Path | None = None) -> int:
        """Run the job ``args`` (a script and its arguments; under Connect the server's
        URL is appended) to its end (0) or to its planted kill (-9, ``kills``)."""
        if self.mode == "classic":
            return self._classic(args, spark_log)
        if not kills:
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


#: The sink on both Publisher paths and in atomic batches (classic), and under Connect;
#: "fast" and "atomic" refuse to run without what they need (no silent fallback).
_INGEST = [("acks", "classic"), ("fast", "classic"), ("atomic", "classic"), ("acks", "connect")]


def ingest_cases(*, soak: tuple[tuple[str, str], ...] = ()) -> pytest.MarkDecorator:
    """Every ``(ingest, mode)`` case; those in ``soak`` run by ``make soak`` only.

    Each case is two or three driver runs (a JVM each, 100-250 s of CI time): make test
    keeps, across the kill tests, each ingest path and each session kind killed at least
    once; the other cases run by ``make soak``.
    """
    return pytest.mark.parametrize(
        ("ingest", "mode"),
        [
            pytest.param(i, m, id=f"{i}-{m}", marks=(pytest.mark.soak,) if (i, m) in soak else ())
            for i, m in _INGEST
        ],
    )


#: Kill tests of sink features whose code runs the same on both session kinds (the ids'
#: column path, finding the target stream, a reused checkpoint path's commit records):
#: classic only; the kill points themselves run under Connect in ingest_cases' acks-connect
#: cases (a Connect server per kill is 10-20 s of CI time).
CLASSIC = pytest.mark.parametrize("mode", ["classic"])
