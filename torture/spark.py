"""The Spark part of a trial: its worker, streams, faults, drain and final state.

A share of the trials (``--spark-every N``: one in each block of N, at a position
that shifts by one per block, so the trial kinds take turns) also runs
:mod:`torture.spark_job`, a Structured Streaming driver reading the processed
stream into a ``jetstream`` output stream and, through the transactional
``foreachBatch``, into a SQLite table. Its faults:

* ``spark-kill``: SIGKILL of the driver's process group (the driver Python, the
  JVM) and of every process below it (the Python workers Spark forked, which
  live in their own group); healed by starting the driver again, which resumes
  from its checkpoints.
* ``spark-pause``: SIGSTOP / SIGCONT of the same processes.
* ``pyworker-kill``: SIGKILL of one Spark Python worker, found by walking the
  JVM's process tree in /proc and killed by PID (the fault waits for one to exist).
* ``pyworker-pause``: SIGSTOP of one such worker, SIGCONT of the same PID at the heal.
* ``executor-kill``: (trials whose driver runs ``local-cluster``: executors in JVMs of
  their own, as on a cluster) SIGKILL of an executor JVM and its Python workers while a
  task runs Python code there (the sink's or the ``foreachBatch`` source's rows: a write
  in flight); Spark's worker starts a new executor and the tasks are retried. Landed
  when the executor's JVM is gone.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Protocol

from oncestream import connect
from oncestream.streams import StreamSpec, ensure_stream

from .faults import Outcome, not_yet
from .nemesis import Fault, Worker, wait_state
from .options import SHORT_SINK_WINDOW
from .topology import Topology

KINDS = ("spark-kill", "spark-pause", "pyworker-kill", "pyworker-pause")
#: Only in trials whose driver runs executors of their own (``mode["executors"]``).
EXECUTOR_KILL = "executor-kill"
ALL_KINDS = (*KINDS, EXECUTOR_KILL)
#: The master of those trials: one worker, two cores, executors of 1 GiB.
CLUSTER_MASTER = "local-cluster[1,2,1024]"


class TrialView(Protocol):
    """What a Spark trial uses of :class:`torture.trial.Trial` (which holds a SparkPart)."""

    topo: Topology | None
    #: The trial's PostgreSQL URL once it runs (None before, or without PostgreSQL).
    pg_url: str | None
    #: Whether the trial draws the short duplicate windows.
    short: bool

    async def message_count(self, target: dict[str, Any], stream: str) -> int:
        """Messages in ``stream`` at ``target`` (0 while unknown)."""
        ...

    async def stream_keys(
        self, target: dict[str, Any], stream: str, *, strict: bool = False
    ) -> list[str]:
        """Keys of ``stream`` at ``target``."""
        ...


TARGET = "spark"
OUT_STREAM, OUT_SUBJECT = "SO", "so"
COMMITS_STREAM = "SPARK_COMMITS"
TABLE = "spark_effects"


def runs_spark(index: int, every: int) -> bool:
    """One trial in each block of ``every``; the position shifts by one per block."""
    return every > 0 and index % every == (index // every) % every


def spark_mode(index: int, every: int, leaf: bool) -> dict[str, Any]:
    """How Spark trial ``index`` runs, from its number alone: its ordinal among the
    Spark trials (one per block of ``every``) picks the driver (``connect``: Spark
    Connect, ``remote("local[...]")``, on the odd ordinals of 0-3, 8-11, ... and the
    even ones of 4-7, 12-15, ..., so the leaf trials, every fourth ordinal from 2,
    get both drivers; classic ``local_session`` on the others) and the ``jetstream``
    sink's ``ingest`` (``atomic`` on ordinals 2, 3 of every 4, the default ``auto``,
    fast-ingest, on 0, 1), so every four consecutive Spark trials cover the four
    combinations. ``headers``: in leaf
    trials the source reads the hub's sourced stream with its headers
    (``includeHeaders``) and the sink writes them (leaving out the server-stamped
    ``Nats-Stream-Source``)."""
    ordinal = index // every if every > 0 else index
    connect = ordinal % 2 != (ordinal // 4) % 2
    return {
        "connect": connect,
        "ingest": "atomic" if (ordinal // 2) % 2 else "auto",
        "headers": leaf,
        # Two classic trials in every eight (one per sink ingest) run executors in JVMs of
        # their own (local-cluster), the target of executor-kill.
        "executors": "cluster" if ordinal % 8 in (2, 5) else "local",
    }


def describe_mode(mode: dict[str, Any]) -> str:
    """``connect/atomic/headers``-style words for a summary line."""
    words = ["connect" if mode.get("connect") else "classic", str(mode.get("ingest", "auto"))]
    words += ["headers"] if mode.get("headers") else []
    return "/".join(words + (["executors"] if mode.get("executors") == "cluster" else []))


def spark_order(rng: random.Random) -> list[str]:
    """Two of each Spark kind in a seeded order: the four Python-worker faults, in any
    order, come before the first ``spark-kill`` (a restarted driver has no Python
    worker for 20 s or more), mixed with zero to two ``spark-pause``; the rest
    (the second kill, the remaining pauses) follow in any order."""
    before = ["pyworker-kill", "pyworker-kill", "pyworker-pause", "pyworker-pause"]
    pauses = ["spark-pause", "spark-pause"]
    k = rng.randint(0, 2)
    before += pauses[:k]
    rng.shuffle(before)
    after = ["spark-kill", *pauses[k:]]
    rng.shuffle(after)
    return [*before, "spark-kill", *after]


def spark_schedule(
    seed: int, duration: float, only: tuple[str, ...] = (), executors: bool = False
) -> list[Fault]:
    """Two faults of each Spark kind per Spark trial (:func:`spark_order`), in disjoint
    slots of the run, seeded.

    ``only``: the campaign's ``--fault-kinds`` (the Spark kinds among them; none
    when it names other kinds only; all when empty). A ``spark-kill`` or
    ``spark-pause`` after the first kill hits the driver while it restarts and
    recovers from its checkpoints.
    """
    rng = random.Random(seed ^ 0x5BA2)
    order = spark_order(rng)
    lo, hi = 1.5, max(4.5, duration - 3.0)
    slot = (hi - lo) / len(order)
    faults = []
    for i, kind in enumerate(order):
        start = lo + i * slot + rng.uniform(0.0, slot * 0.3)  # ends within its slot
        length = slot * (0.5 if kind == "pyworker-kill" else rng.uniform(0.3, 0.6))
        length = min(0.5 if kind == "pyworker-kill" else 4.0, length)
        if not only or kind in only:
            faults.append(Fault(round(start, 3), round(length, 3), kind, TARGET))
    if executors and (not only or EXECUTOR_KILL in only):
        # Three, spread over the run: the executor's tasks are running then.
        for share in (0.25, 0.5, 0.75):
            start = lo + (hi - lo) * share + rng.uniform(0.0, slot * 0.3)
            faults.append(Fault(round(start, 3), 0.5, EXECUTOR_KILL, TARGET))
    return sorted(faults, key=lambda f: f.start)


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(entry))
    return tree


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc), parents before children."""
    tree, out, todo = _children(), [], [pid]
    while todo:
        for child in tree.get(todo.pop(0), []):
            out.append(child)
            todo.append(child)
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def python_workers(driver: int) -> list[tuple[int, str]]:
    """(pid, cmdline) of the Spark Python workers below the driver's JVM, busiest first.

    First the workers that run the queries' Python code: the streaming source's
    planner runner, the streaming sink's commit runner, and the workers forked by
    a ``pyspark.daemon`` (they carry the daemon's cmdline, so a process with a
    daemon parent is a worker) that read, transform or write rows; then the rest
    (idle lookup workers, the daemons themselves).
    """
    jvms = [p for p in descendants(driver) if "java" in _cmdline(p).split(" ", 1)[0]]
    found: list[tuple[int, str, bool]] = []
    for jvm in jvms:
        tree = descendants(jvm)
        for pid in tree:
            cmd = _cmdline(pid)
            if "pyspark" not in cmd:
                continue
            parent = _parent(pid)
            forked = parent in tree and "pyspark.daemon" in _cmdline(parent)
            found.append((pid, cmd, forked))
    first = [(p, c) for p, c, f in found if (f or "streaming" in c) and _busy(c)]
    return first + [(p, c) for p, c, _ in found if (p, c) not in first]


def _busy(cmdline: str) -> bool:
    return any(b in cmdline for b in ("streaming", "pyspark.worker", "write_into", "plan_data"))


def _task_worker(pid: int) -> bool:
    """A Python worker a task runs in: forked by a ``pyspark.daemon`` (reused between the
    tasks of a query's micro-batches), or one of the runners :func:`_busy` names."""
    cmd = _cmdline(pid)
    if "pyspark" not in cmd:
        return False
    return _busy(cmd) or "pyspark.daemon" in _cmdline(_parent(pid))


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        return 0


class SparkWorker(Worker):
    """The driver: signals reach its process group and every process below it."""

    def tree(self) -> list[int]:
        if self.proc is None or self.proc.poll() is not None:
            return []
        return [self.proc.pid, *descendants(self.proc.pid)]

    def signal(self, sig: signal.Signals) -> None:
        if sig == signal.SIGTERM:  # graceful stop: the driver stops its queries itself
            super().signal(sig)
            return
        for pid in self.tree():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        tree = self.tree()
        super().kill()
        _kill_all(tree[1:])  # the Python daemon's group outlives a killed JVM briefly

    def nemesis_kill(self) -> int | None:
        tree = self.tree()
        code = super().nemesis_kill()
        _kill_all(tree[1:])
        return code


def _kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


ROOT = Path(__file__).resolve().parent.parent
#: The oldest PySpark the package admits, in its own venv (``make setup-oldest``).
OLDEST_VENV = ROOT / ".venv-pyspark4.0.0"


def oldest_python() -> str | None:
    """The oldest PySpark's Python (``TORTURE_PYSPARK_OLDEST`` or ``make setup-oldest``'s
    venv), None when neither exists."""
    path = Path(os.environ.get("TORTURE_PYSPARK_OLDEST") or OLDEST_VENV / "bin" / "python")
    return str(path) if path.is_file() else None


class SparkPart:
    """Everything a Spark trial adds to :class:`torture.trial.Trial`."""

    def __init__(
        self,
        trial_dir: Path,
        seed: int,
        mode: dict[str, Any] | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        self.dir = trial_dir
        self.mode = mode or {}
        #: The drawn Spark options (torture/options.py): ``sink_stream``, ``spark_out``,
        #: ``pyspark``.
        self.options = options or {}
        self.out = self.options.get("spark_out", "sqlite")
        self.pg_url: str | None = None
        self.delta = trial_dir / "spark-delta"
        self.rng = random.Random(seed)
        self.db = trial_dir / "spark.db"
        self.go, self.ready_file = trial_dir / "spark-go", trial_dir / "spark-ready"
        self.ready_after: float | None = None
        self.drained_after: float | None = None
        self.worker: SparkWorker | None = None
        self.paused: dict[Fault, int] = {}  # pyworker-pause: the stopped worker's PID
        self.t0 = 0.0

    def start(self, trial: TrialView) -> SparkWorker:
        """Start the driver (its JVM boots while the servers start)."""
        assert trial.topo is not None
        target = trial.topo.processor_target()
        cfg = {
            **target,
            **self.options,
            "delta": str(self.delta),
            "worker_dir": str(self.dir / "spark-work"),
            "name": TARGET,
            "out_stream": OUT_STREAM,
            "out_subject": OUT_SUBJECT,
            "commits_stream": COMMITS_STREAM,
            "checkpoints": str(self.dir / "spark-checkpoints"),
            "db": str(self.db),
            "table": TABLE,
            "go": str(self.go),
            "ready": str(self.ready_file),
            **self.mode,
            "master": CLUSTER_MASTER if self.mode.get("executors") == "cluster" else None,
        }
        python = sys.executable
        if self.options.get("pyspark") == "oldest":
            python = oldest_python() or sys.executable  # checked at the campaign's start
        argv = [python, "-m", "torture.spark_job", json.dumps(cfg)]
        self.worker = SparkWorker(TARGET, argv, self.dir / "spark.log", restart_until_done=False)
        self.worker.env = {
            **os.environ,
            "PYSPARK_PYTHON": python,
            "PYSPARK_DRIVER_PYTHON": python,
            # local-cluster's worker keeps the executors' folders here, not in the venv
            "SPARK_WORKER_DIR": str(self.dir / "spark-work"),
        }
        self.worker.start()
        self.t0 = time.monotonic()
        return self.worker

    async def create_streams(self, trial: TrialView) -> None:
        """The output and commits streams, next to the processed stream."""
        assert trial.topo is not None
        topo = trial.topo
        replicas = 3 if topo.clustered else 1
        # The default window (2 min) covers the sink's task retry horizon at its defaults
        # (4 tasks x 27.3 s); a short one (30 s: its Publisher's own horizon fits, a driver
        # restart does not) leaves retries beyond it to the commit records.
        window = SHORT_SINK_WINDOW if trial.short else 120.0
        specs = (
            StreamSpec(
                name=OUT_STREAM,
                subjects=(f"{OUT_SUBJECT}.>",),
                replicas=replicas,
                duplicate_window=window,
                allow_atomic=True,  # for the sink's ingest=atomic; allow_batched: the default
            ),
            StreamSpec(
                name=COMMITS_STREAM,
                subjects=(f"oncestream.sink.commits.{COMMITS_STREAM.lower()}.>",),
                replicas=replicas,
                max_msgs_per_subject=16,
                duplicate_window=600.0,
            ),
        )
        async with await connect(topo.connect_options(topo.processor_target())) as conn:
            for spec in specs:
                await ensure_stream(conn, spec)
        # What exists only now (the driver started before the trial's PostgreSQL did).
        self.pg_url = trial.pg_url
        self.go.write_text(json.dumps({"pg_url": trial.pg_url}) + "\n")

    async def wait_ready(self, timeout: float = 150.0) -> None:
        """Until both queries started (bounded; the driver is supervised)."""
        assert self.worker is not None
        deadline = time.monotonic() + timeout
        while not self.ready_file.exists() and time.monotonic() < deadline:
            self.worker.supervise(in_fault=False)
            await asyncio.sleep(0.2)
        if self.ready_file.exists():
            self.ready_after = round(time.monotonic() - self.t0, 3)

    def apply(self, fault: Fault) -> Outcome:
        """Start a Spark fault once its target exists; check that it took effect."""
        assert self.worker is not None
        if fault.kind == EXECUTOR_KILL:
            return self._kill_executor()
        if fault.kind in ("spark-kill", "spark-pause"):
            tree = self.worker.tree()
            if not tree:
                return not_yet("the Spark driver is not running")
            if fault.kind == "spark-kill":
                self.worker.nemesis_kill()
                alive = [p for p in tree if wait_state(p, {None, "Z"}) not in (None, "Z")]
                how = f"SIGKILL {len(tree)} processes (driver pid {tree[0]})"
                return Outcome(not alive, how, f"still alive: {alive}" if alive else "")
            self.worker.signal(signal.SIGSTOP)
            states = {p: wait_state(p, {"T", "t", None, "Z"}) for p in tree}
            running = [p for p, st in states.items() if st not in ("T", "t", None, "Z")]
            stopped = states[tree[0]] in ("T", "t") and not running
            how = f"SIGSTOP {len(tree)} processes (driver pid {tree[0]})"
            return Outcome(stopped, how, "" if stopped else f"not stopped: {running or tree[:1]}")
        proc = self.worker.proc
        workers = python_workers(proc.pid) if proc is not None and self.worker.alive() else []
        if not workers:
            return not_yet("no Spark Python worker yet")
        pool = [w for w in workers if _busy(w[1])] or workers
        pid, cmd = pool[self.rng.randrange(len(pool))]
        how = f"pid {pid} ({cmd.strip()[-60:]})"
        if fault.kind == "pyworker-pause":
            os.kill(pid, signal.SIGSTOP)
            self.paused[fault] = pid
            state = wait_state(pid, {"T", "t", None})
            return Outcome(state in ("T", "t"), how, f"state {state} after SIGSTOP")
        os.kill(pid, signal.SIGKILL)
        state = wait_state(pid, {None, "Z"})
        return Outcome(state in (None, "Z"), how, f"state {state} after SIGKILL")

    def _kill_executor(self) -> Outcome:
        """SIGKILL of an executor JVM (and its Python workers) running Python tasks."""
        assert self.worker is not None
        proc = self.worker.proc
        if proc is None or not self.worker.alive():
            return not_yet("the Spark driver is not running")
        executors = [p for p in descendants(proc.pid) if "CoarseGrainedExecutorBackend" in
                     _cmdline(p)]  # fmt: skip
        if not executors:
            return not_yet("no executor JVM yet")
        # Prefer one running a task's Python worker (a write in flight); the micro-batches
        # come every 0.5 s, so an executor without one now is between two of them.
        busy = [e for e in executors if any(_task_worker(w) for w in descendants(e))]
        jvm = (busy or executors)[self.rng.randrange(len(busy or executors))]
        tree = [jvm, *descendants(jvm)]
        pythons = [p for p in tree[1:] if "python" in _cmdline(p)]
        _kill_all(tree)
        state = wait_state(jvm, {None, "Z"})
        how = (
            f"SIGKILL executor JVM pid {jvm} and {len(tree) - 1} processes below it "
            f"({len(pythons)} Python, {'a task worker among them' if busy else 'no task worker'})"
        )
        return Outcome(state in (None, "Z"), how, f"state {state} after SIGKILL")

    def heal(self, fault: Fault) -> None:
        assert self.worker is not None
        if fault.kind == "spark-kill" and not self.worker.alive():
            self.worker.start()
        elif fault.kind == "spark-pause":
            self.worker.signal(signal.SIGCONT)
        elif fault.kind == "pyworker-pause" and fault in self.paused:
            try:
                os.kill(self.paused.pop(fault), signal.SIGCONT)
            except ProcessLookupError:
                pass  # the worker ended meanwhile (e.g. its task was cancelled)

    async def drain(self, trial: TrialView, processed: list[str], timeout: float = 120.0) -> None:
        """Until the output stream and the table hold every record of ``processed`` (what
        the job can read, a replayed dead letter's copy as a record of its own beside its
        key's first: the checker counts the copies); then SIGTERM, which the driver
        answers by stopping its queries (exit 0)."""
        assert self.worker is not None
        start = time.monotonic()
        assert trial.topo is not None
        target = trial.topo.processor_target()
        keys = set(processed)
        while time.monotonic() - start < timeout:
            self.worker.supervise(in_fault=False)
            db = self.db_keys()
            # STREAM.INFO's count first (cheap), the keys themselves once it is reached
            counted = (
                len(db) >= len(processed)
                and keys <= set(db)
                and await trial.message_count(target, OUT_STREAM) >= len(processed)
            )
            if counted and keys <= set(await trial.stream_keys(target, OUT_STREAM)):
                self.drained_after = round(time.monotonic() - start, 3)
                break
            await asyncio.sleep(0.5)
        self.worker.stop(timeout=60.0)

    def db_keys(self) -> list[str]:
        """The keys the second query wrote (its ``spark_out``: a SQLite or PostgreSQL table
        through ``transactional``, or a Delta table); [] while there is none."""
        if self.out == "delta":
            try:
                from deltalake import DeltaTable

                return [str(k) for k in DeltaTable(str(self.delta)).to_pyarrow_table(
                    columns=["key"]).column("key").to_pylist()]  # fmt: skip
            except Exception:  # no table yet (its first batch not written)
                return []
        if self.out == "postgres" and self.pg_url:
            import psycopg

            try:
                with psycopg.connect(self.pg_url, connect_timeout=5) as pg:
                    return [r[0] for r in pg.execute(f"SELECT key FROM {TABLE}")]
            except psycopg.Error:
                return []
        try:
            with sqlite3.connect(self.db) as db:
                return [r[0] for r in db.execute(f"SELECT key FROM {TABLE}")]
        except sqlite3.Error:
            return []

    def drop_row(self) -> str | None:
        """Sabotage ``drop-row``: behind the job's back (after its drain), delete one row of
        the ``foreachBatch`` table (SQLite: ``spark_out=sqlite``) and write another one a
        second time, what a lost or a retried task's write would leave; the keys of both
        (``"dropped,doubled"``), None when the table has fewer than two rows."""
        with sqlite3.connect(self.db) as db:
            rows = db.execute(f"SELECT rowid, key FROM {TABLE} ORDER BY rowid LIMIT 2").fetchall()
            if len(rows) < 2:
                return None
            db.execute(f"DELETE FROM {TABLE} WHERE rowid = ?", (rows[0][0],))
            db.execute(f"INSERT INTO {TABLE} SELECT * FROM {TABLE} WHERE rowid = ?", (rows[1][0],))
        return f"{rows[0][1]},{rows[1][1]}"

    def final(self, stream: dict[str, int] | None) -> dict[str, Any]:
        """The outputs (``stream``: the output stream's keys, read by the trial; None when
        it could not be read) and timings."""
        return {
            "stream": stream,
            "db": dict(Counter(self.db_keys())),
            "ready_after_s": self.ready_after,
            "drained_after_s": self.drained_after,
            "query_restarts": _count_restarts(self.dir / "spark.log"),
            "mode": describe_mode(self.mode),
            "options": self.options,
        }


def _count_restarts(log: Path) -> int:
    try:
        return sum(
            1 for line in log.read_text(errors="replace").splitlines() if "; restart " in line
        )
    except OSError:
        return 0


def java_available() -> bool:
    try:
        from oncestream.spark._internal import check_java

        check_java()
    except Exception:
        return False
    return subprocess.run([sys.executable, "-c", "import pyspark"], check=False).returncode == 0
