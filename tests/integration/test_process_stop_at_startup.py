"""Ctrl-C and SIGTERM at any moment of `oncestream process`'s start-up: exit 0, promptly.

Each case starts the real command (a subprocess, so a signal is a real signal) against a
real nats-server and signals it at a moment it is held at: while it imports the handler
(a module that waits on a socket), while it connects (a relay holds the client's CONNECT),
and as it begins processing. A Ctrl-C that landed before the command's own handlers were
installed used to cancel the main task, and that cancellation could be swallowed on the
way (Python 3.11's asyncio.wait_for, nats-py's flush): the process ran on, unstoppable.
"""

from __future__ import annotations

import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harness import stop_group
from oncestream.server import NatsServer
from oncestream.server._internal import popen_tied
from tests._wiretap import WireTap
from tests.integration._cli import cli, publish

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "from oncestream.cli import main; main()"]
#: What tests/_startup_gate.py writes when it starts waiting (not imported here: it would wait).
READY = "gate: importing the handler"
#: Seconds the command may take to exit after the signal (it stops before its next step).
STOP_BOUND = 10.0
#: Seconds the command may take to reach the moment it is held at (imports, under load).
START_BOUND = 90.0


@pytest.fixture
def stream(nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.chdir(ROOT)
    url = nats_server.url
    assert cli(url, "stream", "add", "S", "--subjects", "s.>").exit_code == 0
    publish(url, "s.x", [str(i).encode() for i in range(1, 21)])
    return url


class Command:
    """``oncestream process ...`` as a subprocess of its own group; its stderr read line by line.

    Tied to the test (``popen_tied``): a test worker that dies takes it along.
    """

    def __init__(self, url: str, db: Path, handler: str, *, sigint_ignored: bool = False) -> None:
        # A background job of a script starts with SIGINT ignored (kept across exec).
        shell = ["sh", "-c", 'trap "" INT; exec "$@"', "sh"] if sigint_ignored else []
        argv = [*shell, *CLI, "process", "--handler", handler, "--stream", "S", "--consumer", "c",
                "--ledger", f"sqlite:///{db}", "--progress", "0", "--server", url]  # fmt: skip
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self.proc = popen_tied(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
        )
        self._pump = threading.Thread(target=self._read, daemon=True)
        self._pump.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            with self._changed:
                self.lines.append(raw.decode(errors="replace").rstrip())
                self._changed.notify_all()

    @property
    def text(self) -> str:
        with self._changed:
            return "\n".join(self.lines)

    def wait_line(self, part: str) -> None:
        """Return once a stderr line holds ``part`` (fail after START_BOUND seconds)."""
        with self._changed:
            seen = self._changed.wait_for(
                lambda: any(part in line for line in self.lines) or not self._pump.is_alive(),
                timeout=START_BOUND,
            )
        assert seen and self.proc.poll() is None, f"no {part!r} line:\n{self.text}"

    def signal(self, *signals: int) -> float:
        """Send ``signals`` back to back; the time the last one was sent."""
        for sig in signals:
            self.proc.send_signal(sig)
        return time.monotonic()

    def exits_cleanly(self, since: float) -> None:
        """The command exits 0 within STOP_BOUND seconds of ``since``, saying it stopped."""
        try:
            rc = self.proc.wait(timeout=max(0.0, since + STOP_BOUND - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"still running {STOP_BOUND}s after the signal:\n{self.text}")
        self._pump.join(timeout=STOP_BOUND)  # stderr to its end
        assert rc == 0, f"exit {rc}:\n{self.text}"
        assert "stopped: applied=" in self.text and "Traceback" not in self.text, self.text

    def kill(self) -> None:
        stop_group(self.proc, signal.SIGKILL, timeout=10)


@pytest.mark.parametrize(
    ("signals", "sigint_ignored"),
    [
        ((signal.SIGINT,), False),
        ((signal.SIGINT,), True),
        ((signal.SIGTERM, signal.SIGTERM, signal.SIGTERM), False),
        ((signal.SIGINT,) * 2, False),
    ],
    ids=["ctrl-c", "sigint-started-ignored", "sigterm-x3", "ctrl-c-x2"],
)
def test_signal_while_importing_the_handler(
    stream: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    signals: tuple[int, ...],
    sigint_ignored: bool,
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as gate:
        monkeypatch.setenv("ONCESTREAM_TEST_GATE", str(gate.getsockname()[1]))
        gate.settimeout(START_BOUND)
        command = Command(
            stream, tmp_path / "l.db", "tests._startup_gate:handle", sigint_ignored=sigint_ignored
        )
        try:
            command.wait_line(READY)
            held, _ = gate.accept()  # connected before READY was written
            sent = command.signal(*signals)
            held.close()  # the import goes on
            command.exits_cleanly(sent)
        finally:
            command.kill()
    assert not (tmp_path / "l.db").exists()  # it stopped before opening the ledger


def test_ctrl_c_while_connecting(stream: str, nats_server: NatsServer, tmp_path: Path) -> None:
    held, release = threading.Event(), threading.Event()

    def hold_connect(chunk: bytes) -> None:
        if b"CONNECT" in chunk and not held.is_set():
            held.set()
            release.wait(STOP_BOUND + START_BOUND)

    with WireTap(nats_server.port) as tap:
        tap.on_request = hold_connect
        command = Command(tap.url(), tmp_path / "l.db", "tests.handlers:record")
        try:
            assert held.wait(START_BOUND), f"the command never sent CONNECT:\n{command.text}"
            command.exits_cleanly(command.signal(signal.SIGINT))
        finally:
            release.set()
            command.kill()
    assert "stop asked for while connecting" in command.text


def test_ctrl_c_twice_as_processing_begins(stream: str, tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    command = Command(stream, db, "tests.handlers:record")
    try:
        command.wait_line("processing S/c")
        command.exits_cleanly(command.signal(signal.SIGINT, signal.SIGINT))
    finally:
        command.kill()
    with sqlite3.connect(db) as ledger:
        tables = {name for (name,) in ledger.execute("SELECT name FROM sqlite_master")}
        rows = ledger.execute("SELECT id FROM effects").fetchall() if "effects" in tables else []
    ids = [row[0] for row in rows]
    assert len(ids) == len(set(ids)) and set(ids) <= set(range(1, 21))  # nothing applied twice
