"""One trial: servers in namespaces, producers, processors, the nemesis, drain, final state."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import sqlite3
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from oncestream import connect
from oncestream.read._range import read_stream

from . import faults as server_faults
from . import spark as sparkpart
from .nemesis import PROCESSORS, Fault, Worker, fault_menu, python_argv, schedule
from .netns import Net
from .topology import HUB_STREAM, STREAM, SUBJECT, Topology
from .workers import EFFECTS, EFFECTS_COLUMNS

TICK = 0.1


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
    ) -> None:
        self.index, self.seed, self.kind, self.out = index, seed, kind, out
        self.run_id, self.duration, self.rate = f"{run_id}{index:02d}", duration, rate
        # -- tfaults: the fault schedule (a seeded cycle over the menu, see nemesis.schedule)
        menu = [(k, t) for k, t in fault_menu(kind) if not fault_kinds or k in fault_kinds]
        self.faults = schedule(
            seed, kind, duration, faults, campaign_seed=campaign_seed, ordinal=ordinal, menu=menu
        )
        self.timing: dict[str, float] = {}
        self._retry_at: dict[Fault, float] = {}
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
        self.sourced_after: float | None = None
        # -- tspark: one in --spark-every trials also runs the Spark job (torture/spark.py)
        self.spark = sparkpart.SparkPart(self.dir, seed) if spark else None
        if self.spark is not None:
            extra = sparkpart.spark_schedule(seed, duration, fault_kinds)
            self.faults = sorted([*self.faults, *extra], key=lambda f: f.start)

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

    def _workers(self, pg_url: str | None) -> None:
        assert self.topo is not None
        prod = self.topo.producer_target()
        proc = self.topo.processor_target()
        hist = str(self.history)
        base = {**prod, "stream": STREAM, "subject": SUBJECT, "history": hist}
        # The ProducerSession waits for each ack (~350/s on an R3 `sync_interval: always`
        # stream here), so it runs at half the Publisher's rate and has room to catch up.
        for name, role, share in (("pub", "publisher", 1), ("sess", "session", 2)):
            count, rate = self.count // share, self.rate / share
            cfg = {**base, "name": name, "count": count, "rate": rate, "t0": time.time()}
            self._add(name, python_argv(role, cfg), done=True)
        lines = self.dir / "cli-input.jsonl"
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
        ]
        for url in prod["servers"]:
            cli += ["-s", url]
        if prod["domain"]:
            cli += ["--domain", prod["domain"]]
        self._add("cli", cli, done=True)
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
                "history": hist,
            }
            self._add(name, python_argv("processor", cfg), done=False)

    def _add(self, name: str, argv: list[str], *, done: bool) -> None:
        self.workers[name] = Worker(name, argv, self.dir / f"{name}.log", restart_until_done=done)

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

    # -- faults ------------------------------------------------------------------------

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

    async def _apply(self, fault: Fault, target: str) -> str:
        assert self.topo is not None and self.net is not None
        if fault.kind in sparkpart.KINDS and self.spark is not None:
            return self.spark.apply(fault)
        if fault.kind == "kill":
            self.workers[target].kill()
        elif fault.kind == "pause":
            self.workers[target].signal(signal.SIGSTOP)
        else:
            return await asyncio.to_thread(
                server_faults.apply, self.topo, self.net, fault.kind, target
            )
        return "ok"

    def _heal(self, fault: Fault, target: str) -> None:
        assert self.topo is not None and self.net is not None
        if fault.kind in sparkpart.KINDS and self.spark is not None:
            return self.spark.heal(fault)
        if fault.kind == "kill":
            worker = self.workers[target]
            if not worker.done and not worker.alive():
                worker.start()
        elif fault.kind == "pause":
            self.workers[target].signal(signal.SIGCONT)
        else:
            server_faults.heal(self.topo, self.net, fault.kind, target)

    async def _start_due(self, now: float, pending: list[Fault], active: list[Any]) -> None:
        """Start the faults that are due; one whose target is busy (or whose leader is
        unknown) waits and retries every 0.5 s, skipped only when the phase ends first."""
        for fault in [f for f in pending if f.start <= now]:
            if self._retry_at.get(fault, 0.0) > now:
                continue
            turn = self.faults.index(fault)
            target = await self._resolve(fault, turn, now)
            held = server_faults.holds(fault.kind, target) if target else set()
            if target is None or held & self.busy:
                if now + 0.5 < self.duration:
                    self._retry_at[fault] = now + 0.5
                    continue
                pending.remove(fault)
                entry = {**fault.as_dict(), "resolved": target, "skipped": True}
                entry["why"] = "no stream leader" if target is None else "target busy"
                self.fault_log.append(entry)
                continue
            pending.remove(fault)
            self.busy |= held
            entry = {**fault.as_dict(), "resolved": target, "waited_s": round(now - fault.start, 3)}
            entry["role_guessed"] = target != fault.target and self._leader is None
            entry["how"] = await self._apply(fault, target)
            if entry["how"].startswith("skipped"):  # tspark: e.g. no Spark Python worker yet
                entry["skipped"], entry["why"] = True, entry.pop("how")
                self.busy -= held
                self.fault_log.append(entry)
                continue
            entry["wall_start"], entry["mono_start"] = time.time(), time.monotonic()
            self._note("fault", f"{fault.kind}:{target}", entry["how"])
            ends = time.monotonic() - self._t0 + fault.duration
            active.append((ends, fault, target, entry, held))

    def _heal_due(self, now: float, active: list[Any]) -> None:
        for item in [a for a in active if a[0] <= now]:
            active.remove(item)
            _, fault, target, entry, held = item
            self._heal(fault, target)
            self.busy -= held
            entry["wall_end"], entry["mono_end"] = time.time(), time.monotonic()
            self._note("heal", f"{fault.kind}:{target}", "ok")
            self.fault_log.append(entry)

    # -- tfaults: end ----------------------------------------------------------------------

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
        self._started = time.monotonic()
        if self.spark is not None:  # tspark: the JVM boots while the servers start
            self.workers[sparkpart.TARGET] = self.spark.start(self)
        self.topo.start()
        await self.topo.create_streams()
        pg_url = self._pg_url()
        self._workers(pg_url)
        if self.spark is not None:
            await self.spark.create_streams(self)
            await self.spark.wait_ready()
        t0 = self._t0 = time.monotonic()
        self.timing["setup_s"] = round(t0 - self._started, 3)
        self._note("trial", self.kind, "start", seed=self.seed)
        for worker in self.workers.values():
            if not worker.alive():  # the Spark driver is up already
                worker.start()
        pending = list(self.faults)
        active: list[Any] = []
        watch = asyncio.create_task(self._watch_leader()) if self.topo.clustered else None
        try:
            while time.monotonic() - t0 < self.duration or active or pending:
                now = time.monotonic() - t0
                await self._start_due(now, pending, active)
                self._heal_due(now, active)
                self._supervise()
                await asyncio.sleep(TICK)
        finally:
            if watch is not None:
                watch.cancel()
        self._note("trial", self.kind, "faults-over")
        self.timing["faults_s"] = round(time.monotonic() - t0, 3)
        await self._drain()
        self.timing["drain_s"] = round(time.monotonic() - t0 - self.timing["faults_s"], 3)
        return await self._final_state(pg_url)

    def _supervise(self) -> None:
        for name, worker in self.workers.items():
            worker.supervise(in_fault=name in self.busy)

    async def _drain(self, timeout: float = 120.0) -> None:
        """Producers finish, then processors catch up with the processed stream."""
        assert self.topo is not None
        deadline = time.monotonic() + timeout
        producers = [w for w in self.workers.values() if w.restart_until_done]
        while time.monotonic() < deadline and not all(w.done for w in producers):
            self._supervise()
            await asyncio.sleep(0.2)
        if self.workers["cli"].done:
            with open(self.history, "a") as f:
                for i in range(self.count // 2):  # exit 0: every line is stored and acked
                    f.write(
                        json.dumps(
                            {
                                "wall": time.time(),
                                "mono": time.monotonic(),
                                "process": "cli",
                                "op": "ack",
                                "key": f"cli-{i}",
                                "result": "exit 0",
                            }
                        )
                        + "\n"
                    )
        if self.kind == "leaf":
            await self._wait_sourced(deadline)
        target = self.topo.processor_target()
        stream = target["stream"]
        while time.monotonic() < deadline:
            self._supervise()
            stored = await self._count(target, stream)
            if stored and all(len(c) >= stored for c in self._effects_now().values()):
                break
            await asyncio.sleep(0.5)
        self._note("trial", self.kind, "drained")
        for name in PROCESSORS:
            if name in self.workers:
                self.workers[name].stop()
        if self.spark is not None:  # tspark
            await self.spark.drain(self, set(await self._keys(target, stream)))
            self._note("trial", self.kind, "spark-drained")

    async def _wait_sourced(self, deadline: float) -> None:
        """Wait (bounded) until the hub's stream holds every record of the leaf's."""
        assert self.topo is not None
        start = time.monotonic()
        leaf, hub = self.topo.producer_target(), self.topo.processor_target()
        while time.monotonic() < deadline:
            self._supervise()
            at_leaf = await self._count(leaf, STREAM)
            at_hub = await self._count(hub, HUB_STREAM)
            if at_leaf and at_hub >= at_leaf:
                self.sourced_after = round(time.monotonic() - start, 3)
                return
            await asyncio.sleep(0.5)

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

    async def _count(self, target: dict[str, Any], stream: str) -> int:
        """Messages in ``stream`` (STREAM.INFO: cheap to poll, unlike reading it all)."""
        assert self.topo is not None
        try:
            async with await connect(self.topo.connect_options(target)) as conn:
                info = await conn.stream_info(stream)
        except Exception:
            return 0
        return int((info.get("state") or {}).get("messages", 0))

    async def _keys(self, target: dict[str, Any], stream: str) -> list[str]:
        assert self.topo is not None
        keys: list[str] = []
        try:
            async with await connect(self.topo.connect_options(target)) as conn:
                async for chunk in read_stream(conn, stream):
                    keys += [_key(bytes(r.data)) for r in chunk]
        except Exception:
            return []
        return keys

    async def _final_state(self, pg_url: str | None) -> dict[str, Any]:
        assert self.topo is not None
        streams = {STREAM: Counter(await self._keys(self.topo.producer_target(), STREAM))}
        if self.kind == "leaf":
            target = self.topo.processor_target()
            streams[HUB_STREAM] = Counter(await self._keys(target, HUB_STREAM))
        rows = self._effect_rows()
        with open(self.history, "a") as f:
            for db, entries in rows.items():
                for key, proc, wall, mono in entries:
                    f.write(
                        json.dumps(
                            {
                                "wall": wall,
                                "mono": mono,
                                "process": proc,
                                "op": "apply",
                                "key": key,
                                "result": db,
                            }
                        )
                        + "\n"
                    )
        state = {
            "index": self.index,
            "seed": self.seed,
            "kind": self.kind,
            "processed_stream": self.topo.processor_target()["stream"],
            "streams": {s: dict(c) for s, c in streams.items()},
            "effects": {db: dict(Counter(r[0] for r in e)) for db, e in rows.items()},
            "faults": self.fault_log,
            "sourced_after_s": self.sourced_after,
            "spark": None if self.spark is None else await self.spark.final(self),
            "timing": self.timing,
            "worker_exits": {n: w.exits for n, w in self.workers.items() if w.exits},
            "unfinished": [
                n for n, w in self.workers.items() if w.restart_until_done and not w.done
            ],
        }
        (self.dir / "final-state.json").write_text(json.dumps(state))
        return state


def _key(data: bytes) -> str:
    """The record key: the payload, or the ``id`` field of a CLI JSON record."""
    text = data.decode(errors="replace")
    if text.startswith("{"):
        try:
            return str(json.loads(text)["id"])
        except (ValueError, KeyError):
            return text
    return text
