"""Seeded fault schedules, and the worker processes the faults hit.

A schedule is a list of :class:`Fault` (start offset, duration, kind, target,
phase) drawn from the campaign seed and the trial's number only, so a trial
reruns exactly from its seed and index (the schedule; the interleaving with the
workload is up to the kernel; ``python -m torture --schedule`` prints it without
running anything). Which kinds a trial gets is a seeded cycle through its
topology's menu carried over the trials (:func:`cycle_kind`), so 100 trials
inject every kind a known number of times. A trial's faults start at start-up
(the workers are connecting), during the run, and during the drain (producers
finishing, processors and the hub's source catching up). Faults overlap freely;
one that needs something already under a fault (the same process, node or link)
or whose precondition does not hold yet waits (see ``Trial``), and is skipped,
with the reason, when it cannot start within :func:`max_wait` seconds.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

PRODUCERS = ("pub", "sess", "cli")
PROCESSORS = ("lite", "pg1", "pg2")
#: The processors' durable consumers (pg1 and pg2 share ``pg``, active/standby; as members
#: of group ``pg`` over partitions, a reset of ``pg`` moves one partition's ``pg-p<N>``).
CONSUMERS = ("lite", "pg")
#: A processor's consumer moved back mid-run (``CONSUMER.RESET``): redeliveries the
#: ledger must suppress.
CONSUMER_RESET = "consumer-reset"
#: Seconds a fault may wait past its start for a busy target or a precondition (8 s
#: until 2026-11-30: 6 of 280 faults of the first 35 trials of seed 52 at 89c1ba0 ran
#: out of it behind overlapping faults of their target).
MAX_WAIT = 12.0
#: ... for a consumer reset, whose precondition (the consumer acked past its target,
#: its leader reachable) waits out a whole-cluster kill: ~6.5 s to heal and the
#: consumer's re-creation after it (7 of the 8 skips of the 699c4cf campaign). An
#: executor kill waits out a driver restart (20-30 s before executors run tasks again).
MAX_WAIT_BY_KIND = {
    "consumer-reset": 20.0,
    # A membership change waits for a stream leader (none after a whole-cluster kill or
    # a partition: 2 of the 4 skips of the 9372e75 sweep), a current replacement and
    # replicas that are current (one still catching up after a cluster-kill 20 s on:
    # seed 52, trial 31 at 89c1ba0).
    "membership": 30.0,
    # A fault of every node waits for every server fault active when it is due (each
    # holds its node until healed: a restart after a truncation or an OS crash).
    "cluster-kill": 20.0,
    "power-loss": 20.0,
    "executor-kill": 30.0,
    # A Spark fault that waited for a Python worker (a slow driver start: the oldest
    # PySpark) holds the driver into the next one's slot: 3 of one trial's were skipped.
    "spark-kill": 20.0,
    "spark-pause": 20.0,
    "pyworker-kill": 20.0,
    "pyworker-pause": 20.0,
}


def max_wait(kind: str) -> float:
    """Seconds a fault of ``kind`` may wait past its start before it is skipped."""
    return MAX_WAIT_BY_KIND.get(kind, MAX_WAIT)


#: Start windows (s from the trial's start): faults at start-up, and in the drain
#: (``duration`` + this window; the drain does not end before they are healed).
STARTUP, DRAIN = (0.2, 1.5), (0.0, 1.5)


@dataclass(frozen=True)
class Fault:
    start: float
    duration: float
    kind: str
    target: str
    phase: str = "run"

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
    menu += [(CONSUMER_RESET, consumer) for consumer in CONSUMERS]
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
        for node in ("leaf", "hub"):
            menu += [
                ("server-kill", node),
                ("server-pause", node),
                ("partition", node),
                ("degrade", node),
            ]
        menu += [("partition-pair", "leaf|hub"), ("degrade-pair", "leaf|hub")]
    return menu


def stack_menu(topology_kind: str, *, crashes: bool = False) -> list[tuple[str, str]]:
    """(kind, target) pairs of the faults on the rest of the stack and on the servers'
    storage and membership (issue 52), drawn from a cycle of their own
    (:func:`schedule` with ``group="stack:<kind>"``), so they add to a trial's faults
    without thinning the coverage of the others.

    Every trial: PostgreSQL killed, paused, cut off from one member of the pair
    (:mod:`torture.postgres`); the SQLite ledger's file system full. R3 clusters also:
    a follower's (or the leader's) stream files bit-flipped or truncated, a stream peer
    removed for a fresh node, one node's OS crash and a power loss of all
    (:mod:`torture.storefaults`; the crashes in ``cluster`` trials only when ``crashes``:
    :func:`crash_fault` schedules them there).
    """
    menu = [("pg-kill", "pg"), ("pg-pause", "pg"), ("pg-cut", "pg1"), ("pg-cut", "pg2")]
    menu += [("ledger-full", "lite")]
    if topology_kind.startswith("cluster"):
        menu += [("bitflip", "follower"), ("truncate", "follower"), ("bitflip", "leader")]
        menu += [("membership", "follower"), ("membership", "leader")]
    if topology_kind == "cluster-sync" or (topology_kind == "cluster" and crashes):
        menu += CRASH_MENU
    return menu


#: The OS crashes (lost page cache). In ``cluster`` trials (the default sync) a landed one
#: makes the trial's losses the server's measured limit rather than violations, so they
#: come one per trial in every other cluster trial (:func:`crash_fault`), leaving the
#: others' counts as evidence; ``cluster-sync`` trials (``always``) draw them as any
#: other stack fault, since every loss there counts.
CRASH_MENU = [("os-crash", "follower"), ("os-crash", "leader"), ("power-loss", "all")]


def crash_fault(seed: int, kind: str, duration: float, ordinal: int) -> list[Fault]:
    """The one OS crash of every other ``cluster`` trial: ``power-loss`` and ``os-crash``
    taking turns, during the run."""
    if kind != "cluster" or ordinal % 2:
        return []
    rng = random.Random(seed + 900_000)
    crash, target = CRASH_MENU[2] if (ordinal // 2) % 2 == 0 else CRASH_MENU[rng.randrange(2)]
    lo, hi = STARTUP[1], max(STARTUP[1] + 0.5, duration - 1.5)
    start = rng.uniform(lo, hi)
    low, high = DURATIONS.get(crash, (1.0, 5.0))
    return [Fault(round(start, 3), round(rng.uniform(low, high), 3), crash, target, "run")]


#: How many stack faults (:func:`stack_menu`) a trial of each kind gets by default: the
#: cluster kinds' nine kinds 11 times or more in 100 trials (25 of each trial kind).
STACK_FAULTS = {"single": 2, "leaf": 2, "cluster": 4, "cluster-sync": 4}


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
DURATIONS = {
    "cluster-kill": (2.0, 5.0),
    "partition-pair": (2.0, 7.0),
    "degrade-pair": (2.0, 6.0),
    "power-loss": (2.0, 5.0),
    "membership": (2.0, 6.0),
    "pg-cut": (2.0, 7.0),
}


def windows(count: int, duration: float) -> list[tuple[str, float, float]]:
    """(phase, earliest, latest start) of each of ``count`` faults.

    One at start-up, one in the drain (from 3 faults on), the others in equal
    slices of the run between them, so faults spread out.
    """
    lo, hi = STARTUP[1], max(STARTUP[1] + 0.5, duration - 1.5)
    out: list[tuple[str, float, float]] = []
    if count >= 2:
        out.append(("start-up", *STARTUP))
    middle = count - len(out) - (1 if count >= 3 else 0)
    width = (hi - lo) / max(1, middle)
    out += [("run", lo + i * width, lo + (i + 1) * width) for i in range(middle)]
    if count >= 3:
        out.append(("drain", duration + DRAIN[0], duration + DRAIN[1]))
    return out


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
    """``count`` faults over start-up, the run and the drain (:func:`windows`), seeded.

    The kinds come from :func:`cycle_kind`: the trial is number ``ordinal`` of the
    trials sharing ``group`` (default: the topology kind) in this campaign, so its
    faults are positions ``ordinal * count ...`` of that group's sequence. Targets,
    start times and lengths come from ``random.Random(seed)``. A drain fault never
    targets a producer (it may have finished its input).
    """
    rng = random.Random(seed)
    menu = fault_menu(topology_kind) if menu is None else menu
    kinds = menu_kinds(menu)
    if not kinds or count < 1:
        return []
    base = seed if campaign_seed is None else campaign_seed
    group = group or topology_kind
    faults = []
    for i, (phase, lo, hi) in enumerate(windows(count, duration)):
        kind = cycle_kind(base, group, kinds, ordinal * count + i)
        targets = [t for k, t in menu if k == kind]
        if phase == "drain":
            targets = [t for t in targets if t not in PRODUCERS] or targets
        target = targets[rng.randrange(len(targets))]
        start = rng.uniform(lo, hi)
        low, high = DURATIONS.get(kind, (1.0, 5.0))
        length = min(rng.uniform(low, high), max(low, duration + 6.0 - start))
        faults.append(Fault(round(start, 3), round(length, 3), kind, target, phase))
    return faults


def proc_state(pid: int) -> str | None:
    """The kernel's state letter of ``pid`` (R, S, D, T, Z, ...), None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def wait_state(pid: int, wanted: set[str | None], timeout: float = 1.0) -> str | None:
    """Poll ``pid``'s state until it is one of ``wanted`` (a signal is delivered
    asynchronously); return the last state seen."""
    deadline = time.monotonic() + timeout
    state = proc_state(pid)
    while state not in wanted and time.monotonic() < deadline:
        time.sleep(0.01)  # another process's state: nothing to await on
        state = proc_state(pid)
    return state


#: A CLI run that failed before publishing (no summary line) this many times in a row
#: is a failure, not a start-up retry.
MAX_STARTUP_FAILURES = 30
#: The line a worker prints to ask to be re-run (``oncestream publish``'s own words).
RERUN = "resume: re-run the same command"
#: Re-runs a worker may ask for (:attr:`Worker.rerun_ok`) before its exit is a failure.
MAX_RERUNS = 60


class Worker:
    """A worker subprocess (``python -m torture.workers`` or the CLI), restartable.

    Every exit the harness did not cause is accounted: a producer's exit 0 means
    its input is done; a SIGKILL by the nemesis (:meth:`nemesis_kill`) and a
    processor's exit 0 after :meth:`stop` are expected; anything else (a non-zero
    exit, a processor ending unasked, a process that ignores SIGTERM) is a
    *failure*, recorded with the tail of that run's log, and the worker is
    started again so the trial goes on. The one exception is :meth:`startup_exit`:
    the CLI exiting 1 before it published anything (no server reachable at
    start-up, say), counted as a start-up retry (up to :data:`MAX_STARTUP_FAILURES`
    in a row).
    """

    def __init__(
        self, name: str, argv: list[str], log: Path, *, restart_until_done: bool, cli: bool = False
    ) -> None:
        self.name, self.argv, self.log = name, argv, log
        self.restart_until_done = restart_until_done
        self.cli = cli
        self.proc: subprocess.Popen[bytes] | None = None
        self.failures: list[dict[str, Any]] = []
        self.startup_retries = 0
        self._startup_streak = 0
        self.done = False
        self.stopping = False
        #: An exit 1 that asks to be re-run is not a failure: ``"any"`` (``oncestream dlq
        #: replay``: a re-run replays nothing twice), True (a producer that printed
        #: "resume: re-run the same command": ``oncestream publish``, or a worker whose
        #: publishes failed for good past their retry horizon), False.
        self.rerun_ok: bool | str = False
        #: The environment the process starts with (None: the harness's).
        self.env: dict[str, str] | None = None
        self.reruns = 0
        #: When each run started (wall clock): the checker's evidence of which run of the
        #: CLI sent a record stored twice (checker.held_resends).
        self.starts: list[float] = []
        self._accounted = False  # the current run's exit is accounted
        self._log_from = 0

    def start(self) -> None:
        self._accounted = False
        self.starts.append(time.time())
        # A torture.workers process starts with SIGTERM blocked (the mask is inherited)
        # and unblocks it once its handler is installed: a SIGTERM that arrives while
        # it is still starting (a stop right after a restart) waits for the handler
        # instead of killing it before it could stop cleanly (an exit -15, no log).
        block = {signal.SIGTERM} if "torture.workers" in self.argv else set()
        old = signal.pthread_sigmask(signal.SIG_BLOCK, block)
        try:
            with open(self.log, "ab") as log:
                self._log_from = log.tell()
                self.proc = subprocess.Popen(
                    self.argv,
                    stdout=log,
                    stderr=log,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                    cwd=Path(__file__).resolve().parent.parent,
                    env=self.env,
                )
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.alive() and self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL at teardown (not accounted: the trial is over)."""
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=10)

    def nemesis_kill(self) -> int | None:
        """SIGKILL as a fault; the exit code (-9 when the kill did it, None if not running).

        An exit that beat the signal (a producer finishing) is accounted as usual.
        """
        if self.proc is None or self.proc.poll() is not None:
            return None
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGKILL)
        code = self.proc.wait(timeout=10)
        self._accounted = True
        if code != -signal.SIGKILL:
            self._exited(code)
        return code

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (processors finish their batch); exit 0 is expected, anything else
        (or still running after ``timeout``, then SIGKILLed) is a failure."""
        self.stopping = True
        if self.proc is None or self._settle():
            return
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self._accounted = True
            self._fail(None, f"still running {timeout:g}s after SIGTERM; SIGKILLed")
            return
        self._accounted = True
        if code != 0:
            self._fail(code, "exit code after SIGTERM")

    def supervise(self, in_fault: bool) -> None:
        """Account an exit and start the worker again unless it is done."""
        if self.done or in_fault or self.stopping:
            return
        if self._settle() and not self.done:
            self.start()

    def _settle(self) -> bool:
        """Account the current run's exit (once); whether it has exited."""
        if self.proc is None or self.proc.poll() is None:
            return False
        if not self._accounted:
            self._accounted = True
            self._exited(self.proc.returncode)
        return True

    def _exited(self, code: int) -> None:
        if code == 0 and self.restart_until_done:
            self.done = True
            return
        if code == 1 and self._asks_rerun():
            self.reruns += 1
            return
        if self.cli and code == 1 and self.startup_exit():
            self.startup_retries += 1
            self._startup_streak += 1
            if self._startup_streak <= MAX_STARTUP_FAILURES:
                return
        self._startup_streak = 0
        self._fail(code, "exited unasked" if code == 0 else "exit code")

    def _asks_rerun(self) -> bool:
        if not self.rerun_ok or self.reruns >= MAX_RERUNS:
            return False
        return self.rerun_ok == "any" or RERUN in self.run_log()

    def startup_exit(self) -> bool:
        """This run of the CLI failed before publishing: an error, and no summary line."""
        text = self.run_log()
        return "error:" in text and "': stored " not in text

    def run_log(self) -> str:
        """What the current (or last) run wrote to the log."""
        try:
            with open(self.log, "rb") as f:
                f.seek(self._log_from)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def _fail(self, code: int | None, why: str) -> None:
        tail = self.run_log().splitlines()[-15:]
        self.failures.append({"worker": self.name, "code": code, "why": why, "log_tail": tail})


def python_argv(role: str, cfg: dict[str, Any]) -> list[str]:
    import json

    return [sys.executable, "-m", "torture.workers", role, json.dumps(cfg)]
