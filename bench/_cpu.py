"""CPU seconds per role of a benchmark's process tree (Linux /proc), sampled in a thread.

On a shared 2-core machine wall-clock rates swing by 2x between identical runs;
CPU seconds per message of each process (JVM, Python workers, nats-server,
producer, Processor) move far less, so A/B comparisons of tunings report both.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

__all__ = ["CpuSampler", "cpu_seconds", "role_of"]

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_ROLES = (
    ("nats-server", "nats-server"),
    ("java", "spark-jvm"),
    ("_pipeline_roles.py producer", "producer"),
    ("_pipeline_roles.py processor", "processor"),
    ("pyspark", "spark-python"),
)


def role_of(cmdline: str) -> str:
    """The role a process plays, from its command line (``driver`` when none matches)."""
    return next((role for key, role in _ROLES if key in cmdline), "driver")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds) of ``pid``; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2 :].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _read(pid: int) -> tuple[int, float, str] | None:
    """(parent pid, CPU seconds, command line) of ``pid``; None when it is gone."""
    stat = _stat(pid)
    return None if stat is None else (*stat, _cmdline(pid))


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) ``pid`` has used so far; 0.0 when it is gone."""
    stat = _stat(pid)
    return stat[1] if stat else 0.0


class CpuSampler:
    """CPU seconds used by this process and its descendants between ``start`` and ``stop``.

    Samples every ``interval`` seconds (a process that exits loses at most its
    last interval). ``stop()`` returns seconds per role (see :func:`role_of`).
    ``also``: processes outside this tree to count as well (a nats-server that
    the parent of a benchmark process started).

    The sampler runs in the measured process, so its own thread's CPU is taken
    off this process's count (it is the benchmark's, not the client's): a sample
    reads every ``/proc/<pid>/stat`` of the machine to find the descendants, and
    each new descendant's command line once.
    """

    def __init__(self, interval: float = 0.25, also: tuple[int, ...] = ()) -> None:
        self.interval = interval
        self.also = also
        self._first: dict[int, float] = {}
        self._last: dict[int, tuple[float, str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def _sample(self) -> None:
        procs = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit() and (info := _stat(int(entry))) is not None:
                procs[int(entry)] = info
        root = os.getpid()
        tree = {root, *self.also}
        children: dict[int, list[int]] = {}
        for pid, (ppid, _) in procs.items():
            children.setdefault(ppid, []).append(pid)
        todo = [root]
        while todo:
            for child in children.get(todo.pop(), []):
                if child not in tree:
                    tree.add(child)
                    todo.append(child)
        for pid in tree & procs.keys():
            cpu = procs[pid][1]
            if pid == root:
                cpu -= self._own
            self._first.setdefault(pid, 0.0 if self._started else cpu)
            known = self._last.get(pid)
            cmd = known[1] if known is not None else _cmdline(pid)
            self._last[pid] = (cpu, cmd)

    _started = False
    #: CPU seconds the sampler thread has used (taken off this process's count).
    _own = 0.0

    def _run(self) -> None:
        began = time.thread_time()
        while not self._stop.wait(self.interval):
            self._sample()
            self._own = time.thread_time() - began

    def start(self) -> CpuSampler:
        if Path("/proc/self/stat").exists():
            self._sample()  # the baseline of processes alive now
            self._started = True
            self._thread.start()
        return self

    def processes(self) -> dict[int, tuple[float, str]]:
        """CPU seconds and command line of each process seen, between start and stop."""
        return {
            pid: (cpu - self._first.get(pid, 0.0), cmd) for pid, (cpu, cmd) in self._last.items()
        }

    def stop(self) -> dict[str, float]:
        if not self._started:
            return {}
        self._stop.set()
        self._thread.join()
        self._sample()
        roles: dict[str, float] = {}
        for pid, (cpu, cmd) in self._last.items():
            role = role_of(cmd)
            roles[role] = roles.get(role, 0.0) + cpu - self._first.get(pid, 0.0)
        return {k: round(v, 2) for k, v in sorted(roles.items(), key=lambda kv: -kv[1])}
