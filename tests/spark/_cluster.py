"""A standalone Spark cluster for tests: a master and 1-core workers started from the
pyspark install, bound to 127.0.0.1, each process in its own session (stopped by PID)."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pyspark

from harness import free_port, stop_group

SPARK_HOME = Path(pyspark.__file__).resolve().parent


def wait_for(log: Path, text: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    """Wait until ``text`` appears in ``log`` (bounded; fails if the process exits)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and text in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise AssertionError(f"{log.name}: process exited: {log.read_text()[-2000:]}")
        time.sleep(0.2)
    raise AssertionError(f"{log.name}: {text!r} not seen in {timeout} s")


def start(cmd: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


def stop(proc: subprocess.Popen[bytes]) -> None:
    stop_group(proc, signal.SIGTERM, timeout=20)


@contextmanager
def standalone_cluster(tmp: Path, env: dict[str, str], work_dirs: Sequence[Path]) -> Iterator[str]:
    """A master and one 1-core worker per directory of ``work_dirs``; yields the master URL.

    Logs go to ``tmp`` (``master.log``, ``worker<i>.log``); every process is
    stopped by its PID (process group) on exit.
    """
    (tmp / "logs").mkdir(exist_ok=True)
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    port = free_port()
    master_url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        log = tmp / "master.log"
        master = start(
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
             "--port", str(port), "--webui-port", str(free_port())],
            log, env,
        )  # fmt: skip
        procs.append(master)
        wait_for(log, "I have been elected leader", master, 90)
        for i, work in enumerate(work_dirs):
            work.mkdir(parents=True, exist_ok=True)
            worker = start(
                [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                 "--cores", "1", "--memory", "1g", "--webui-port", str(free_port()),
                 "--work-dir", str(work), master_url],
                tmp / f"worker{i}.log", env,
            )  # fmt: skip
            procs.append(worker)
        for i, worker in enumerate(procs[1:]):
            wait_for(tmp / f"worker{i}.log", "Successfully registered with master", worker, 90)
        yield master_url
    finally:
        for proc in reversed(procs):  # by PID (process group of each)
            stop(proc)
