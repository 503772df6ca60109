"""Starting and stopping the process groups tests and tools start (by PID, never by name),
and a free port for them."""

from __future__ import annotations

import os
import pwd
import select
import signal
import subprocess
import threading
from collections import deque
from collections.abc import Sequence
from typing import Any

from oncestream.server._internal import free_ports, popen_tied

__all__ = ["ended", "free_port", "start_logged", "stop_group"]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    return free_ports(1)[0]


def ended(pid: int, timeout: float) -> bool:
    """True once process ``pid`` (any process, not only a child) has exited, a zombie
    counting, within ``timeout`` seconds: waited for on a pidfd, not polled."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([fd], [], [], timeout)
        return bool(readable)
    finally:
        os.close(fd)


def stop_group(proc: subprocess.Popen[bytes], sig: signal.Signals, *, timeout: float) -> None:
    """Send ``sig`` to ``proc``'s process group; SIGKILL it after ``timeout`` seconds."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, sig)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def start_logged(
    argv: Sequence[str],
    ready: str,
    tail: deque[str],
    *,
    timeout: float,
    what: str,
    user: str | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in its own process group; return once a stderr line contains ``ready``.

    Every stderr line goes to ``tail`` (for error messages), also after start-up. The
    process is tied to this one (``popen_tied``): a test worker that dies, by any signal,
    takes it along. ``user``: run it as that user (and its group only; needs root).

    Raises:
        RuntimeError: it exited or printed no ``ready`` line within ``timeout`` seconds
            (it is stopped), with ``what`` and its last lines.
    """
    as_user: dict[str, Any] = {}
    if user is not None:
        as_user = {"user": user, "group": pwd.getpwnam(user).pw_gid, "extra_groups": []}
    proc = popen_tied(
        list(argv),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
        **as_user,
    )
    seen = threading.Event()

    def pump() -> None:
        assert proc.stderr is not None
        for raw in proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            tail.append(line)
            if ready in line:
                seen.set()
        seen.set()  # exited: the caller's check reports it

    threading.Thread(target=pump, daemon=True).start()
    if not seen.wait(timeout) or proc.poll() is not None:
        stop_group(proc, signal.SIGTERM, timeout=15)
        raise RuntimeError(f"{what} did not start:\n" + "\n".join(tail))
    return proc
