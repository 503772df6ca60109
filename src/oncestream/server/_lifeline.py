"""Child processes that end with this process, however it ends (on Linux).

A server that :class:`~oncestream.server.NatsServer` (or the test harness)
starts must not outlive the Python process that started it. A process killed
by a signal (SIGKILL, a SIGSEGV, the OOM killer) runs no ``atexit`` handler, so
the kernel does it: ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` in the child makes its
parent's death kill it. Two details decide whether that holds:

- The "parent" is the *thread* that forked the child, not the process
  (prctl(2)): a server started from ``asyncio.to_thread`` would be killed when
  the loop's executor retires that thread. Every tied child is therefore forked
  by one daemon thread that ends only with the process (:class:`_Spawner`).
- The prctl runs after ``exec``, in a launcher: CPython's ``preexec_fn`` runs
  Python code between fork and exec, which its documentation calls not safe
  in a process with threads (this one has several). The launcher is util-linux
  ``setpriv --pdeathsig KILL`` (then ``/bin/sh`` checks that the parent had not
  died before the prctl, and ``exec``s the command), or, without a setpriv that
  knows ``--pdeathsig``, the interpreter itself (``python -I -S``) doing the
  same. Either way the command keeps the child's PID.

Elsewhere than Linux the child is started as it is (no parent-death signal).
"""

from __future__ import annotations

import concurrent.futures
import errno
import os
import queue
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["launcher", "popen_tied"]

#: Run by ``sh -c`` after setpriv's prctl: $0 is the parent's PID, "$@" the command.
_SH_CHECK = 'test "$PPID" = "$0" && exec "$@"'
#: The launcher without setpriv: python -I -S -c _PY_LAUNCHER PARENT_PID COMMAND...
_PY_LAUNCHER = (
    "import ctypes, os, signal, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "if libc.prctl(1, int(signal.SIGKILL), 0, 0, 0) != 0:\n"  # PR_SET_PDEATHSIG
    "    sys.exit(f'prctl(PR_SET_PDEATHSIG): {os.strerror(ctypes.get_errno())}')\n"
    "if os.getppid() != int(sys.argv[1]):\n"  # the parent died before the prctl
    "    os._exit(1)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)

_launcher_lock = threading.Lock()
_launcher: tuple[str, ...] | None = None


def _setpriv() -> str | None:
    """util-linux setpriv if it knows ``--pdeathsig`` (2.33+), else None."""
    found = shutil.which("setpriv")
    if found is None or not os.path.exists("/bin/sh"):
        return None
    try:
        usage = subprocess.run(
            [found, "--help"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return found if "--pdeathsig" in usage.stdout else None


def launcher() -> tuple[str, ...]:
    """The argv prefix that ties a command to this process (empty off Linux).

    Append the command's argv; the PID is the command's own once it runs.
    """
    global _launcher
    if not sys.platform.startswith("linux"):
        return ()
    with _launcher_lock:
        if _launcher is None:
            setpriv = _setpriv()
            if setpriv is not None:
                _launcher = (setpriv, "--pdeathsig", "KILL", "--", "/bin/sh", "-c", _SH_CHECK)
            else:
                _launcher = (sys.executable, "-I", "-S", "-c", _PY_LAUNCHER)
        return _launcher


class _Spawner:
    """One daemon thread that forks every tied child: it lives as long as the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[tuple[concurrent.futures.Future[Any], Callable[[], Any]]]
        self._jobs = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def call(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` run on the spawner thread; its result, or its exception raised here."""
        if threading.current_thread() is self._thread:
            return fn()
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._serve, name="oncestream-spawner", daemon=True
                )
                self._thread.start()
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._jobs.put((done, fn))
        return done.result()

    def _serve(self) -> None:
        while True:
            done, fn = self._jobs.get()
            try:
                done.set_result(fn())
            except BaseException as exc:  # handed to the caller
                done.set_exception(exc)

    def forked(self) -> None:
        """In a forked child only the forking thread exists: start a new spawner there."""
        self._lock = threading.Lock()
        self._jobs = queue.SimpleQueue()
        self._thread = None


_SPAWNER = _Spawner()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_SPAWNER.forked)


def popen_tied(argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(argv, **kwargs)`` for a child that is SIGKILLed when this process
    ends, by any means (Linux; elsewhere a plain Popen).

    ``argv`` must be a list of arguments (no ``shell=True``, no ``executable``) and
    ``preexec_fn`` is refused (the point is not to need one). With ``user=`` the
    launcher runs as that user (setpriv and /bin/sh are world-executable).

    Example::

        proc = popen_tied(["nats-server", "-c", "server.conf"], stderr=subprocess.PIPE)
    """
    for refused in ("shell", "executable", "preexec_fn"):
        if kwargs.get(refused):
            raise ValueError(f"popen_tied does not take {refused}=")
    prefix = launcher()
    if not prefix:
        return subprocess.Popen(list(argv), **kwargs)
    # As Popen would: a command that is not there fails here, not as the launcher's exit 127.
    path = (kwargs.get("env") or os.environ).get("PATH", os.defpath)
    if shutil.which(argv[0], path=path) is None:
        raise FileNotFoundError(errno.ENOENT, "no such executable", argv[0])
    command = [*prefix, str(os.getpid()), *argv]  # the launcher checks the parent's PID
    proc: subprocess.Popen[bytes] = _SPAWNER.call(lambda: subprocess.Popen(command, **kwargs))
    return proc
