"""Seeded fault schedules and their execution.

A schedule is a list of :class:`Fault` (start offset, duration, kind, target)
drawn from the campaign seed and the trial's number only, so a trial reruns
exactly from its seed and index (the schedule; the interleaving with the workload
is up to the kernel). Which kinds a trial gets is a seeded cycle through its
topology's menu carried over the trials (:func:`cycle_kind`), so 100 trials
inject every kind a known number of times. Faults overlap freely; one that needs
something already under a fault (the same process, node or link) waits until it
heals (see ``Trial``), and is skipped only when the fault phase ends first.
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


#: Every fault kind of the topologies' menus (the Spark kinds are added where Spark runs).
PAIR_KINDS = ("partition-pair", "degrade-pair")


def fault_menu(topology_kind: str) -> list[tuple[str, str]]:
    """(kind, target) pairs that apply to a trial kind.

    A pair target ``a|b`` names both ends of one link (``leader``/``follower``
    are resolved when the fault starts); ``all`` is every node of the cluster.
    """
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
    elif topology_kind.startswith("cluster"):
        for role in ("leader", "follower"):
            menu += [("server-kill", role), ("server-pause", role)]
        menu += [("partition", "leader"), ("partition", "follower"), ("degrade", "follower")]
        for pair in ("leader|follower", "follower|follower"):
            menu += [("partition-pair", pair), ("degrade-pair", pair)]
        menu += [("cluster-kill", "all")]
    else:
        menu += [
            ("server-kill", "leaf"),
            ("server-pause", "leaf"),
            ("partition", "leaf"),
            ("degrade", "leaf"),
            ("partition-pair", "leaf|hub"),
            ("degrade-pair", "leaf|hub"),
        ]
    return menu


def menu_kinds(menu: list[tuple[str, str]]) -> list[str]:
    return sorted({kind for kind, _ in menu})


def cycle_kind(campaign_seed: int, group: str, kinds: list[str], position: int) -> str:
    """The fault kind at ``position`` of a group's endless sequence of seeded shuffles.

    Each round is one shuffled pass over ``kinds`` (``random.Random`` seeded by the
    campaign seed, the group and the round), so ``n`` consecutive positions hold
    every kind ``n // len(kinds)`` times or more: coverage is by construction, and
    position ``p`` is computed from its number alone (a trial reruns on its own).
    """
    round_, offset = divmod(position, len(kinds))
    order = list(kinds)
    random.Random(f"{campaign_seed}:{group}:{round_}").shuffle(order)
    return order[offset]


#: Seconds a fault of each kind lasts (uniform in the range); default (1, 5).
DURATIONS = {"cluster-kill": (2.0, 5.0), "partition-pair": (2.0, 7.0), "degrade-pair": (2.0, 6.0)}


def schedule(
    seed: int,
    topology_kind: str,
    duration: float,
    count: int,
    *,
    campaign_seed: int | None = None,
    ordinal: int = 0,
    menu: list[tuple[str, str]] | None = None,
    group: str | None = None,
) -> list[Fault]:
    """``count`` faults starting in ``[2s, duration - 5s]``, ending by ``duration``, seeded.

    The kinds come from :func:`cycle_kind`: the trial is number ``ordinal`` of the
    trials sharing ``group`` (default: the topology kind) in this campaign, so its
    faults are positions ``ordinal * count ...`` of that group's sequence. Targets,
    start times (one per equal slice of the window, so faults spread out) and
    lengths come from ``random.Random(seed)``.
    """
    rng = random.Random(seed)
    menu = fault_menu(topology_kind) if menu is None else menu
    kinds = menu_kinds(menu)
    if not kinds or count < 1:
        return []
    base = seed if campaign_seed is None else campaign_seed
    group = group or topology_kind
    lo, hi = 2.0, max(2.5, duration - 5.0)
    width = (hi - lo) / count
    faults = []
    for i in range(count):
        kind = cycle_kind(base, group, kinds, ordinal * count + i)
        targets = [t for k, t in menu if k == kind]
        target = targets[rng.randrange(len(targets))]
        start = lo + i * width + rng.uniform(0.0, width)
        low, high = DURATIONS.get(kind, (1.0, 5.0))
        length = min(rng.uniform(low, high), max(low, duration - start))
        faults.append(Fault(round(start, 3), round(length, 3), kind, target))
    return faults


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
