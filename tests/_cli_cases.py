"""Table-driven CLI cases: one row per bad input, run against one shared server.

A row says which command runs, what exists before (files, streams), the exit
code and a fragment of the message it must print, and what must still be true
afterwards (nothing lost, nothing stored twice, nothing deleted). Every row
also checks that no Python traceback reached the output.

Example::

    CASES = [
        Case(
            "publish-missing-stream",
            ["publish", "{tmp}/f.jsonl", "--stream", "NOPE", "-s", "{url}", "--no-progress"],
            exit_code=2,
            message="NOPE",
            setup=lambda env: env.file("f.jsonl", '{"id": 1}\\n'),
        ),
    ]

    @pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
    def test_bad_input(case: Case, cli_env: CliEnv) -> None:
        run_case(case, cli_env)

Args are ``str.format`` templates: ``{url}`` is the shared server's URL and
``{tmp}`` the row's own temporary directory. Rows that must run in a real
process (signals, port binding, the console script itself) set ``subprocess=True``.
A subprocess row may act while the command runs (``during``): wait for a line it
prints, delete a stream, stop a server, send SIGTERM; ``env.defer`` registers
clean-ups (a server the row started) that run however the row ends.
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from oncestream import ConnectOptions, connect
from oncestream._headers import msg_id_of
from oncestream.streams import StreamSpec, ensure_stream

__all__ = ["Case", "CliEnv", "Outcome", "Running", "run_case"]

_TRACEBACK_MARKERS = ("Traceback (most recent call last)", 'File "/')
#: A subprocess row's environment: lines wide enough that rich wraps no message.
_WIDE = {"COLUMNS": "400"}


@dataclass
class Outcome:
    """What one run printed and returned."""

    exit_code: int
    output: str
    exception: BaseException | None = None


@dataclass
class CliEnv:
    """What a row can use: the shared server's URL and a temp directory of its own."""

    url: str
    tmp: Path
    values: dict[str, Any] = field(default_factory=dict)
    cleanups: list[Callable[[], Any]] = field(default_factory=list)

    def defer(self, cleanup: Callable[[], Any]) -> None:
        """Run ``cleanup`` after the row, however it ended (last registered runs first)."""
        self.cleanups.append(cleanup)

    # -- setup helpers -----------------------------------------------------------

    def file(self, name: str, content: str | bytes, mode: int | None = None) -> Path:
        """Create ``tmp/name`` with ``content`` (and chmod ``mode`` if given)."""
        path = self.tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        if mode is not None:
            path.chmod(mode)
        return path

    def run(self, coro_factory: Callable[..., Any]) -> Any:
        """Run ``await coro_factory(conn)`` with a fresh connection to the shared server."""

        async def main() -> Any:
            async with await connect(ConnectOptions(servers=(self.url,))) as conn:
                return await coro_factory(conn)

        return asyncio.run(main())

    def stream(self, name: str, *subjects: str, **kwargs: Any) -> None:
        """Create (or keep) stream ``name`` listening on ``subjects``."""
        spec = StreamSpec(name=name, subjects=subjects or (f"{name.lower()}.>",), **kwargs)
        self.run(lambda conn: ensure_stream(conn, spec))

    def consumer(self, stream: str, durable: str) -> None:
        """Create durable pull consumer ``durable`` on ``stream``."""
        config = {"durable_name": durable, "ack_policy": "explicit", "deliver_policy": "all"}
        body = {"stream_name": stream, "config": config}
        self.run(lambda conn: conn.api(f"CONSUMER.CREATE.{stream}.{durable}", body))

    # -- post-condition helpers --------------------------------------------------

    def messages(self, stream: str) -> int:
        """How many messages ``stream`` holds (-1 when it does not exist)."""

        async def count(conn: Any) -> int:
            try:
                info = await conn.stream_info(stream)
            except Exception:
                return -1
            return int(info["state"]["messages"])

        return int(self.run(count))

    def msg_ids(self, stream: str) -> list[str | None]:
        """The ``Nats-Msg-Id`` of every message of ``stream``, in order, as the server stored it."""

        async def ids(conn: Any) -> list[str | None]:
            info = await conn.stream_info(stream)
            first, last = info["state"]["first_seq"], info["state"]["last_seq"]
            found: list[str | None] = []
            for seq in range(first, last + 1):
                reply = await conn.api(f"STREAM.MSG.GET.{stream}", {"seq": seq})
                found.append(msg_id_of(base64.b64decode(reply["message"].get("hdrs") or "")))
            return found

        return list(self.run(ids))

    def snapshot(self, path: Path | None = None) -> dict[str, bytes]:
        """Relative path -> content of every file under ``path`` (default: tmp)."""
        root = path or self.tmp
        return {
            str(p.relative_to(root)): p.read_bytes()
            for p in sorted(root.rglob("*"))
            if p.is_file() and os.access(p, os.R_OK)
        }


class Running:
    """A subprocess row's command while it runs: what it printed so far, and signals."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        #: (time.monotonic() when read, line) for every line printed (stdout and stderr).
        self.lines: list[tuple[float, str]] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._changed:
                self.lines.append((time.monotonic(), line))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def output(self) -> str:
        with self._changed:
            return "".join(line for _, line in self.lines)

    def wait_for(self, fragment: str | re.Pattern[str], timeout: float = 30.0) -> float:
        """Wait until the output holds ``fragment`` (whitespace folded); when it was read.

        ``fragment`` may be a compiled pattern, searched for in the folded output.

        Raises:
            AssertionError: not printed within ``timeout``, or the command ended first.
        """
        if isinstance(fragment, re.Pattern):
            found: Callable[[str], object] = fragment.search
        else:
            wanted = " ".join(fragment.split())

            def found(text: str) -> bool:
                return wanted in text

        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                text = ""
                for when, line in self.lines:
                    text = f"{text} {' '.join(line.split())}"
                    if found(text):
                        return when
                left = deadline - time.monotonic()
                ended = self.proc.poll() is not None and not self._reader.is_alive()
                if left <= 0 or ended:
                    raise AssertionError(
                        f"{fragment!r} not printed ({'exited' if ended else 'timed out'}):\n"
                        + "".join(line for _, line in self.lines)
                    )
                self._changed.wait(min(left, 0.5))

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the command (by its PID)."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def finish(self, timeout: float) -> Outcome:
        """Wait for the command to exit (SIGKILL after ``timeout``) and return what it did."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            self._reader.join(timeout=10)
            raise AssertionError(
                f"still running after {timeout}s; killed. Output:\n{self.output()}"
            ) from None
        self._reader.join(timeout=10)
        return Outcome(self.proc.returncode, self.output())


@dataclass(frozen=True)
class Case:
    """One row: ``oncestream *args`` must exit with ``exit_code`` and print ``message``.

    Args:
        id: short unique name (the pytest id).
        args: CLI arguments, ``str.format`` templates over ``url`` and ``tmp``.
        exit_code: the expected exit code (0 ok, 1 work failed, 2 bad usage/config).
        message: a fragment the output must contain (case-insensitive, whitespace
            folded, same templates as ``args``); "" for none.
        setup: prepares files/streams before the run (may store values in ``env.values``).
        check: post-condition after the run (assert inside; gets the env and the outcome).
        stdin: text fed to the command's standard input.
        subprocess: run the installed ``oncestream`` in a child process instead of in-process.
        timeout: seconds a subprocess row may take.
        absent: fragments the output must NOT contain (e.g. a secret).
        in_tmp: run with the row's temp directory as the current directory.
        prefix: words put before the installed ``oncestream`` in a subprocess row
            (e.g. ``setpriv`` dropping root's file-permission override).
        during: for a subprocess row, called with the env and the :class:`Running`
            command once it started; it may wait for output, act and signal it.
            The row then waits for the command to exit (``timeout``).
    """

    id: str
    args: Sequence[str]
    exit_code: int
    message: str = ""
    setup: Callable[[CliEnv], Any] | None = None
    check: Callable[[CliEnv, Outcome], Any] | None = None
    stdin: str | None = None
    subprocess: bool = False
    timeout: float = 60.0
    absent: tuple[str, ...] = ()
    in_tmp: bool = False
    prefix: tuple[str, ...] = ()
    during: Callable[[CliEnv, Running], Any] | None = None

    def __post_init__(self) -> None:
        if self.during is not None and not self.subprocess:
            raise ValueError(f"row {self.id}: `during` needs subprocess=True")


def _invoke(case: Case, args: list[str], cwd: Path | None, env: CliEnv) -> Outcome:
    if cwd is not None:
        before = os.getcwd()
        os.chdir(cwd)
        try:
            return _invoke(case, args, None, env)
        finally:
            os.chdir(before)
    if case.during is not None:
        script = Path(sys.executable).parent / "oncestream"
        popen = subprocess.Popen(
            [*case.prefix, str(script), *args],
            stdin=subprocess.PIPE if case.stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **_WIDE},
        )
        if case.stdin is not None:
            assert popen.stdin is not None
            popen.stdin.write(case.stdin)
            popen.stdin.close()
        running = Running(popen)
        try:
            case.during(env, running)
        except BaseException:
            if popen.poll() is None:
                popen.kill()
            running.finish(timeout=10)
            raise
        return running.finish(case.timeout)
    if case.subprocess:
        script = Path(sys.executable).parent / "oncestream"
        proc = subprocess.run(
            [*case.prefix, str(script), *args],
            input=case.stdin,
            capture_output=True,
            text=True,
            timeout=case.timeout,
            check=False,
            env={**os.environ, **_WIDE},
        )
        return Outcome(proc.returncode, proc.stdout + proc.stderr)
    from oncestream.cli import app

    result = CliRunner().invoke(app, args, input=case.stdin)
    output = result.stdout + (result.stderr if result.stderr_bytes is not None else "")
    exc = result.exception
    if isinstance(exc, SystemExit):
        exc = None
    return Outcome(result.exit_code, output, exc)


def run_case(case: Case, env: CliEnv) -> Outcome:
    """Run one row: setup, the command, then every check; returns the outcome.

    Fails when the exit code differs, the message fragment is missing, an
    ``absent`` fragment or a traceback shows up, or the row's ``check`` fails.
    """
    env.tmp.mkdir(parents=True, exist_ok=True)
    try:
        return _run_case(case, env)
    finally:
        while env.cleanups:
            env.cleanups.pop()()


def _run_case(case: Case, env: CliEnv) -> Outcome:
    if case.setup is not None:
        case.setup(env)
    args = [arg.format(url=env.url, tmp=env.tmp, **env.values) for arg in case.args]
    message = case.message.format(url=env.url, tmp=env.tmp, **env.values)
    outcome = _invoke(case, args, env.tmp if case.in_tmp else None, env)
    shown = f"oncestream {' '.join(args)}\n--- exit {outcome.exit_code} ---\n{outcome.output}"
    if outcome.exception is not None:
        import traceback

        trace = "".join(traceback.format_exception(outcome.exception))
        raise AssertionError(f"uncaught exception (a traceback for the user):\n{shown}\n{trace}")
    for marker in _TRACEBACK_MARKERS:
        assert marker not in outcome.output, f"traceback in the output:\n{shown}"
    assert outcome.exit_code == case.exit_code, f"expected exit {case.exit_code}:\n{shown}"
    flat = " ".join(outcome.output.split()).lower()
    assert " ".join(message.split()).lower() in flat, (
        f"expected {message!r} in the output:\n{shown}"
    )
    for fragment in case.absent:
        assert fragment not in outcome.output, f"{fragment!r} must not be printed:\n{shown}"
    if case.check is not None:
        case.check(env, outcome)
    return outcome
