"""Stopping the process groups tests start (by PID, never by name)."""

from __future__ import annotations

import os
import signal
import subprocess


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
