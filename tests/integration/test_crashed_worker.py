"""A test that crashes its pytest-xdist worker ends `make test` at once, named, never hung.

pytest-xdist replaces a crashed worker by default, and under ``--dist loadfile``
(3.8) the replacement can be handed the dead worker's finished files as empty
work units: it never reports them done, so the controller waits for ever (a
SIGSEGV in one test hung a 2,118-test run until it was interrupted at 47m47s).
The repository's pytest options (pyproject.toml ``addopts``) turn restarts off:
the run then ends at the crash, non-zero, with the crashing test's node id.

The planted suite below is the shape that hung: files finished by the worker
that later crashes, and the crashing test last. The crash comes once (a flake,
like the SIGSEGV that was seen), and its test starts an embedded nats-server
first: a worker that dies by a signal leaves no server behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import ended

ROOT = Path(__file__).resolve().parents[2]
#: The planted run takes seconds; a run that hangs is stopped here and fails the test.
LIMIT = 120.0

PASSING = "def test_1():\n    pass\n\n\ndef test_2():\n    pass\n\n\ndef test_3():\n    pass\n"
CRASHING = """
import os
import select
import signal
from pathlib import Path

from oncestream.server import NatsServer


def test_crash():
    here = Path(__file__).parent
    mark = here / "crashed"
    if mark.exists():  # the crash of a flake: the test passes when it runs again
        return
    mark.touch()
    server = NatsServer(work_dir=here / "nats").start()
    (here / "server.pid").write_text(str(server.pid))
    os.kill(os.getpid(), signal.{signal})
"""


HUNG = """
import signal
import time

import pytest


@pytest.mark.timeout(1)
def test_crash():
    # SIGALRM blocked: pytest-timeout's signal method cannot end this test (as with a
    # call that never returns to Python); the faulthandler backstop ends the worker.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    time.sleep(600)
"""
#: The repository's hooks, as tests/conftest.py loads them (the backstop of a hung test).
CONFTEST = "from tests._backstop import *  # noqa: F403\n"


def _plant(where: Path, sig: str) -> None:
    where.mkdir()
    (where / "conftest.py").write_text(CONFTEST)
    for name in "abcdefgh":
        (where / f"test_{name}.py").write_text(PASSING)
    # The fewest tests: loadfile schedules the file last.
    crash = HUNG if sig == "hang" else CRASHING.format(signal=sig)
    (where / "test_z_crash.py").write_text(crash)


def _run_suite(where: Path) -> tuple[int | None, str, float]:
    """pytest as `make test` runs it, on the planted suite: (exit code or None, output, s)."""
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-c",
        str(ROOT / "pyproject.toml"),
        "--rootdir",
        str(where),
        "-p",
        "no:cacheprovider",
        "-n",
        "2",
        "--dist",
        "loadfile",
        str(where),
    ]
    began = time.monotonic()
    # Its own session: a run that hangs is stopped with its workers, by process group.
    proc = subprocess.Popen(
        argv,
        cwd=where,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        # The repository on the path for the planted conftest; a short backstop.
        env={
            # Not this run's own xdist worker variables (this test may run in a worker).
            **{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")},
            "COLUMNS": "200",
            "PYTHONPATH": str(ROOT),
            "ONCESTREAM_TEST_BACKSTOP_GRACE": "2",
        },
    )
    try:
        out, _ = proc.communicate(timeout=LIMIT)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        code = None
    return code, out.decode(errors="replace"), time.monotonic() - began


def _left_behind(planted: Path) -> int | None:
    """The planted test's nats-server if it still runs 10 s after the run (then killed, by
    its PID, checked against its command line); None when it ended with its worker."""
    pid_file = planted / "server.pid"
    if not pid_file.exists():
        return None
    pid = int(pid_file.read_text())
    if ended(pid, 10):
        return None
    try:
        ours = str(planted).encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    if ours:
        os.kill(pid, signal.SIGKILL)
    return pid


@pytest.mark.parametrize("sig", ["SIGSEGV", "SIGABRT", "hang"])
def test_a_worker_crash_ends_the_run_naming_the_test(tmp_path: Path, sig: str) -> None:
    """SIGSEGV and SIGABRT (os.abort) end the worker at once; "hang" is a test that its
    timeout cannot end (SIGALRM blocked), ended by the faulthandler backstop."""
    planted = tmp_path / "suite"
    _plant(planted, sig)
    try:
        code, out, took = _run_suite(planted)
    finally:
        left = _left_behind(planted)
    tail = out[-3000:]
    assert code is not None, f"pytest hung after the worker crashed ({LIMIT:g}s):\n{tail}"
    assert code == 1, f"exit {code} after a worker crashed:\n{tail}"
    assert "crashed while running 'test_z_crash.py::test_crash'" in out, tail
    assert "FAILED" in out and "test_z_crash.py::test_crash" in out, tail
    if sig == "hang":
        assert "Timeout (0:00:03)!" in out, tail  # faulthandler's stacks, then the exit
        return
    assert (planted / "server.pid").exists(), tail
    assert left is None, f"nats-server pid {left} outlived its crashed worker"
    print(f"the run ended {took:.1f}s after it started")
