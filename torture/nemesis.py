"""Seeded fault schedules and their execution.

A schedule is a list of :class:`Fault` (start offset, duration, kind, target)
drawn from ``random.Random(seed)`` only, so a trial reruns exactly from its seed
(the schedule; the interleaving with the workload is up to the kernel). Faults
overlap freely across targets; a target already under a fault is not hit again
until it heals.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

PRODUCERS = ("pub", "sess", "cli")
PROCESSORS = ("lite", "pg1", "pg2")


@dataclass(frozen=True)
class Fault:
    start: float
    duration: float
    kind: str
    target: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def fault_menu(topology_kind: str) -> list[tuple[str, str]]:
    """(kind, target) pairs that apply to a trial kind."""
    menu: list[tuple[str, str]] = []
    for proc in (*PRODUCERS, *PROCESSORS):
        menu += [("kill", proc), ("pause", proc)]
    if topology_kind == "single":
        menu += [
            ("server-kill", "s1"),
            ("server-pause", "s1"),
            ("disk-full", "s1"),
            ("partition", "s1"),
            ("degrade", "s1"),
        ]
    elif topology_kind == "cluster":
        for role in ("leader", "follower"):
            menu += [("server-kill", role), ("server-pause", role)]
        menu += [("partition", "leader"), ("partition", "follower"), ("degrade", "follower")]
    else:
        menu += [
            ("server-kill", "leaf"),
            ("server-pause", "leaf"),
            ("partition", "leaf"),
            ("degrade", "leaf"),
        ]
    return menu


def schedule(seed: int, topology_kind: str, duration: float, count: int) -> list[Fault]:
    """``count`` faults in ``[2s, duration - 3s]``, 1-5 s long, seeded."""
    rng = random.Random(seed)
    menu = fault_menu(topology_kind)
    kinds = sorted({kind for kind, _ in menu})
    faults = []
    for _ in range(count):
        kind = kinds[rng.randrange(len(kinds))]  # every kind equally likely, then a target
        targets = [t for k, t in menu if k == kind]
        target = targets[rng.randrange(len(targets))]
        start = rng.uniform(2.0, max(2.5, duration - 6.0))
        faults.append(Fault(round(start, 3), round(rng.uniform(1.0, 5.0), 3), kind, target))
    return sorted(faults, key=lambda f: f.start)


class Worker:
    """A worker subprocess (``python -m torture.workers`` or the CLI), restartable."""

    def __init__(self, name: str, argv: list[str], log: Path, *, restart_until_done: bool) -> None:
        self.name, self.argv, self.log = name, argv, log
        self.restart_until_done = restart_until_done
        self.proc: subprocess.Popen[bytes] | None = None
        self.exits: list[int] = []
        self.done = False
        self.paused = False

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=Path(__file__).resolve().parent.parent,
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=10)
        self.paused = False

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (processors finish their batch), SIGKILL after ``timeout``."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def supervise(self, in_fault: bool) -> None:
        """Restart after an unplanned exit (recorded); mark producers done on exit 0."""
        if self.proc is None or self.proc.poll() is None or in_fault:
            return
        code = self.proc.returncode
        if code == 0 and self.restart_until_done:
            self.done = True
            return
        if code != -signal.SIGKILL:
            self.exits.append(code)
        if not self.done:
            self.start()


def python_argv(role: str, cfg: dict[str, Any]) -> list[str]:
    import json

    return [sys.executable, "-m", "torture.workers", role, json.dumps(cfg)]
