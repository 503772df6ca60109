"""CPU quotas for bench processes: a cgroup v1 ``cpu`` folder per process (root only).

Each capped process gets its own folder under ``/sys/fs/cgroup/cpu/oncestream-bench-<pid>/``
with ``cpu.cfs_quota_us / cpu.cfs_period_us`` = its share of a core, so that one
machine stands in for several hosts of that size. The process is started by a
shell that first writes its own pid into the folder's ``cgroup.procs`` and then
``exec``s the command: it is capped from its first instruction, threads and
children included. :meth:`CpuCaps.close` (also run at exit and on SIGTERM) stops
nothing but removes the folders; folders left by a bench that crashed (their
owner pid gone) are removed when the next one starts.

Example::

    with CpuCaps() as caps:
        proc = caps.popen(["python", "member.py"], share=0.2)
"""

from __future__ import annotations

import atexit
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

__all__ = ["CPU_ROOT", "CpuCaps"]

CPU_ROOT = Path("/sys/fs/cgroup/cpu")
_PREFIX = "oncestream-bench-"
_PERIOD_US = 100_000


def _remove(folder: Path) -> None:
    """Remove a bench cgroup folder and its children (processes left in it are moved out)."""
    if not folder.is_dir():
        return
    for child in sorted(folder.iterdir()):
        if child.is_dir():
            _remove(child)
    for pid in (
        (folder / "cgroup.procs").read_text().split() if (folder / "cgroup.procs").exists() else ()
    ):
        try:
            (CPU_ROOT / "cgroup.procs").write_text(pid)  # back to the root: uncapped
        except OSError:
            pass
    for _ in range(50):
        try:
            folder.rmdir()
            return
        except OSError:
            time.sleep(0.1)  # a process leaving it is still exiting


def clean_stale() -> list[str]:
    """Remove bench folders whose owning bench process is gone; their names."""
    removed = []
    if not CPU_ROOT.is_dir():
        return removed
    for folder in CPU_ROOT.glob(f"{_PREFIX}*"):
        owner = folder.name[len(_PREFIX) :]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            _remove(folder)
            removed.append(folder.name)
    return removed


class CpuCaps:
    """The cgroup folders of one bench run; processes started capped."""

    def __init__(self) -> None:
        if os.geteuid() != 0:
            raise SystemExit("CPU caps need root (cgroup v1 folders under /sys/fs/cgroup/cpu)")
        if not (CPU_ROOT / "cpu.cfs_quota_us").exists():
            raise SystemExit(f"{CPU_ROOT} has no cpu.cfs_quota_us: not a cgroup v1 cpu hierarchy")
        clean_stale()
        self.base = CPU_ROOT / f"{_PREFIX}{os.getpid()}"
        self.base.mkdir(exist_ok=True)
        self._count = 0
        self._closed = False
        atexit.register(self.close)
        self._previous = signal.signal(signal.SIGTERM, self._on_term)

    def _on_term(self, signum: int, frame: FrameType | None) -> None:
        self.close()
        raise SystemExit(128 + signum)

    def folder(self, share: float) -> Path:
        """A new folder capped at ``share`` of one core."""
        self._count += 1
        folder = self.base / f"p{self._count}"
        folder.mkdir()
        (folder / "cpu.cfs_period_us").write_text(str(_PERIOD_US))
        (folder / "cpu.cfs_quota_us").write_text(str(max(1000, int(share * _PERIOD_US))))
        return folder

    def popen(self, command: list[str], *, share: float, **kwargs: Any) -> subprocess.Popen[str]:
        """Start ``command`` inside a new folder capped at ``share`` of a core."""
        folder = self.folder(share)
        shell = (
            f"echo $$ > {shlex.quote(str(folder / 'cgroup.procs'))} && exec {shlex.join(command)}"
        )
        return subprocess.Popen(["/bin/sh", "-c", shell], text=True, **kwargs)

    def throttled(self) -> dict[str, float]:
        """Seconds each folder's processes were throttled (waiting for their quota)."""
        found = {}
        for folder in sorted(self.base.glob("p*")):
            stat = dict(
                line.split() for line in (folder / "cpu.stat").read_text().splitlines() if line
            )
            found[folder.name] = int(stat.get("throttled_time", 0)) / 1e9
        return found

    def close(self) -> None:
        """Remove every folder of this run (idempotent)."""
        if self._closed:
            return
        self._closed = True
        _remove(self.base)
        if signal.getsignal(signal.SIGTERM) == self._on_term:
            signal.signal(signal.SIGTERM, self._previous)

    def __enter__(self) -> CpuCaps:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
