"""A Spark Connect server as docs/deploy.md starts one, and Spark jobs run through it.

The server is pyspark's own ``sbin/start-connect-server.sh --wait`` (in the
foreground, so it is stopped by PID), bound to 127.0.0.1 on a free port, its
Python workers on this interpreter with this checkout first on their path.
A process holds either a classic session or a Connect one, so a job meant for
a Connect session runs in a subprocess (:func:`run_connect_job`); the same job
runs in-process on the shared classic session (:mod:`tests.spark._jobs`).

Start-up is what a Connect test costs (10-20 s on the 2-core CI machine), so
the test session shares one server (the ``connect_server`` fixture in
tests/conftest.py, one per xdist worker that needs it); a test that kills a
server (a driver failure under Connect) starts its own.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyspark

from harness import free_port

__all__ = ["ROOT", "ConnectServer", "SparkJobs", "job_env", "run_connect_job"]

ROOT = Path(__file__).resolve().parents[2]


def job_env(**extra: str) -> dict[str, str]:
    """The environment of a Spark job or server: this checkout first, Spark on 127.0.0.1."""
    # The venv may have another checkout installed (worktrees): this one's sources first
    # (after an explicit PYTHONPATH, which a run against other sources sets).
    given = os.environ.get("PYTHONPATH")
    path = os.pathsep.join(p for p in (given, str(ROOT / "src"), str(ROOT)) if p)
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYTHONPATH=path, **extra)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    return env


#: The python whose pyspark starts the Connect server and runs its Python workers, when
#: not this one: a thin client (pyspark-client, no JVM) tests against a full pyspark's
#: server of the same release (the Makefile's test-client).
SERVER_PYTHON_ENV = "ONCESTREAM_CONNECT_SERVER_PYTHON"


def server_spark_home(python: str | None) -> Path:
    """``SPARK_HOME`` of ``python``'s pyspark (this interpreter's when None)."""
    if python is None:
        return Path(pyspark.__file__).parent  # a pip install's SPARK_HOME
    probe = "import os, pyspark; print(os.path.dirname(pyspark.__file__))"
    done = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True)
    return Path(done.stdout.strip())


class ConnectServer:
    """A Connect server started as docs/deploy.md says (:func:`_launcher`), on 127.0.0.1.

    Args:
        work: its working directory, logs, scratch and temp files.
        python: the python whose pyspark runs the server and its workers; default
            ``$ONCESTREAM_CONNECT_SERVER_PYTHON``, else this interpreter.
    """

    def __init__(self, work: Path, python: str | None = None) -> None:
        self.work = work
        self.python = python or os.environ.get(SERVER_PYTHON_ENV) or None
        self.port = free_port()
        self.log = work / "connect-server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The ``sc://`` URL a client connects to."""
        return f"sc://127.0.0.1:{self.port}"

    def start(self, timeout: float = 180.0) -> ConnectServer:
        """Start the server and return once it accepts connections."""
        self.work.mkdir(parents=True, exist_ok=True)
        spark_home = server_spark_home(self.python)
        env = job_env(
            SPARK_HOME=str(spark_home),
            SPARK_LOG_DIR=str(self.work / "logs"),
            SPARK_PID_DIR=str(self.work),
        )
        if self.python is not None:  # its workers run its pyspark, not this one's
            env.update(PYSPARK_PYTHON=self.python, PYSPARK_DRIVER_PYTHON=self.python)
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [
                    *_launcher(spark_home),
                    "--master", "local[2]",
                    "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
                    "--conf", f"spark.connect.grpc.binding.port={self.port}",
                    "--conf", "spark.driver.host=127.0.0.1",
                    "--conf", f"spark.local.dir={self.work / 'spark-local'}",
                    "--driver-java-options", f"-Djava.io.tmpdir={self.work}",
                ],
                env=env, cwd=self.work, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        try:
            self._wait_listening(timeout)
        except BaseException:
            self.kill()
            raise
        return self

    def _wait_listening(self, timeout: float) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"Connect server exited {self.proc.returncode}:\n{self.log_tail()}"
                )
            with socket.socket() as sock:
                sock.settimeout(1.0)
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.2)  # polling a port: no event to await from another process
        raise AssertionError(f"Connect server not listening after {timeout}s:\n{self.log_tail()}")

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the server's log."""
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def kill(self) -> None:
        """SIGKILL the server's process group: the driver fails as a machine would."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM the server's process group (SIGKILL after 30 s)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()


def run_connect_job(remote: str, name: str, kwargs: dict[str, Any], timeout: float = 240) -> Any:
    """Run job ``name`` of :mod:`tests.spark._jobs` in a subprocess holding a Connect session.

    Returns what the job returned (through JSON). Raises AssertionError with the
    job's output when it fails.
    """
    proc = subprocess.run(
        [sys.executable, "-m", "tests.spark._jobs", remote, name, json.dumps(kwargs)],
        cwd=ROOT,
        env=job_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    results = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not results:
        raise AssertionError(
            f"Connect job {name} exited {proc.returncode}:\n"
            f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
        )
    return json.loads(results[-1][len("RESULT ") :])


class SparkJobs:
    """Runs jobs of :mod:`tests.spark._jobs` on one kind of session (the ``spark_job`` fixture).

    Args:
        mode: ``"classic"`` (in this process, on ``session``) or ``"connect"`` (a
            subprocess with a Connect session to ``remote``).
    """

    def __init__(self, mode: str, *, session: Any = None, remote: str | None = None) -> None:
        self.mode = mode
        self.session = session
        self.remote = remote

    def __call__(self, name: str, **kwargs: Any) -> Any:
        """Run job ``name`` with ``kwargs``; call it from a test without a running event loop
        (a job may run one: ``asyncio.run``)."""
        if self.mode == "classic":
            from tests.spark._jobs import JOBS

            return json.loads(json.dumps(JOBS[name](self.session, **kwargs)))
        assert self.remote is not None
        return run_connect_job(self.remote, name, kwargs)


def _launcher(spark_home: Path) -> list[str]:
    """How docs/deploy.md starts a Connect server: ``sbin/start-connect-server.sh --wait``.

    PySpark 4.0's pip package has no ``sbin/``: there the class the script runs is
    started with ``bin/spark-submit``, as the 4.0 note in docs/deploy.md says.
    """
    script = spark_home / "sbin" / "start-connect-server.sh"
    if script.exists():
        return [str(script), "--wait"]
    submit = str(spark_home / "bin" / "spark-submit")
    return [submit, "--class", "org.apache.spark.sql.connect.service.SparkConnectServer"]
