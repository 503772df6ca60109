"""`oncestream server` in a real process: ready, stopped, killed, and what it leaves behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

CLI = str(Path(sys.executable).parent / "oncestream")


def _start(tmp: Path, *args: str) -> tuple[subprocess.Popen[str], int, int, Path]:
    """Start the command with TMPDIR=tmp, read until ready: (process, port, server pid, store)."""
    tmp.mkdir(exist_ok=True)
    proc = subprocess.Popen(
        [CLI, "server", "--port", "-1", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "COLUMNS": "300", "TMPDIR": str(tmp)},
        start_new_session=True,  # its own group: a hung command goes with its server
    )
    assert proc.stdout is not None
    port = pid = 0
    deadline = time.monotonic() + 30
    for line in proc.stdout:
        if match := re.search(r"ready at nats://[\d.]+:(\d+) \(pid (\d+)\)", line):
            port, pid = int(match.group(1)), int(match.group(2))
        if match := re.search(r"store: (\S+)", line):
            return proc, port, pid, Path(match.group(1))
        assert time.monotonic() < deadline, "server did not report ready"
    raise AssertionError("the command ended before reporting ready")


def _finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    # The command's own worst case is 25 s (SIGTERM, 10 s, SIGKILL, 10 s, its log reader 5 s).
    try:
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return proc.returncode, out


def test_sigterm_stops_cleanly_and_leaves_no_temporary_directory(tmp_path: Path) -> None:
    proc, _, _, store = _start(tmp_path / "t")
    assert "oncestream-server-" in str(store) and store.is_dir()
    proc.send_signal(signal.SIGTERM)
    code, out = _finish(proc)
    assert code == 0 and "stopped" in out, out
    assert not store.parent.exists() and not list((tmp_path / "t").iterdir())


def test_killed_child_server_is_reported_and_exits_1(tmp_path: Path) -> None:
    proc, _, pid, store = _start(tmp_path / "t")
    os.kill(pid, signal.SIGKILL)
    code, out = _finish(proc)
    assert code == 1, out
    assert "killed by SIGKILL" in out and "Traceback" not in out, out
    assert not store.parent.exists() and not list((tmp_path / "t").iterdir())


def test_given_store_dir_is_kept_and_no_temporary_directory_left(tmp_path: Path) -> None:
    store = tmp_path / "store"
    proc, _, _, shown = _start(tmp_path / "t", "--store-dir", str(store))
    assert shown == store
    proc.send_signal(signal.SIGINT)
    code, out = _finish(proc)
    assert code == 0, out
    assert store.is_dir() and not list((tmp_path / "t").iterdir())


@pytest.mark.parametrize("attempt", range(4))
def test_port_taken_fails_every_time(attempt: int, tmp_path: Path) -> None:
    proc, port, _, _ = _start(tmp_path / "t")
    (tmp_path / "t2").mkdir()
    try:
        out = subprocess.run(
            [CLI, "server", "--port", str(port), "--store-dir", str(tmp_path / "s")],
            capture_output=True, text=True, timeout=60, check=False,
            env={**os.environ, "TMPDIR": str(tmp_path / "t2")},
        )  # fmt: skip
        text = " ".join((out.stdout + out.stderr).split())
        assert out.returncode == 1, text
        assert f"port {port}" in text and "already in use" in text, text
        assert "ready" not in out.stdout and "Traceback" not in text
        assert not list((tmp_path / "t2").iterdir())
    finally:
        proc.send_signal(signal.SIGTERM)
        _finish(proc)
