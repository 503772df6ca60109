"""One trial: servers in namespaces, producers, processors, the nemesis, drain, final state.

Timeline (seconds from the trial's start ``t0``, taken once the servers, the
streams and, in Spark trials, the Spark driver are ready, so every producer's
pacing and every fault happen while the whole pipeline runs):

* every worker starts at ``t0``; the producers are paced over ``duration``
  (the ``Publisher`` and the ``ProducerSession`` from ``t0``, catching up after a
  restart; the CLI with ``oncestream publish --rate`` from its own start);
* faults start at start-up, during the run and during the drain
  (:func:`torture.nemesis.schedule`); each checks its precondition and its effect,
  and one that did not land is logged as skipped with the reason;
* the drain begins at ``duration``: it ends once every producer finished its
  input, the hub's source caught up (leaf trials), the processors applied every
  stored record, and no fault is pending or active; then the processors are
  stopped with SIGTERM, the Spark job drains, and the final state is read (every
  stream twice: the project's reader and :mod:`torture.rawread`).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import sqlite3
import sys
import time
from collections import Counter
from itertools import pairwise
from pathlib import Path
from typing import Any

from oncestream import connect
from oncestream.read import read_stream
from oncestream.streams import ResetTarget, consumer_info, reset_consumer

from . import faults as server_faults
from . import spark as sparkpart
from .faults import Outcome, not_yet
from .nemesis import (
    CONSUMER_RESET,
    PROCESSORS,
    PRODUCERS,
    Fault,
    Worker,
    fault_menu,
    max_wait,
    python_argv,
    wait_state,
)
from .nemesis import schedule as fault_schedule
from .netns import Net
from .rawread import Unreadable, delete_msg, read_raw, record_key, seq_of
from .topology import HUB_STREAM, STREAM, SUBJECT, Topology
from .workers import EFFECTS, EFFECTS_COLUMNS

TICK = 0.1
#: consumer-reset: the ack floor a consumer must have passed, and how far back the
#: reset that does not go to the stream's first sequence moves it.
RESET_MIN_FLOOR, RESET_BACK = 20, 300
#: The drain gives up (and the checker counts what is missing) after this long.
DRAIN_TIMEOUT = 120.0
#: Negative-control modes (``--sabotage``): each breaks the system's effect once, in a
#: way only the checker's real checks can notice.
SABOTAGE = ("drop-acked", "apply-twice", "skip-position", "drop-row")
CLI_INPUT = "cli-input.jsonl"


def leader_count(info: dict[str, Any]) -> int:
    """``state.messages`` of a STREAM.INFO answer, or 0 when a replica gave it without a leader.

    While a clustered stream has no leader its replicas answer with their own count,
    which lacks the latest writes on a replica that was cut off. In the CI run of
    decd285 a drain ended on a count of at most 638 of 640 stored records and stopped
    the processors two records early (missing_effects), as the stream changed leader
    and the partitioned replica finished its catch-up (the servers' logs): most likely
    such an answer. (``oncestream._retry.leader_stream_info`` applies the same rule
    for the project's readers.)
    """
    cluster = info.get("cluster")
    if isinstance(cluster, dict) and not cluster.get("leader"):
        return 0
    return int((info.get("state") or {}).get("messages", 0))


class Trial:
    def __init__(
        self,
        *,
        index: int,
        seed: int,
        kind: str,
        out: Path,
        run_id: str,
        duration: float,
        faults: int,
        rate: float,
        pg_admin: str | None,
        campaign_seed: int | None = None,
        ordinal: int = 0,
        fault_kinds: tuple[str, ...] = (),
        spark: bool = False,
        sabotage: str | None = None,
        spark_mode: dict[str, Any] | None = None,
    ) -> None:
        self.index, self.seed, self.kind, self.out = index, seed, kind, out
        self.run_id, self.duration, self.rate = f"{run_id}{index:02d}", duration, rate
        self.sabotage = sabotage
        self.faults = planned_faults(
            seed=seed,
            kind=kind,
            duration=duration,
            faults=faults,
            campaign_seed=campaign_seed,
            ordinal=ordinal,
            fault_kinds=fault_kinds,
            spark=spark,
            sabotage=sabotage,
        )
        self.timing: dict[str, float] = {}
        self._retry_at: dict[Fault, float] = {}
        self._waiting: dict[Fault, str] = {}
        self._leader: str | None = None
        self.pg_admin = pg_admin
        self.dir = out / f"trial-{index:03d}-{kind}"
        self.work = Path(f"/tmp/oncestream-torture-{self.run_id}")
        self.history = self.dir / "history.jsonl"
        self.workers: dict[str, Worker] = {}
        self.busy: set[str] = set()
        self.fault_log: list[dict[str, Any]] = []
        self.topo: Topology | None = None
        self.net: Net | None = None
        self.count = int(rate * duration)
        self.inputs: dict[str, dict[str, Any]] = {
            "pub": {"positions": self.count},
            "sess": {"positions": self.count // 2},
            "cli": {"file": str(self.dir / CLI_INPUT), "id_field": "id"},
        }
        self.sourced_after: float | None = None
        self._sabotaged = False
        self._sabotage_task: asyncio.Task[None] | None = None
        self._t0 = 0.0
        # -- tspark: one in --spark-every trials also runs the Spark job (torture/spark.py)
        self.spark = sparkpart.SparkPart(self.dir, seed, spark_mode or {}) if spark else None

    # -- setup -------------------------------------------------------------------------

    def _pg_url(self) -> str | None:
        if self.pg_admin is None:
            return None
        import psycopg

        db = f"torture_{self.run_id}"
        with psycopg.connect(self.pg_admin, autocommit=True) as pg:
            pg.execute(f"DROP DATABASE IF EXISTS {db}")
            pg.execute(f"CREATE DATABASE {db}")
        url = self.pg_admin.rsplit("/", 1)[0] + f"/{db}"
        with psycopg.connect(url, autocommit=True) as pg:  # before two processors race to it
            pg.execute(f"CREATE TABLE {EFFECTS} {EFFECTS_COLUMNS}")
        return url

    def _workers(self, pg_url: str | None, t0_wall: float) -> None:
        """Every worker, paced from ``t0_wall`` (the trial's start, wall clock)."""
        assert self.topo is not None
        prod = self.topo.producer_target()
        proc = self.topo.processor_target()
        hist = str(self.history)
        base = {**prod, "stream": STREAM, "subject": SUBJECT, "history": hist, "t0": t0_wall}
        # The ProducerSession waits for each ack (~350/s on an R3 `sync_interval: always`
        # stream here), so it runs at half the Publisher's rate and has room to catch up.
        for name, role, share in (("pub", "publisher", 1), ("sess", "session", 2)):
            cfg = {**base, "name": name, "count": self.count // share, "rate": self.rate / share}
            if name == "sess" and self.sabotage == "skip-position":
                cfg |= {"sabotage": self.sabotage, "marker": str(self.dir / "sabotage-skip")}
            self._add(name, python_argv(role, cfg), done=True)
        lines = self.dir / CLI_INPUT
        with open(lines, "w") as f:
            for i in range(self.count // 2):
                f.write(json.dumps({"id": f"cli-{i}", "n": i}) + "\n")
        cli = [
            str(Path(sys.executable).parent / "oncestream"),
            "publish",
            str(lines),
            "--stream",
            STREAM,
            "--subject",
            f"{SUBJECT}.cli",
            "--id-field",
            "id",
            "--no-progress",
            "--ack-timeout",
            "2s",
            "--max-attempts",
            "10",
            "--rate",
            f"{self.rate / 2:g}",
        ]
        for url in prod["servers"]:
            cli += ["-s", url]
        if prod["domain"]:
            cli += ["--domain", prod["domain"]]
        self._add("cli", cli, done=True, cli=True)
        ledgers = {"lite": str(self.dir / "lite.db")}
        if pg_url:
            ledgers |= {"pg1": pg_url, "pg2": pg_url}
        for name, ledger in ledgers.items():
            cfg = {
                **proc,
                "name": name,
                "ledger": ledger,
                "table": EFFECTS,
                "consumer": "lite" if name == "lite" else "pg",
                "pinned": name != "lite",  # pg1/pg2: active/standby on one consumer
                "history": hist,
            }
            if name == "lite" and self.sabotage == "apply-twice":
                cfg |= {"sabotage": self.sabotage, "sabotage_key": "pub-10"}
            self._add(name, python_argv("processor", cfg), done=False)

    def _add(self, name: str, argv: list[str], *, done: bool, cli: bool = False) -> None:
        log = self.dir / f"{name}.log"
        self.workers[name] = Worker(name, argv, log, restart_until_done=done, cli=cli)

    def _note(self, op: str, key: str, result: str, **extra: Any) -> None:
        line = {
            "wall": time.time(),
            "mono": time.monotonic(),
            "process": "nemesis",
            "op": op,
            "key": key,
            "result": result,
            **extra,
        }
        with open(self.history, "a") as f:
            f.write(json.dumps(line) + "\n")

    # -- tfaults: faults (servers and links in torture/faults.py) -------------------------

    async def _watch_leader(self) -> None:
        """Keep :attr:`_leader` current (a cluster's stream leader, None while unknown), in
        the background: asking may take seconds while nodes are down, heals must not wait."""
        assert self.topo is not None
        while True:
            self._leader = await self.topo.leader()  # bounded by its connect/request timeouts
            await asyncio.sleep(0.3)

    async def _resolve(self, fault: Fault, turn: int, now: float) -> str | None:
        """Concrete target; with no known stream leader for 1.5 s (e.g. the cluster is
        still electing after a restart), roles are guessed (any node) rather than skipped."""
        leader = self._leader
        if leader is None and now - fault.start >= 1.5:
            leader = ("c1", "c2", "c3")[turn % 3]
        return server_faults.resolve(fault.target, leader, self.busy, fault.kind, turn)

    async def _apply(self, fault: Fault, target: str) -> Outcome:
        assert self.topo is not None and self.net is not None
        if fault.kind in sparkpart.KINDS:
            assert self.spark is not None
            return await asyncio.to_thread(self.spark.apply, fault)
        if fault.phase == "sabotage" and not any(
            h["op"] == "ack" and h["process"] == target for h in _read_history(self.history)
        ):  # skip-position: the kill must come after a stored record, to resume after it
            return not_yet(f"no ack of {target} yet")
        if fault.kind in ("kill", "pause"):
            if target not in self.workers:  # pg1/pg2 with --no-postgres
                return Outcome(False, why=f"no worker {target} in this run", touched=False)
            return await asyncio.to_thread(self._apply_worker, fault.kind, self.workers[target])
        if fault.kind == CONSUMER_RESET:
            turn = self.faults.index(fault) if fault in self.faults else 0
            return await self._reset_consumer(target, turn)
        outcome = await asyncio.to_thread(
            server_faults.apply, self.topo, self.net, fault.kind, target
        )
        return outcome

    async def _reset_consumer(self, consumer: str, turn: int) -> Outcome:
        """Move a processor's consumer back (``CONSUMER.RESET``, the product's
        :func:`~oncestream.streams.reset_consumer`): alternately to the stream's first
        sequence and to :data:`RESET_BACK` sequences below its ack floor. Needs the
        consumer to have acked past the target; landed when the server's answer puts
        the next delivery at or below the ack floor it had (its ledger has no prune
        horizon: ``prune_interval=0``, so no target is refused for it)."""
        assert self.topo is not None
        if consumer == "pg" and self.pg_admin is None:
            return Outcome(False, why="no PostgreSQL processors in this run", touched=False)
        target = self.topo.processor_target()
        stream = target["stream"]
        try:
            async with asyncio.timeout(5):  # the loop waits: heals must not wait long
                async with await connect(self.topo.connect_options(target)) as conn:
                    info = await consumer_info(conn, stream, consumer)
                    floor = int((info.get("ack_floor") or {}).get("stream_seq", 0))
                    if floor < RESET_MIN_FLOOR:
                        return not_yet(f"consumer {consumer} acked up to seq {floor} only")
                    to = (
                        ResetTarget(start=True)
                        if turn % 2 == 0
                        else ResetTarget(seq=max(1, floor - RESET_BACK))
                    )
                    done = await reset_consumer(conn, stream, consumer, to)
        except Exception as exc:  # no answer now (a fault of the servers): try again
            return not_yet(f"consumer {consumer}: {type(exc).__name__}: {exc}"[:200])
        how = f"{stream}/{consumer} from ack floor {floor} to seq {done.seq} ({to.describe()})"
        back = 0 < done.seq <= floor
        return Outcome(back, how, "" if back else f"reset to seq {done.seq}, not below {floor}")

    def _apply_worker(self, kind: str, worker: Worker) -> Outcome:
        """SIGKILL / SIGSTOP of a worker that is running; its effect checked in /proc."""
        if worker.done:
            return Outcome(False, why="the producer had finished its input", touched=False)
        pid = worker.pid
        if pid is None:
            return not_yet("the worker is not running (being restarted)")
        if kind == "kill":
            code = worker.nemesis_kill()
            killed = code == -signal.SIGKILL
            return Outcome(
                killed, f"SIGKILL pid {pid}", "" if killed else f"it exited {code} first"
            )
        worker.signal(signal.SIGSTOP)
        state = wait_state(pid, {"T", "t", None, "Z"})
        stopped = state in ("T", "t")
        return Outcome(stopped, f"SIGSTOP pid {pid}", "" if stopped else f"state {state}")

    def _heal(self, fault: Fault, target: str, outcome: Outcome) -> None:
        assert self.topo is not None and self.net is not None
        if fault.kind in sparkpart.KINDS:
            assert self.spark is not None
            self.spark.heal(fault)
        elif fault.kind == CONSUMER_RESET:
            pass  # nothing to undo: the consumer delivers again what it had delivered
        elif fault.kind == "kill":
            worker = self.workers[target]
            if not worker.done and not worker.alive():
                worker.start()
        elif fault.kind == "pause":
            self.workers[target].signal(signal.SIGCONT)
        else:
            server_faults.heal(self.topo, self.net, fault.kind, target, outcome)

    def _skip(self, fault: Fault, target: str | None, why: str, how: str = "") -> None:
        entry = {**fault.as_dict(), "resolved": target, "skipped": True, "why": why}
        if how:
            entry["how"] = how
        self.fault_log.append(entry)
        self._note("skip", f"{fault.kind}:{target}", why)

    async def _start_due(self, now: float, pending: list[Fault], active: list[Any]) -> None:
        """Start the faults that are due. One whose target is busy, whose leader is
        unknown or whose precondition does not hold yet retries every 0.5 s, and is
        skipped (with the last reason) after :func:`max_wait` s; one whose effect was
        not seen is healed at once and skipped."""
        for fault in [f for f in pending if f.start <= now]:
            if self._retry_at.get(fault, 0.0) > now:
                continue
            turn = self.faults.index(fault)
            target = await self._resolve(fault, turn, now)
            held = server_faults.holds(fault.kind, target) if target else set()
            outcome: Outcome | None = None
            if target is None:
                why = "no stream leader known"
            elif held & self.busy:
                why = f"target busy ({', '.join(sorted(held & self.busy))})"
            else:
                size = self._server_log_size(fault, target)
                outcome = await self._apply(fault, target)
                why = outcome.why
                if outcome.landed:
                    pending.remove(fault)
                    self.busy |= held
                    entry = {**fault.as_dict(), "resolved": target, "how": outcome.how}
                    entry["waited_s"] = round(now - fault.start, 3)
                    entry["role_guessed"] = target != fault.target and self._leader is None
                    entry["wall_start"], entry["mono_start"] = time.time(), time.monotonic()
                    entry["log_from"] = size
                    self._note("fault", f"{fault.kind}:{target}", outcome.how)
                    ends = time.monotonic() - self._t0 + fault.duration
                    active.append((ends, fault, target, entry, held, outcome))
                    continue
                if outcome.touched:  # done but not seen: undo it, then report it
                    await asyncio.to_thread(self._heal, fault, target, outcome)
                if not outcome.retry:
                    pending.remove(fault)
                    self._skip(fault, target, why, outcome.how)
                    continue
            if now - fault.start < max_wait(fault.kind):
                self._retry_at[fault] = now + 0.5
                self._waiting[fault] = why
                continue
            pending.remove(fault)
            self._skip(fault, target, f"not started within {max_wait(fault.kind):g}s: {why}")

    def _server_log_size(self, fault: Fault, target: str) -> int:
        if fault.kind != "disk-full" or self.topo is None:
            return 0
        return server_faults.server_log_size(self.topo, target)

    async def _heal_due(self, now: float, active: list[Any], *, every: bool = False) -> None:
        for item in [a for a in active if every or a[0] <= now]:
            active.remove(item)
            _, fault, target, entry, held, outcome = item
            if fault.kind == "disk-full" and self.topo is not None:
                entry["server_enospc"] = server_faults.server_log_has(
                    self.topo, target, entry.pop("log_from"), "no space left on device"
                )
            entry.pop("log_from", None)
            await asyncio.to_thread(self._heal, fault, target, outcome)
            self.busy -= held
            entry["wall_end"], entry["mono_end"] = time.time(), time.monotonic()
            self._note("heal", f"{fault.kind}:{target}", "ok")
            self.fault_log.append(entry)

    # -- tfaults: end ----------------------------------------------------------------------

    # -- sabotage (the negative control) -------------------------------------------------

    def _sabotage_tick(self, now: float) -> None:
        """``drop-acked``: once half of the run is over, delete one acknowledged message
        of the producers' stream behind the system's back (``STREAM.MSG.DELETE``), in the
        background (a server under a fault may not answer for a while)."""
        if self.sabotage != "drop-acked" or self._sabotaged or now < self.duration / 2:
            return
        if self._sabotage_task is None or self._sabotage_task.done():
            self._sabotage_task = asyncio.create_task(self._drop_acked())

    def _sabotage_due(self) -> bool:
        """``drop-acked`` has not landed yet: the drain waits for it (up to its timeout);
        a negative control that ends before its sabotage lands proves nothing."""
        return self.sabotage == "drop-acked" and not self._sabotaged

    async def _drop_acked(self) -> None:
        acked = [
            h
            for h in _read_history(self.history)
            if h["op"] == "ack" and h["process"] == "pub" and "seq" in h
        ]
        if not acked:
            await asyncio.sleep(0.5)
            return
        victim = acked[len(acked) // 2]
        assert self.topo is not None
        target = self.topo.producer_target()
        seq = int(victim["seq"])
        if seq == 0:  # confirmed by a fast-ingest flow ack: a range, no sequence of its own
            seq = (
                await seq_of(target["servers"], STREAM, victim["key"], domain=target["domain"]) or 0
            )
        if seq and await delete_msg(target["servers"], STREAM, seq, domain=target["domain"]):
            self._sabotaged = True
            self._note("sabotage", victim["key"], f"drop-acked (seq {seq})")
        else:
            await asyncio.sleep(0.5)

    # -- run ---------------------------------------------------------------------------

    async def run(self) -> dict[str, Any]:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.work.mkdir(parents=True, exist_ok=True)
        try:
            with Net(self.run_id) as net:
                self.net = net
                self.topo = Topology(self.kind, net, self.work)
                try:
                    return await self._run()
                finally:
                    for worker in self.workers.values():
                        worker.kill()
                    self.topo.stop()
        finally:
            for log in self.work.glob("*/*.log"):  # the servers' logs
                shutil.copyfile(log, self.dir / f"server-{log.name}")
            shutil.rmtree(self.work, ignore_errors=True)

    async def _run(self) -> dict[str, Any]:
        assert self.topo is not None
        started = time.monotonic()
        if self.spark is not None:  # tspark: the JVM boots while the servers start
            self.workers[sparkpart.TARGET] = self.spark.start(self)
        self.topo.start()
        await self.topo.create_streams()
        pg_url = self._pg_url()
        if self.spark is not None:
            await self.spark.create_streams(self)
            await self.spark.wait_ready()
        t0 = self._t0 = time.monotonic()
        self.timing["setup_s"] = round(t0 - started, 3)
        self._workers(pg_url, time.time())
        self._note("trial", self.kind, "start", seed=self.seed)
        for worker in self.workers.values():
            if not worker.alive():  # the Spark driver is up already
                worker.start()
        pending = list(self.faults)
        active: list[Any] = []
        watch = asyncio.create_task(self._watch_leader()) if self.topo.clustered else None
        # The drain's look (several requests, slow while a server is down) runs in the
        # background, so faults keep starting and healing on time; only a look begun
        # with no fault pending or active can end the drain.
        check: asyncio.Task[bool] | None = None
        quiet = False
        next_check = 0.0
        try:
            while True:
                now = time.monotonic() - t0
                await self._start_due(now, pending, active)
                await self._heal_due(now, active)
                self._supervise()
                self._sabotage_tick(now)
                if now >= self.duration:
                    if "run_s" not in self.timing:
                        self.timing["run_s"] = round(now, 3)
                        self._note("trial", self.kind, "drain")
                    if check is not None and check.done():
                        if (
                            check.result()
                            and quiet
                            and not pending
                            and not active
                            and not self._sabotage_due()
                        ):
                            break
                        check = None
                    if check is None and time.monotonic() >= next_check:
                        next_check = time.monotonic() + 0.5
                        quiet = not pending and not active
                        check = asyncio.create_task(self._drained(now))
                    if now > self.duration + DRAIN_TIMEOUT:
                        self._note("trial", self.kind, "drain-timeout")
                        break
                await asyncio.sleep(TICK)
        finally:
            for task in (watch, check, self._sabotage_task):
                if task is not None:
                    task.cancel()
        await self._heal_due(0.0, active, every=True)
        for fault in pending:
            self._skip(fault, None, f"the drain ended first: {self._waiting.get(fault, '')}")
        self._note("trial", self.kind, "drained")
        self.timing["drain_s"] = round(time.monotonic() - t0 - self.timing["run_s"], 3)
        for name in PROCESSORS:
            if name in self.workers:
                self.workers[name].stop()
        if self.spark is not None:  # tspark: until it wrote what it can read
            target = self.topo.processor_target()
            await self.spark.drain(self, set(await self.stream_keys(target, target["stream"])))
            self._note("trial", self.kind, "spark-drained")
            if self.sabotage == "drop-row":
                key = self.spark.drop_row()
                self._note("sabotage", str(key), "drop-row (foreachBatch table)")
        return await self._final_state()

    def _supervise(self) -> None:
        for name, worker in self.workers.items():
            worker.supervise(in_fault=name in self.busy)

    async def _drained(self, now: float) -> bool:
        """One look: producers done, the hub caught up, every stored record applied."""
        assert self.topo is not None
        if not all(w.done for w in self.workers.values() if w.restart_until_done):
            return False
        if self.kind == "leaf":
            at_leaf = await self.message_count(self.topo.producer_target(), STREAM)
            at_hub = await self.message_count(self.topo.processor_target(), HUB_STREAM)
            if not at_leaf or at_hub < at_leaf:
                return False
            if self.sourced_after is None:
                self.sourced_after = round(now - self.duration, 3)
        target = self.topo.processor_target()
        stored = await self.message_count(target, target["stream"])
        return bool(stored) and all(len(c) >= stored for c in self._effects_now().values())

    def _effects_now(self) -> dict[str, set[str]]:
        out = {}
        for db, rows in self._effect_rows().items():
            out[db] = {r[0] for r in rows}
        return out

    def _effect_rows(self) -> dict[str, list[tuple[str, str, float, float]]]:
        rows: dict[str, list[tuple[str, str, float, float]]] = {}
        lite = self.dir / "lite.db"
        try:
            with sqlite3.connect(lite) as db:
                rows["sqlite"] = list(db.execute("SELECT key, proc, wall, mono FROM effects"))
        except sqlite3.Error:
            rows["sqlite"] = []
        if self.pg_admin is not None:
            import psycopg

            url = self.pg_admin.rsplit("/", 1)[0] + f"/torture_{self.run_id}"
            try:
                with psycopg.connect(url) as pg:
                    rows["postgres"] = list(pg.execute("SELECT key, proc, wall, mono FROM effects"))
            except psycopg.Error:
                rows["postgres"] = []
        return rows

    async def message_count(self, target: dict[str, Any], stream: str) -> int:
        """Messages in ``stream`` (STREAM.INFO: cheap to poll, unlike reading it all);
        0 while unknown (no answer, or only a leaderless replica's, see :func:`leader_count`)."""
        assert self.topo is not None
        try:
            async with await connect(self.topo.connect_options(target)) as conn:
                info = await conn.stream_info(stream)
        except Exception:
            return 0
        return leader_count(info)

    async def stream_keys(
        self, target: dict[str, Any], stream: str, *, strict: bool = False
    ) -> list[str]:
        """Keys of ``stream`` through the project's reader ([] on an error unless ``strict``)."""
        assert self.topo is not None
        keys: list[str] = []
        try:
            async with await connect(self.topo.connect_options(target)) as conn:
                async for chunk in read_stream(conn, stream):
                    keys += [record_key(bytes(r.data)) for r in chunk]
        except Exception:
            if strict:
                raise
            return []
        return keys

    async def _read_both(self, target: dict[str, Any], stream: str) -> dict[str, Any]:
        """``stream`` through both readers, and the server's own count.

        A stream no server answered for within the independent reader's wait is a
        finding about the servers or the fault schedule, not a harness crash: the read
        then holds ``unreadable`` (see :meth:`_unreadable`) and the checker reports it.
        """
        try:
            raw = await read_raw(target["servers"], stream, domain=target.get("domain"))
        except Unreadable as exc:
            return {"unreadable": await self._unreadable(target, stream, exc)}
        read: dict[str, Any] = {"raw": dict(raw.keys), "messages": raw.messages}
        if raw.errors:
            read |= {"waited_s": raw.waited_s, "failed_reads": len(raw.errors)}
            read["last_error"] = raw.errors[-1]
        try:
            read["project"] = dict(Counter(await self.stream_keys(target, stream, strict=True)))
        except Exception as exc:  # the product's reader failed where the raw one did not
            read |= {"project": {}, "project_error": f"{type(exc).__name__}: {exc}"}
        return read

    async def _unreadable(
        self, target: dict[str, Any], stream: str, exc: Unreadable
    ) -> dict[str, Any]:
        """What the independent reader, the product's reader and each server's
        monitoring endpoint said about a stream the independent reader could not read."""
        assert self.topo is not None
        try:
            async with asyncio.timeout(30):
                project: dict[str, Any] = {
                    "keys": len(await self.stream_keys(target, stream, strict=True))
                }
        except Exception as err:
            project = {"error": f"{type(err).__name__}: {err or 'no answer in 30 s'}"}
        return {
            "waited_s": exc.waited_s,
            "failed_reads": len(exc.errors),
            "errors": [*exc.errors[:1], *exc.errors[-3:]] if len(exc.errors) > 4 else exc.errors,
            "project_reader": project,
            "meta_leader": await asyncio.to_thread(self.topo.meta_leaders),
        }

    async def _final_state(self) -> dict[str, Any]:
        assert self.topo is not None
        reads = {STREAM: await self._read_both(self.topo.producer_target(), STREAM)}
        if self.kind == "leaf":
            reads[HUB_STREAM] = await self._read_both(self.topo.processor_target(), HUB_STREAM)
        rows = self._effect_rows()
        with open(self.history, "a") as f:
            for db, entries in rows.items():
                for key, proc, wall, mono in entries:
                    line = {"wall": wall, "mono": mono, "process": proc, "op": "apply"}
                    f.write(json.dumps({**line, "key": key, "result": db}) + "\n")
        spark = None
        if self.spark is not None:
            out = await self._read_both(self.topo.processor_target(), sparkpart.OUT_STREAM)
            reads[sparkpart.OUT_STREAM] = out
            spark = self.spark.final(out.get("raw"))
        cli = self.workers["cli"]
        state = {
            "index": self.index,
            "seed": self.seed,
            "kind": self.kind,
            "inputs": self.inputs,
            "processed_stream": self.topo.processor_target()["stream"],
            "streams": {
                s: r["raw"] for s, r in reads.items() if s != sparkpart.OUT_STREAM and "raw" in r
            },
            "reads": reads,
            "effects": {db: dict(Counter(r[0] for r in e)) for db, e in rows.items()},
            "pg_active": _switches(rows.get("postgres", [])),
            "faults": self.fault_log,
            "sourced_after_s": self.sourced_after,
            "spark": spark,
            "timing": self.timing,
            "worker_failures": [f for w in self.workers.values() for f in w.failures],
            "unfinished": [
                {"worker": n, "log_tail": w.run_log().splitlines()[-15:]}
                for n, w in self.workers.items()
                if w.restart_until_done and not w.done
            ],
            "startup_retries": _startup_retries(self.history, self.workers),
            "cli_resumes": cli.log.read_text(errors="replace").count("resuming ")
            if cli.log.exists()
            else 0,
            "sabotage": self.sabotage,
            "sabotaged": [
                {"key": h["key"], "how": h["result"]}
                for h in _read_history(self.history)
                if h["op"] == "sabotage"
            ],
        }
        (self.dir / "final-state.json").write_text(json.dumps(state))
        return state


def planned_faults(
    *,
    seed: int,
    kind: str,
    duration: float,
    faults: int,
    campaign_seed: int | None,
    ordinal: int,
    fault_kinds: tuple[str, ...],
    spark: bool,
    sabotage: str | None = None,
) -> list[Fault]:
    """A trial's whole fault schedule, from its seed and options alone (``--schedule``)."""
    menu = [(k, t) for k, t in fault_menu(kind) if not fault_kinds or k in fault_kinds]
    planned = fault_schedule(
        seed, kind, duration, faults, campaign_seed=campaign_seed, ordinal=ordinal, menu=menu
    )
    if spark:
        planned += sparkpart.spark_schedule(seed, duration, fault_kinds)
    if sabotage == "skip-position":  # a resume to skip a position in
        planned.append(Fault(round(duration * 0.4, 3), 1.0, "kill", "sess", "sabotage"))
    return sorted(planned, key=lambda f: f.start)


def _switches(rows: list[tuple[str, str, float, float]]) -> dict[str, Any]:
    """Which of the active/standby pair applied the effects: rows per instance, and how
    many times the applying instance changed (in apply order: takeovers, and a
    standby's in-flight batch racing the new active one)."""
    order = [proc for _, proc, _, _ in sorted(rows, key=lambda r: r[3])]
    changes = sum(1 for a, b in pairwise(order) if a != b)
    return {"rows": dict(Counter(order)), "switches": changes}


def _read_history(path: Path) -> list[dict[str, Any]]:
    out = []
    try:
        with open(path, encoding="utf-8") as f:
            for raw in f:
                try:
                    out.append(json.loads(raw))
                except ValueError:
                    continue
    except OSError:
        return []
    return out


def _startup_retries(history: Path, workers: dict[str, Worker]) -> dict[str, int]:
    """Start-up retries per worker: inside the Python workers, CLI runs restarted."""
    counts = Counter(h["key"] for h in _read_history(history) if h["op"] == "startup-retry")
    for name, worker in workers.items():
        if worker.startup_retries:
            counts[name] += worker.startup_retries
    return dict(counts)


__all__ = ["PRODUCERS", "SABOTAGE", "Trial", "planned_faults"]
