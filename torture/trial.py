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
import errno
import json
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from itertools import pairwise
from pathlib import Path
from typing import Any

from oncestream import StreamNotFound, connect
from oncestream.process import partition_consumer
from oncestream.read import read_stream
from oncestream.streams import Partitioning, ResetTarget, consumer_info, reset_consumer

from . import faults as server_faults
from . import postgres as pgpart
from . import spark as sparkpart
from . import storefaults
from .checker import database_of
from .faults import NOT_APPLICABLE, Outcome, fill, not_yet
from .nemesis import (
    CONSUMER_RESET,
    PROCESSORS,
    PRODUCERS,
    Fault,
    Worker,
    crash_fault,
    fault_menu,
    max_wait,
    python_argv,
    stack_menu,
    wait_state,
)
from .nemesis import schedule as fault_schedule
from .netns import Net
from .options import PARTITIONS, SHORT_WINDOW, TrialOptions, failing_key
from .rawread import Unreadable, delete_msg, read_once, read_raw, record_key, seq_of
from .topology import (
    HUB_STREAM,
    PUB_STREAM,
    PUB_SUBJECT,
    STREAM,
    SUBJECT,
    Topology,
    stream_spec,
)
from .workers import EFFECTS, EFFECTS_COLUMNS

TICK = 0.1
#: consumer-reset: the ack floor a consumer must have passed, and how far back the
#: reset that does not go to the stream's first sequence moves it.
RESET_MIN_FLOOR, RESET_BACK = 20, 300


def _breaks_quorum(kind: str, held: set[str]) -> bool:
    """Whether a fault stops a server or cuts one off (a degrade slows its links, and
    holds them only so that no cut overlaps it: a quorum survives it)."""
    if kind in ("degrade", "degrade-pair"):
        return False
    return any(h.split(":", 1)[0] in ("srv", "link", "cut") for h in held)


#: Faults of every node of a cluster (they hold every ``srv:``).
WHOLE_CLUSTER = ("cluster-kill", "power-loss")


def _held_back(kind: str, held: set[str], membership_due: bool, whole_due: bool) -> str | None:
    """Why a fault waits for a due fault that reserves the servers (None: it need not).

    A due membership change needs a quorum (no server stopped or cut off), so it also
    holds back a fault of every node (a cluster-kill in its wait left a trial's change
    without a current replacement, seed 52 at 89c1ba0); a due fault of every node needs
    every server free, and a membership change is not held back by it (the change
    waits for active server faults itself).
    """
    if kind == "membership":
        return None
    if membership_due and _breaks_quorum(kind, held):
        return "a membership change is due"
    if kind in WHOLE_CLUSTER:
        return None
    if whole_due and any(h.startswith("srv:") for h in held):
        return "a fault of every node is due"
    return None


#: Seconds a node must have been up to take a membership change's replica.
REPLACEMENT_UP = 5.0
#: The drain gives up (and the checker counts what is missing) after this long.
DRAIN_TIMEOUT = 120.0
#: The drain bound of a trial whose ``truncate-all`` sabotage landed (see _drain_timeout).
BROKEN_DRAIN = 15.0
#: Negative-control modes (``--sabotage``): each breaks the system's effect once, in a
#: way only the checker's real checks can notice.
SABOTAGE = (
    "drop-acked",
    "store-twice",
    "apply-twice",
    "skip-position",
    "drop-row",
    "drop-letter",
    "drop-pg-effect",
    "truncate-all",
)
#: The modes that break the producers' stream once half of the run is over.
STREAM_SABOTAGE = ("drop-acked", "store-twice")
CLI_INPUT = "cli-input.jsonl"
#: The dead-letter stream of trials whose handlers fail for a share of the keys.
DLQ = "DLQ"
#: The SQLite ledger's file system (the ``ledger-full`` fault fills it).
LEDGER_TMPFS = 24 * 1024 * 1024
#: ``sync_interval`` per trial kind ("default": nats-server's 2 minutes).
SYNC = {"single": "always", "cluster": "default", "leaf": "default", "cluster-sync": "always"}
#: Fault kinds that throw away what a node had not fsynced (an OS crash).
LOST_PAGE_CACHE = storefaults.CRASH_KINDS
#: Seconds of "stream not found" after such a crash before the drain takes the stream
#: for gone (Jepsen's power loss took whole streams with the default sync; so here).
GONE_AFTER = 15.0
#: Seconds of "not found" that confirm, at the final read, a stream the drain took for gone.
GONE_CONFIRM = 1.0
#: Why a membership change did not start in a trial whose stream a lost page cache took
#: (:meth:`Trial.stream_gone`): the report counts it apart, as not applicable, in a trial
#: reporting that loss as a measured limit (:func:`torture.report.landing`).
STREAM_LOST = (
    f"{NOT_APPLICABLE} the stream is gone (an OS crash under the default sync took it: "
    "a measured limit)"
)


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
        pg_template: Path | None,
        campaign_seed: int | None = None,
        ordinal: int = 0,
        fault_kinds: tuple[str, ...] = (),
        spark: bool = False,
        sabotage: str | None = None,
        spark_mode: dict[str, Any] | None = None,
        options: TrialOptions | None = None,
        stack_faults: int = 0,
    ) -> None:
        self.index, self.seed, self.kind, self.out = index, seed, kind, out
        self.run_id, self.duration, self.rate = f"{run_id}{index:02d}", duration, rate
        self.sabotage = sabotage
        self.options = options or TrialOptions()
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
            stack_faults=stack_faults,
            spark_mode=spark_mode,
        )
        self.timing: dict[str, float] = {}
        self._retry_at: dict[Fault, float] = {}
        self._waiting: dict[Fault, str] = {}
        #: When a fault's wait (:func:`max_wait`) began: its start, or the last time a
        #: due fault that reserves the servers held it back (that wait is the other's:
        #: :func:`_held_back`).
        self._wait_from: dict[Fault, float] = {}
        self._leader: str | None = None
        self._peers: list[str] = []
        self.pg_template = pg_template
        self.postgres: pgpart.TrialPostgres | None = None
        self.pg_url: str | None = None
        self.ledger_mount: Path | None = None
        self.dir = out / f"trial-{index:03d}-{kind}"
        self.work = Path(f"/tmp/oncestream-torture-{self.run_id}")
        self.history = self.dir / "history.jsonl"
        self.workers: dict[str, Worker] = {}
        self.busy: set[str] = set()
        #: The active faults: (ends, fault, target, log entry, held, outcome).
        self._active: list[Any] = []
        self.fault_log: list[dict[str, Any]] = []
        self.topo: Topology | None = None
        self.net: Net | None = None
        self.count = int(rate * duration)
        self.short = self.options.window == "short"
        # members=partitioned: the processed stream in partitions, its PostgreSQL consumer
        # a group (torture/options.py); the leaf's hub sources it, so it cannot be.
        if self.options.members == "partitioned" and kind == "leaf":
            raise ValueError(
                "members=partitioned needs a processed stream with no sources "
                "(a leaf trial's is the hub's: torture.__main__.trial_options)"
            )
        self.partitioning = (
            stream_spec(replicas=1, window=None, partitions=PARTITIONS).partitioning
            if self.options.members == "partitioned"
            else None
        )
        # The Publisher relies on the duplicate window by design: with a short one it
        # writes its own stream (the default window), checked but not processed.
        pub_stream = PUB_STREAM if self.short else STREAM
        self.inputs: dict[str, dict[str, Any]] = {
            "pub": {"positions": self.count, "stream": pub_stream, "processed": not self.short},
            "sess": {"positions": self.count // 2, "stream": STREAM, "processed": True},
            "cli": {"file": str(self.dir / CLI_INPUT), "id_field": "id", "stream": STREAM,
                    "processed": True},
        }  # fmt: skip
        self.replays: list[Worker] = []
        self._replay_look: asyncio.Task[bool] | None = None
        self._not_found: dict[str, float] = {}
        self._replay_next = 0.0
        self.sourced_after: float | None = None
        self._sabotaged = False
        self._sabotage_task: asyncio.Task[None] | None = None
        self._t0 = 0.0
        # -- tspark: one in --spark-every trials also runs the Spark job (torture/spark.py)
        spark_options = {k: v for k, v in self.options.as_dict().items()
                         if k in ("sink_stream", "spark_out", "pyspark")}  # fmt: skip
        self.spark = (
            sparkpart.SparkPart(self.dir, seed, spark_mode or {}, spark_options) if spark else None
        )

    # -- setup -------------------------------------------------------------------------

    def _start_postgres(self) -> str | None:
        """The trial's PostgreSQL in namespace ``pg``; the database URL (None: no PostgreSQL)."""
        if self.pg_template is None:
            return None
        assert self.net is not None
        address = self.net.add_node(pgpart.NODE)
        for node in pgpart.MEMBER_NODES.values():
            self.net.add_node(node)
        self.postgres = pgpart.TrialPostgres(
            self.pg_template, self.work, address, self.net.exec_prefix(pgpart.NODE)
        )
        self.postgres.start()
        self._track_postgres()
        import psycopg

        db = f"torture_{self.run_id}"
        with psycopg.connect(self.postgres.admin_url, autocommit=True) as pg:
            pg.execute(f"CREATE DATABASE {db}")
        url = self.postgres.url(db)
        with psycopg.connect(url, autocommit=True) as pg:  # before two processors race to it
            pg.execute(f"CREATE TABLE {EFFECTS} {EFFECTS_COLUMNS}")
        self.pg_url = url
        return url

    def _track_postgres(self) -> None:
        assert self.net is not None and self.postgres is not None
        for pid in [*self.postgres.processes()[:1], self.postgres.pid or 0]:
            if pid:
                self.net.track_pid(pid)  # a crashed run's cleanup kills it

    def _mount_ledger(self) -> Path:
        """The SQLite ledger's own small tmpfs (the ``ledger-full`` fault fills it)."""
        assert self.net is not None
        mount = self.work / "ledger"
        mount.mkdir(parents=True, exist_ok=True)
        self.net.track_mount(str(mount))
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={LEDGER_TMPFS}", "tmpfs",
                        str(mount)], check=True, timeout=20)  # fmt: skip
        self.ledger_mount = mount
        return mount

    def _workers(self, pg_url: str | None, t0_wall: float) -> None:
        """Every worker, paced from ``t0_wall`` (the trial's start, wall clock)."""
        assert self.topo is not None and self.net is not None
        prod = self.topo.producer_target()
        proc = self.topo.processor_target()
        hist = str(self.history)
        base = {**prod, "history": hist, "t0": t0_wall}
        # The ProducerSession waits for each ack (~350/s on an R3 `sync_interval: always`
        # stream here), so it runs at half the Publisher's rate and has room to catch up.
        for name, role, share in (("pub", "publisher", 1), ("sess", "session", 2)):
            stream = self.inputs[name]["stream"]
            subject = PUB_SUBJECT if stream == PUB_STREAM else SUBJECT
            cfg = {**base, "name": name, "count": self.count // share, "rate": self.rate / share,
                   "stream": stream, "subject": subject}  # fmt: skip
            if name == "sess" and self.sabotage == "skip-position":
                cfg |= {"sabotage": self.sabotage, "marker": str(self.dir / "sabotage-skip")}
            self._add(name, python_argv(role, cfg), done=True)
        lines = self.dir / CLI_INPUT
        with open(lines, "w") as f:
            for i in range(self.count // 2):
                f.write(json.dumps({"id": f"cli-{i}", "n": i}) + "\n")
        cli = [str(Path(sys.executable).parent / "oncestream"), "publish", str(lines),
               "--stream", STREAM, "--subject", f"{SUBJECT}.cli", "--id-field", "id",
               "--no-progress", "--rate", f"{self.rate / 2:g}"]  # fmt: skip
        if self.short:
            # The retry horizon a user must pick to fit a 4 s window (the CLI's window guard
            # refuses the default 27 s): a fault outlasting it ends a run with exit 1, and
            # the re-run resumes from the progress records, beyond the window.
            cli += ["--ack-timeout", "1s", "--max-attempts", "3"]
        for url in prod["servers"]:
            cli += ["-s", url]
        if prod["domain"]:
            cli += ["--domain", prod["domain"]]
        self._add("cli", cli, done=True, cli=True)
        # Every producer's exit 1 that asks to be re-run is its contract, not a failure: an
        # outage past the retry horizon (the defaults' 5 s x 5 attempts; a cluster without
        # quorum outlasts it) fails the publish for good, and the re-run resumes exactly.
        # The checker still checks every record stored once.
        for name in ("pub", "sess", "cli"):
            self.workers[name].rerun_ok = True
        for name, cfg in self._processor_configs(pg_url).items():
            cfg = {**proc, "history": hist, "options": self.options.as_dict(), "dlq": DLQ, **cfg}
            if name == "lite" and self.sabotage == "apply-twice":
                cfg |= {"sabotage": self.sabotage, "sabotage_key": "sess-10"}
            argv = python_argv(cfg.pop("role", "processor"), cfg)
            if name in pgpart.MEMBER_NODES:  # in its own namespace: a pg-cut reaches one
                argv = [*self.net.exec_prefix(pgpart.MEMBER_NODES[name]), *argv]
            self._add(name, argv, done=False)

    def _processor_configs(self, pg_url: str | None) -> dict[str, dict[str, Any]]:
        """The processors of the trial (``options.members``): the SQLite ``Processor``
        (consumer ``lite``) and, with PostgreSQL, ``pg1`` and ``pg2``: active/standby on
        consumer ``pg`` (``pinned-pair``), or two members of group ``pg`` over the
        partitioned stream (``partitioned``: role ``member``, a consumer ``pg-p<N>`` per
        partition) sharing the PostgreSQL ledger. Each runs in a namespace of its own
        (``pgpart.MEMBER_NODES``), so a pg-cut reaches one; kills and pauses hit them as
        they hit the pair (a rebalance when one outlasts the membership key). The
        checker needs nothing new: every key once per database, whoever applied it.
        """
        lite = str((self.ledger_mount or self.dir) / "lite.db")
        configs: dict[str, dict[str, Any]] = {
            "lite": {"name": "lite", "ledger": lite, "consumer": "lite", "pinned": False}
        }
        if pg_url:
            for name in ("pg1", "pg2"):
                if self.partitioning is not None:
                    configs[name] = {"name": name, "ledger": pg_url, "consumer": "pg",
                                     "pinned": False, "role": "member"}  # fmt: skip
                else:  # active/standby on one consumer
                    configs[name] = {"name": name, "ledger": pg_url, "consumer": "pg",
                                     "pinned": True}  # fmt: skip
        for cfg in configs.values():
            cfg["table"] = EFFECTS
        return configs

    def pg_consumers(self) -> list[str]:
        """The durable consumers the PostgreSQL processors apply through (none without
        PostgreSQL): ``pg``, or one per partition, ``pg-p0`` ... ``pg-p3``."""
        if self.pg_url is None:
            return []
        if self.partitioning is None:
            return ["pg"]
        return [partition_consumer("pg", p) for p in range(self.partitioning.partitions)]

    def busy_partitions(self) -> list[int]:
        """The partitions the processed producers' subjects map to (the others get
        nothing); [] when the stream is not partitioned."""
        if self.partitioning is None:
            return []
        processed = [n for n, spec in self.inputs.items() if spec.get("processed", True)]
        return sorted({self.partitioning.partition_of(f"{SUBJECT}.{n}") for n in processed})

    def replay_argv(self) -> list[str]:
        """``oncestream dlq replay --all``: every dead letter, as an operator replays them
        once the handler is fixed. Every consumer failed each of them (one shared handler)
        and wrote its own letter; each letter's copy is applied once, by its consumer only."""
        assert self.topo is not None
        target = self.topo.processor_target()
        argv = [str(Path(sys.executable).parent / "oncestream"), "dlq", "replay", DLQ,
                "--all", "--force"]  # fmt: skip
        for url in target["servers"]:
            argv += ["-s", url]
        if target["domain"]:
            argv += ["--domain", target["domain"]]
        return argv

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
            peers = await self.topo.peers_now()  # bounded by its connect/request timeouts
            self._leader = peers[0] if peers else None
            if peers:
                self._peers = peers
            await asyncio.sleep(0.3)

    async def _resolve(self, fault: Fault, turn: int, now: float) -> str | None:
        """Concrete target; with no known stream leader for 1.5 s (e.g. the cluster is
        still electing after a restart), roles are guessed (any node) rather than skipped."""
        leader = self._leader
        peers = self._peers or ["c1", "c2", "c3"]
        if leader is None and now - fault.start >= 1.5:
            leader = peers[turn % len(peers)]
            peers = [leader, *(p for p in peers if p != leader)]
        return server_faults.resolve(fault.target, leader, self.busy, fault.kind, turn, peers)

    async def _apply(self, fault: Fault, target: str) -> Outcome:
        assert self.topo is not None and self.net is not None
        if fault.kind in sparkpart.ALL_KINDS:
            assert self.spark is not None
            return await asyncio.to_thread(self.spark.apply, fault)
        if (
            fault.phase == "sabotage"
            and fault.kind == "kill"
            and not any(
                h["op"] == "ack" and h["process"] == target for h in _read_history(self.history)
            )
        ):  # skip-position: the kill must come after a stored record, to resume after it
            return not_yet(f"no ack of {target} yet")
        if fault.kind in ("kill", "pause"):
            if target not in self.workers:  # pg1/pg2 with --no-postgres
                return Outcome(False, why=f"no worker {target} in this run", touched=False)
            return await asyncio.to_thread(self._apply_worker, fault.kind, self.workers[target])
        if fault.kind == CONSUMER_RESET:
            turn = self.faults.index(fault) if fault in self.faults else 0
            return await self._reset_consumer(target, turn)
        if fault.kind in pgpart.KINDS:
            return await asyncio.to_thread(self._apply_pg, fault.kind, target)
        if fault.kind == "ledger-full":
            return await asyncio.to_thread(self._fill_ledger)
        if fault.kind == "truncate-all":  # the sabotage: every node's copy at once
            outcome = await asyncio.to_thread(storefaults.truncate_all, self.topo, STREAM)
            if outcome.landed:
                self._note("sabotage", "all", outcome.how[:300])
            return outcome
        if fault.kind in storefaults.CORRUPT_KINDS:
            rng = random.Random(f"{self.seed}:{fault.start}")
            return await asyncio.to_thread(
                storefaults.corrupt, self.topo, fault.kind, target, rng, STREAM
            )
        if fault.kind in storefaults.CRASH_KINDS:
            nodes = self.topo.members() if fault.kind == "power-loss" else [target]
            return await asyncio.to_thread(storefaults.lose_page_cache, self.topo, nodes)
        if fault.kind == "membership":
            return await self._membership(target)
        outcome = await asyncio.to_thread(
            server_faults.apply, self.topo, self.net, fault.kind, target
        )
        return outcome

    def _apply_pg(self, kind: str, target: str) -> Outcome:
        """``pg-kill`` / ``pg-pause`` / ``pg-cut`` (:mod:`torture.postgres`)."""
        assert self.net is not None
        pg = self.postgres
        if pg is None:
            return Outcome(False, why="no PostgreSQL in this run", touched=False)
        pid = pg.pid
        if pid is None or wait_state(pid, {None, "Z"}, timeout=0) in (None, "Z"):
            return not_yet("PostgreSQL is not running")
        if kind == "pg-kill":
            pids = pg.kill()
            gone = wait_state(pid, {None, "Z"}) in (None, "Z")
            how = f"SIGKILL {len(pids)} PostgreSQL processes (postmaster pid {pid})"
            return Outcome(gone, how, "" if gone else "the postmaster is still there")
        if kind == "pg-pause":
            pids = pg.signal_all(signal.SIGSTOP)
            state = wait_state(pid, {"T", "t"})
            how = f"SIGSTOP {len(pids)} PostgreSQL processes (postmaster pid {pid})"
            return Outcome(state in ("T", "t"), how, f"postmaster state {state}")
        member = pgpart.MEMBER_NODES[target]
        self.net.cut(member, pgpart.NODE)
        seen = self.net.probe(self.net.nodes[pgpart.NODE], pgpart.PORT, src=member)
        cut = seen in ("timeout", "unreachable")
        how = f"tc bpf drop both ways {target} ({member}) <-> PostgreSQL; probe: {seen}"
        return Outcome(cut, how, "" if cut else f"the member still reaches it: {seen}")

    def _fill_ledger(self) -> Outcome:
        if self.ledger_mount is None:
            why = "the SQLite ledger has no file system of its own"
            return Outcome(False, why=why, touched=False)
        code, written = fill(self.ledger_mount / "filler")
        full = code == errno.ENOSPC
        how = f"ledger tmpfs filled: {written // (1 << 20)} MiB written, then " + (
            errno.errorcode.get(code, str(code)) if code is not None else "no error"
        )
        return Outcome(full, how, "" if full else f"the filler stopped without ENOSPC ({code})")

    async def _membership(self, victim: str) -> Outcome:
        """A stream peer removed and a fresh node added (:mod:`torture.storefaults`)."""
        assert self.topo is not None
        topo = self.topo
        # Another node killed, paused or cut off at the same time leaves the meta group
        # (and the stream) without a quorum once the victim dies: STREAM.PEER.REMOVE then
        # times out (the "peer set did not change" skip of trial 1 at 1305b40, c3 removed
        # while c2 was paused). Wait for those faults to heal; none starts meanwhile, as
        # this call holds the nemesis loop until the removal is answered.
        others = sorted(
            f"{fault.kind}:{target}"
            for _, fault, target, _, held, _ in self._active
            if _breaks_quorum(fault.kind, held)
        )
        if others:
            return not_yet(f"another server fault is active ({', '.join(others)})")
        cluster = await topo.stream_cluster()
        peers = topo.peers_of(cluster)
        if len(peers) < 3 or victim not in peers:
            await self.message_count(topo.producer_target(), STREAM)  # notes a "not found"
            if self.stream_gone(STREAM):  # no stream left to change the peers of
                return Outcome(False, why=STREAM_LOST, retry=False, touched=False)
            return not_yet(f"stream peers {peers}: {victim} is not one of three")
        down = [n for n in peers if topo.servers[n].pid is None]
        if down:
            return not_yet(f"stream peers down: {down}")
        # The peers that stay must hold the stream whole: removing one while another is
        # still catching up (restarted after a truncation or a lost page cache) leaves
        # no complete replica but the leader, and a cut then left the stream without a
        # leader for good (trial 4 of a seed-62 run at 9484596: c3 truncated, c1's page
        # cache lost, then c1 removed).
        behind = [n for n in topo.behind_of(cluster) if n != victim]
        if behind:
            return not_yet(f"stream replicas not current: {behind}")
        spare = topo.spare
        if spare is not None and spare not in topo.started:
            await asyncio.to_thread(topo.restart, spare)  # the fresh node joins the cluster
            self._track_servers()
        # A replacement must be a current peer of the meta group before the removal:
        # otherwise the stream stays on two peers (the "peer set did not change" skips).
        # ... and up for a while: an earlier victim restarted a moment ago was refused
        # ("no replacement available") although current (its stats not in yet).
        others = [n for n in topo.started if n not in peers and topo.servers[n].pid is not None]
        settled = [
            n for n in others if time.monotonic() - topo.started_at.get(n, 0.0) >= REPLACEMENT_UP
        ]
        current = [n for n in settled if await asyncio.to_thread(topo.meta_current, n)]
        if not current:
            return not_yet(f"no replacement up and current for the meta group (of {others})")
        # The victim leading the meta group: its death costs an election (6-8 s here)
        # before STREAM.PEER.REMOVE is answered (2 of the 3 skips of a membership-only
        # run at 8d63283 waited 10 s for it). Longer then, holding the nemesis loop.
        leaders = await asyncio.to_thread(topo.meta_leaders)
        meta_led = victim in {leader.split("/")[0] for leader in leaders.values() if leader}
        pid = storefaults.kill_node(topo, victim)
        storefaults.wipe(topo, victim)
        wait = 25.0 if meta_led else 10.0
        result = await storefaults.remove_peer(topo, victim, STREAM, timeout=wait)
        how = f"SIGKILL {victim} pid {pid}, store wiped, STREAM.PEER.REMOVE: {result}"
        removed = bool(result.get("removed"))
        return Outcome(removed, how[:400], "" if removed else "the peer set did not change")

    def _track_servers(self) -> None:
        assert self.topo is not None and self.net is not None
        for server in self.topo.servers.values():
            if server.pid is not None and server.pid not in self.net.state["pids"]:
                self.net.track_pid(server.pid)

    async def _reset_consumer(self, consumer: str, turn: int) -> Outcome:
        """Move a processor's consumer back (``CONSUMER.RESET``, the product's
        :func:`~oncestream.streams.reset_consumer`; ``pg`` of a group: the consumer of one
        partition that gets messages, in turn): alternately to the stream's first
        sequence and to :data:`RESET_BACK` sequences below its ack floor. Needs the
        consumer to have acked past the target; when it has not (its PostgreSQL paused or
        cut off so far: 3 of the 20 attempts of the 9372e75 sweep were skipped so), the
        other processor's consumer is reset instead (``how`` names the one reset). Landed
        when the server's answer puts the next delivery at or below the ack floor it had
        (its ledger has no prune horizon: ``prune_interval=0``, so no target is refused)."""
        assert self.topo is not None
        first = self._reset_target(consumer, turn)
        if first is None:
            return Outcome(False, why="no PostgreSQL processors in this run", touched=False)
        other = self._reset_target("lite" if consumer == "pg" else "pg", turn)
        names = [first, *([other] if other is not None else [])]
        target = self.topo.processor_target()
        stream = target["stream"]
        short = []
        try:
            async with asyncio.timeout(5):  # the loop waits: heals must not wait long
                async with await connect(self.topo.connect_options(target)) as conn:
                    for name in names:
                        info = await consumer_info(conn, stream, name)
                        floor = int((info.get("ack_floor") or {}).get("stream_seq", 0))
                        if floor < RESET_MIN_FLOOR:
                            short.append(f"consumer {name} acked up to seq {floor} only")
                            continue
                        to = (
                            ResetTarget(start=True)
                            if turn % 2 == 0
                            else ResetTarget(seq=max(1, floor - RESET_BACK))
                        )
                        done = await reset_consumer(conn, stream, name, to)
                        break
                    else:
                        return not_yet("; ".join(short))
        except Exception as exc:  # no answer now (a fault of the servers): try again
            return not_yet(f"consumer {names}: {type(exc).__name__}: {exc}"[:200])
        how = f"{stream}/{name} from ack floor {floor} to seq {done.seq} ({to.describe()})"
        back = 0 < done.seq <= floor
        return Outcome(back, how, "" if back else f"reset to seq {done.seq}, not below {floor}")

    def _reset_target(self, consumer: str, turn: int) -> str | None:
        """The durable consumer a reset of ``consumer`` moves (None: no such processor)."""
        if consumer != "pg":
            return consumer
        if self.pg_url is None:
            return None
        busy = self.busy_partitions()
        return partition_consumer("pg", busy[turn % len(busy)]) if busy else "pg"

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
        if fault.kind in sparkpart.ALL_KINDS:
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
        elif fault.kind in ("pg-kill", "pg-pause") and self.postgres is not None:
            if fault.kind == "pg-pause":
                self.postgres.signal_all(signal.SIGCONT)
            elif outcome.landed or self.postgres.pid is None:
                self.postgres.start()
                self._track_postgres()
        elif fault.kind == "pg-cut":
            self.net.uncut(pgpart.MEMBER_NODES[target], pgpart.NODE)
        elif fault.kind == "ledger-full":
            if self.ledger_mount is not None:
                (self.ledger_mount / "filler").unlink(missing_ok=True)
        elif fault.kind in (*storefaults.CORRUPT_KINDS, "os-crash", "membership"):
            if outcome.touched and self.topo.servers[target].pid is None:
                self.topo.restart(target)  # membership: a fresh node (its store was wiped)
                self._track_servers()
        elif fault.kind in ("power-loss", "truncate-all"):
            for node in self.topo.members():
                if self.topo.servers[node].pid is None:
                    self.topo.restart(node)
            self._track_servers()
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
        # A due membership change waits for every other server fault to heal (a quorum
        # for the meta group); others do not start meanwhile, or it could wait out its
        # whole 20 s behind them (1 of 6 in a membership run at c7f075b).
        due_faults = [f for f in pending if f.start <= now]
        due = {f.kind for f in due_faults}
        membership_due = "membership" in due
        # Likewise a due fault of every node waits for the server faults already active
        # and no new one takes a node meanwhile: 2 of 4 cluster-kills and 1 of 2 power
        # losses of a seed-62 run at 9484596 ran out of their wait, each node taken in
        # turn.
        whole_due = bool(due & set(WHOLE_CLUSTER))
        for fault in due_faults:
            if self._retry_at.get(fault, 0.0) > now:
                continue
            turn = self.faults.index(fault)
            target = await self._resolve(fault, turn, now)
            held = server_faults.holds(fault.kind, target) if target else set()
            outcome: Outcome | None = None
            reserved = _held_back(fault.kind, held, membership_due, whole_due)
            if target is None:
                why = "no stream leader known"
            elif held & self.busy:
                why = f"target busy ({', '.join(sorted(held & self.busy))})"
            elif reserved is not None:
                # Bounded by the reserving fault's own wait; a bitflip and a
                # cluster-kill of seed 63 at 17fcd6e ran out of their 8 s behind one.
                why = reserved
                self._wait_from[fault] = now
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
            if now - self._wait_from.get(fault, fault.start) < max_wait(fault.kind):
                self._retry_at[fault] = now + 0.5
                self._waiting[fault] = why
                continue
            pending.remove(fault)
            self._skip(fault, target, f"not started within {max_wait(fault.kind):g}s: {why}")

    def _server_log_size(self, fault: Fault, target: str) -> int:
        if fault.kind not in ("disk-full", *storefaults.CORRUPT_KINDS) or self.topo is None:
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
            if fault.kind in storefaults.CORRUPT_KINDS:
                entry["log_at"] = entry.pop("log_from")  # what the restarted server says
            entry.pop("log_from", None)
            try:
                await asyncio.to_thread(self._heal, fault, target, outcome)
                healed = "ok"
            except Exception as exc:  # e.g. a server that does not start on a damaged store
                healed = f"failed: {type(exc).__name__}: {exc}"[:600]
                entry["heal_error"] = healed
            self.busy -= held
            entry["wall_end"], entry["mono_end"] = time.time(), time.monotonic()
            self._note("heal", f"{fault.kind}:{target}", healed)
            self.fault_log.append(entry)

    # -- tfaults: end ----------------------------------------------------------------------

    # -- sabotage (the negative control) -------------------------------------------------

    def _sabotage_tick(self, now: float) -> None:
        """``drop-acked``: once half of the run is over, delete one acknowledged message
        of the producers' stream behind the system's back (``STREAM.MSG.DELETE``);
        ``store-twice``: publish a copy of one under a msg id of its own (what a replica
        that lost its de-duplication state could let through); in the background (a
        server under a fault may not answer for a while)."""
        if self.sabotage not in STREAM_SABOTAGE or self._sabotaged or now < self.duration / 2:
            return
        if self._sabotage_task is None or self._sabotage_task.done():
            self._sabotage_task = asyncio.create_task(self._break_acked())

    def _drain_timeout(self) -> float:
        """:data:`DRAIN_TIMEOUT`, but :data:`BROKEN_DRAIN` once ``truncate-all`` cut every
        copy of the stream: what it took never comes back, so the drain cannot end on its
        own, and waiting longer shows the checker nothing more."""
        broken = self.sabotage == "truncate-all" and any(
            f["kind"] == "truncate-all" and not f.get("skipped") for f in self.fault_log
        )
        return BROKEN_DRAIN if broken else DRAIN_TIMEOUT

    def _sabotage_due(self) -> bool:
        """``drop-acked`` or ``store-twice`` has not landed yet: the drain waits for it (up
        to its timeout); a negative control that ends before its sabotage lands proves
        nothing."""
        return self.sabotage in STREAM_SABOTAGE and not self._sabotaged

    async def _break_acked(self) -> None:
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
        stream = self.inputs["pub"]["stream"]
        seq = int(victim["seq"])
        if seq == 0:  # confirmed by a fast-ingest flow ack: a range, no sequence of its own
            seq = (
                await seq_of(target["servers"], stream, victim["key"], domain=target["domain"]) or 0
            )
        if not seq:
            await asyncio.sleep(0.5)
        elif self.sabotage == "store-twice":
            copied = await self._copy_msg(target, stream, seq, victim["key"])
            if copied:
                self._sabotaged = True
                self._note("sabotage", victim["key"], f"store-twice (seq {seq} as seq {copied})")
            else:
                await asyncio.sleep(0.5)
        elif await delete_msg(target["servers"], stream, seq, domain=target["domain"]):
            self._sabotaged = True
            self._note("sabotage", victim["key"], f"drop-acked (seq {seq})")
        else:
            await asyncio.sleep(0.5)

    async def _copy_msg(self, target: dict[str, Any], stream: str, seq: int, key: str) -> int:
        """Store message ``seq`` of ``stream`` again under a msg id no producer uses; the
        copy's sequence, or 0 when a server did not answer."""
        assert self.topo is not None
        try:
            async with asyncio.timeout(5):
                async with await connect(self.topo.connect_options(target)) as conn:
                    js = conn.nc.jetstream(domain=target.get("domain"))
                    msg = await js.get_msg(stream, seq)
                    # The Publisher's own subject: a partitioned stream stores the message
                    # under its mapped one (<partition>.t.pub), which it does not capture.
                    subject = f"{PUB_SUBJECT if stream == PUB_STREAM else SUBJECT}.pub"
                    ack = await js.publish(
                        subject, msg.data or b"", headers={"Nats-Msg-Id": f"sabotage:{key}"}
                    )
        except Exception:  # a server under a fault: the next tick tries again
            return 0
        return int(ack.seq) if not ack.duplicate else 0

    # -- run ---------------------------------------------------------------------------

    async def run(self) -> dict[str, Any]:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.work.mkdir(parents=True, exist_ok=True)
        try:
            with Net(self.run_id) as net:
                self.net = net
                kinds = {f.kind for f in self.faults}
                self.topo = Topology(
                    self.kind,
                    net,
                    self.work,
                    lazy=bool(kinds & set(LOST_PAGE_CACHE)),
                    spare="membership" in kinds,
                )
                try:
                    return await self._run()
                finally:
                    for worker in self.workers.values():
                        worker.kill()
                    self.topo.stop()
                    if self.postgres is not None:
                        self.postgres.stop()
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
        await self.topo.create_streams(
            window=SHORT_WINDOW if self.short else None,
            partitions=self.partitioning.partitions if self.partitioning else 0,
        )
        pg_url = self._start_postgres()
        self._mount_ledger()
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
        active = self._active  # the membership change's precondition reads it too
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
                self._replay_tick(now)
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
                    if now > self.duration + self._drain_timeout():
                        self._note("trial", self.kind, "drain-timeout")
                        break
                await asyncio.sleep(TICK)
        finally:
            for task in (watch, check, self._sabotage_task, self._replay_look):
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
            await self.spark.drain(self, await self.stream_keys(target, target["stream"]))
            self._note("trial", self.kind, "spark-drained")
            if self.sabotage == "drop-row":
                key = self.spark.drop_row()
                self._note("sabotage", str(key), "drop-row (foreachBatch table)")
        if self.sabotage == "drop-letter":
            await self._drop_letter()
        if self.sabotage == "drop-pg-effect":
            self._drop_pg_effect()
        return await self._final_state()

    async def _drop_letter(self) -> None:
        """Sabotage ``drop-letter``: after the drain, the first dead letter deleted from
        ``DLQ`` behind the Processors' back; the checker must miss it (``dead_letters``)."""
        assert self.topo is not None
        target = self.topo.processor_target()
        domain = target.get("domain")
        found: list[tuple[int, str]] = []

        def visit(seq: int, key: str, headers: dict[str, str]) -> None:
            if headers.get("Oncestream-Consumer") and not found:
                found.append((seq, key))

        from .rawread import walk_any

        await walk_any(target["servers"], DLQ, domain, visit)
        if found and await delete_msg(target["servers"], DLQ, found[0][0], domain=domain):
            self._note("sabotage", found[0][1], f"drop-letter (DLQ seq {found[0][0]})")

    def _drop_pg_effect(self) -> None:
        """Sabotage ``drop-pg-effect``: after the drain, one effect row deleted from the
        trial's PostgreSQL (the one the pg-* faults hit); the checker must miss it."""
        if self.pg_url is None:
            return
        import psycopg

        with psycopg.connect(self.pg_url, autocommit=True) as pg:
            row = pg.execute(f"DELETE FROM {EFFECTS} WHERE ctid IN (SELECT ctid FROM {EFFECTS} "
                             "ORDER BY key LIMIT 1) RETURNING key").fetchone()  # fmt: skip
        if row:
            self._note("sabotage", str(row[0]), "drop-pg-effect (PostgreSQL effects)")

    def _supervise(self) -> None:
        for name, worker in self.workers.items():
            worker.supervise(in_fault=name in self.busy)

    def _replay_tick(self, now: float) -> None:
        """``dead_letters=replay``: ``oncestream dlq replay`` once mid-run (under the faults),
        once something was dead-lettered (the CLI exits 2 on a dead-letter stream that does
        not exist yet); the drain runs it again once every failing key was dead-lettered
        and the consumers settled (:meth:`_drained`)."""
        if self.options.dead_letters != "replay" or self.replays or now < self.duration * 0.6:
            return
        if now > self.duration or (self._replay_look and not self._replay_look.done()):
            return
        if self._replay_look is not None and self._replay_look.result():
            self._start_replay()
            return
        if now >= self._replay_next:  # a look a second at most
            self._replay_next = now + 1.0
            self._replay_look = asyncio.create_task(self._lite_letters())

    async def _lite_letters(self) -> bool:
        try:
            letters = await self._dead_letters_now()
        except Exception:  # no answer now (a fault): look again
            return False
        return bool(letters and sum(letters.values()))

    def _start_replay(self) -> None:
        name = f"replay{len(self.replays) + 1}"
        self._add(name, self.replay_argv(), done=True, cli=True)
        worker = self.workers[name]
        worker.rerun_ok = "any"  # exit 1: a re-run replays nothing twice (its contract)
        worker.start()
        self.replays.append(worker)
        self._note("replay", name, "start")

    def failing_expected(self) -> set[str]:
        """The processed input keys whose handler fails (dead-lettered by every consumer)."""
        from .checker import expected_keys

        share = self.options.fail_share
        processed = {p for p, spec in self.inputs.items() if spec.get("processed", True)}
        return {
            k
            for k, p in expected_keys(self.inputs).items()
            if p in processed and failing_key(k, share)
        }

    async def _dead_letters_now(self) -> dict[str, int] | None:
        """Dead letters per consumer in ``DLQ`` now (None: no answer; {}: none yet)."""
        assert self.topo is not None
        target = self.topo.processor_target()
        read = await read_once(target["servers"], DLQ, domain=target.get("domain"))
        if read is None:
            return None if await self.message_count(target, DLQ) else {}
        return {c: sum(keys.values()) for c, keys in read.letters.items()}

    async def _copies_now(self, target: dict[str, Any]) -> Counter[str] | None:
        """Replayed copies in the processed stream per consumer whose letter was replayed
        (None: no answer)."""
        read = await read_once(target["servers"], target["stream"], domain=target.get("domain"))
        return None if read is None else read.replays_for

    async def _drained(self, now: float) -> bool:
        """One look: producers done, the hub caught up, every stored record applied or
        dead-lettered (and, with ``replay``, the SQLite consumer's dead letters replayed)."""
        assert self.topo is not None
        target = self.topo.processor_target()
        if self.stream_gone(STREAM) or self.stream_gone(target["stream"]):
            if "stream_gone" not in self.timing:
                self.timing["stream_gone"] = round(now, 3)
                self._note("trial", self.kind, "stream gone after an OS crash: drain ends")
            return True
        if not all(w.done for w in self.workers.values() if w.restart_until_done):
            await self.message_count(self.topo.producer_target(), STREAM)  # notices a loss
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
        failing = len(self.failing_expected()) if self.options.failing else 0
        if failing:
            # Dead-lettered (a letter per message by each database's consumer) and every
            # consumer done with them: nothing pending or unacknowledged.
            letters = await self._dead_letters_now()
            if letters is None or not await self._consumers_settled(target):
                return False
            by_db: Counter[str] = Counter()
            for consumer, n in letters.items():
                by_db[database_of(consumer)] += n
            databases = ["sqlite", *(["postgres"] if self.pg_url else [])]
            # What every database still owes: the drain waits for the slowest consumer.
            held = min(by_db[db] for db in databases)
            if self.options.dead_letters == "replay":
                if len(self.replays) < 2:  # the drain's replay, once all were dead-lettered
                    # What each database's consumer owes: its letters still held plus its
                    # letters the run's replay copied already (a copy names its consumer;
                    # that replay may have found one database's letters only).
                    copies = await self._copies_now(target)
                    if copies is None:
                        return False
                    copied: Counter[str] = Counter()
                    for consumer, n in copies.items():
                        copied[database_of(consumer)] += n
                    if all(by_db[db] + copied[db] >= failing for db in databases):
                        self._start_replay()
                    return False
                if sum(by_db.values()):
                    return False
            elif held < failing:
                return False
        owed = stored - failing  # every record once, a failing key by its letter
        if failing and self.options.dead_letters == "replay":
            copies = await self._copies_now(target)
            if copies is None:
                return False
            owed = stored - sum(copies.values())  # every record once, a failing key by a copy
        effects = await asyncio.to_thread(self._effects_now)  # a paused PostgreSQL: seconds
        return bool(stored) and all(len(c) >= owed for c in effects.values())

    async def _consumers_settled(self, target: dict[str, Any]) -> bool:
        """Every processor consumer has nothing pending and nothing unacknowledged (a
        failing message is done only once it was dead-lettered and terminated)."""
        assert self.topo is not None
        names = ["lite", *self.pg_consumers()]
        try:
            async with asyncio.timeout(5):
                async with await connect(self.topo.connect_options(target)) as conn:
                    for name in names:
                        info = await consumer_info(conn, target["stream"], name)
                        if int(info.get("num_pending") or 0) or int(
                            info.get("num_ack_pending") or 0
                        ):
                            return False
        except Exception:  # no answer now (a fault): look again
            return False
        return True

    def count_processed(self) -> int:
        """Input records of the processed producers (each stored once when all is well)."""
        from .checker import expected_keys

        processed = {p for p, spec in self.inputs.items() if spec.get("processed", True)}
        return sum(1 for p in expected_keys(self.inputs).values() if p in processed)

    def _effects_now(self) -> dict[str, set[str]]:
        out = {}
        for db, rows in self._effect_rows().items():
            out[db] = {r[0] for r in rows}
        return out

    def _effect_rows(self) -> dict[str, list[tuple[str, str, float, float]]]:
        rows: dict[str, list[tuple[str, str, float, float]]] = {}
        lite = (self.ledger_mount or self.dir) / "lite.db"
        try:
            with sqlite3.connect(lite) as db:
                rows["sqlite"] = list(db.execute("SELECT key, proc, wall, mono FROM effects"))
        except sqlite3.Error:
            rows["sqlite"] = []
        if self.pg_url is not None:
            import psycopg

            try:
                with psycopg.connect(self.pg_url, connect_timeout=5) as pg:
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
        except StreamNotFound:
            self._not_found.setdefault(stream, time.monotonic())
            return 0
        except Exception:
            return 0
        self._not_found.pop(stream, None)
        return leader_count(info)

    def stream_gone(self, stream: str) -> bool:
        """After an OS crash the settings allow to lose writes (the default sync), the
        stream has been answered "not found" for :data:`GONE_AFTER` s: the crash took it
        (the stream's own creation was never fsynced), and nothing will bring it back."""
        since = self._not_found.get(stream)
        crashed = SYNC[self.kind] != "always" and any(
            f["kind"] in LOST_PAGE_CACHE for f in self.fault_log if not f.get("skipped")
        )
        return crashed and since is not None and time.monotonic() - since > GONE_AFTER

    async def stream_keys(
        self,
        target: dict[str, Any],
        stream: str,
        *,
        strict: bool = False,
        replays: list[str] | None = None,
    ) -> list[str]:
        """Keys of ``stream`` through the project's reader ([] on an error unless ``strict``);
        replayed dead letters (msg id ``replay:...``) go to ``replays`` when given."""
        assert self.topo is not None
        keys: list[str] = []
        try:
            async with await connect(self.topo.connect_options(target)) as conn:
                async for chunk in read_stream(conn, stream):
                    for r in chunk:
                        if replays is not None and (r.msg_id or "").startswith("replay:"):
                            replays.append(record_key(bytes(r.data)))
                        else:
                            keys.append(record_key(bytes(r.data)))
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
        # After an OS crash the default sync allows to lose writes, a stream answered "not
        # found" by every server for GONE_AFTER s is gone (the crash took its creation).
        crashed = self.stream_gone(stream) or (
            SYNC[self.kind] != "always"
            and any(f["kind"] in LOST_PAGE_CACHE for f in self.fault_log if not f.get("skipped"))
        )
        # Taken for gone by the drain already: one more second of "not found" confirms it
        # (waiting GONE_AFTER again per stream cost the trial 30 s and told nothing new).
        gone_after = GONE_CONFIRM if self.stream_gone(stream) else GONE_AFTER if crashed else None
        try:
            raw = await read_raw(target["servers"], stream, domain=target.get("domain"),
                                 gone_after=gone_after)  # fmt: skip
        except Unreadable as exc:
            return {"unreadable": await self._unreadable(target, stream, exc)}
        if raw.gone:
            return {"raw": {}, "project": {}, "messages": 0, "gone": True,
                    "waited_s": raw.waited_s, "failed_reads": len(raw.errors),
                    "last_error": raw.errors[-1] if raw.errors else ""}  # fmt: skip
        read: dict[str, Any] = {"raw": dict(raw.keys), "messages": raw.messages}
        read["raw_replays"] = dict(raw.replays)
        read["letters"] = {c: dict(keys) for c, keys in raw.letters.items()}
        if raw.copies:
            read["copies"] = {k: [list(c) for c in found] for k, found in raw.copies.items()}
        if raw.errors:
            read |= {"waited_s": raw.waited_s, "failed_reads": len(raw.errors)}
            read["last_error"] = raw.errors[-1]
        if stream == DLQ:  # dead letters: the independent reader's (by consumer) only
            read["independent_only"] = True
            return read
        replays: list[str] = []
        try:
            keys = await self.stream_keys(target, stream, strict=True, replays=replays)
            read["project"], read["project_replays"] = dict(Counter(keys)), dict(Counter(replays))
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
        if self.short:
            reads[PUB_STREAM] = await self._read_both(self.topo.producer_target(), PUB_STREAM)
        if self.kind == "leaf":
            reads[HUB_STREAM] = await self._read_both(self.topo.processor_target(), HUB_STREAM)
        if self.options.failing:
            reads[DLQ] = await self._read_both(self.topo.processor_target(), DLQ)
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
                s: r["raw"]
                for s, r in reads.items()
                if s not in (sparkpart.OUT_STREAM, DLQ) and "raw" in r
            },
            "options": self.options.as_dict(),
            "sync": SYNC[self.kind],
            "failing": sorted(self.failing_expected()) if self.options.failing else [],
            "dead_letters": (reads.get(DLQ) or {}).get("letters"),
            "dlq_unreadable": "unreadable" in (reads.get(DLQ) or {}),
            "replays": (reads.get(self.topo.processor_target()["stream"]) or {}).get("raw_replays"),
            "reruns": {n: w.reruns for n, w in self.workers.items() if w.reruns},
            "starts": {n: w.starts for n, w in self.workers.items() if n == "cli"},
            "reads": reads,
            "effects": {db: dict(Counter(r[0] for r in e)) for db, e in rows.items()},
            "pg_active": _switches(rows.get("postgres", []), self.partitioning),
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
        for entry in self.fault_log:  # what a restarted server said of its damaged files
            if "log_at" in entry:
                node, since = entry["resolved"], entry["log_at"]
                entry["noticed"] = storefaults.noticed(self.topo, node, since)
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
    stack_faults: int = 0,
    spark_mode: dict[str, Any] | None = None,
) -> list[Fault]:
    """A trial's whole fault schedule, from its seed and options alone (``--schedule``):
    ``faults`` from the trial kind's menu, ``stack_faults`` from its stack menu (each
    menu a seeded cycle of its own), the Spark faults in Spark trials."""
    menu = [(k, t) for k, t in fault_menu(kind) if not fault_kinds or k in fault_kinds]
    planned = fault_schedule(
        seed, kind, duration, faults, campaign_seed=campaign_seed, ordinal=ordinal, menu=menu
    )
    # Crashes of a `cluster` (default sync) trial come from crash_fault(), unless named.
    named = bool(set(fault_kinds) & {"os-crash", "power-loss"})
    stack = [(k, t) for k, t in stack_menu(kind, crashes=named)
             if not fault_kinds or k in fault_kinds]  # fmt: skip
    planned += fault_schedule(
        seed + 500_000,
        kind,
        duration,
        stack_faults,
        campaign_seed=campaign_seed,
        ordinal=ordinal,
        menu=stack,
        group=f"stack:{kind}",
    )
    if not fault_kinds:
        planned += crash_fault(seed, kind, duration, ordinal)
    if spark:
        executors = (spark_mode or {}).get("executors") == "cluster"
        planned += sparkpart.spark_schedule(seed, duration, fault_kinds, executors)
    if sabotage == "skip-position":  # a resume to skip a position in
        planned.append(Fault(round(duration * 0.4, 3), 1.0, "kill", "sess", "sabotage"))
    if sabotage == "truncate-all":  # every copy of the stream's blocks cut mid-run
        planned.append(Fault(round(duration * 0.5, 3), 1.0, "truncate-all", "all", "sabotage"))
    return sorted(planned, key=lambda f: f.start)


def _switches(
    rows: list[tuple[str, str, float, float]], partitioning: Partitioning | None = None
) -> dict[str, Any]:
    """Which of the PostgreSQL processors applied the effects: rows per instance, and how
    many times the applying instance changed (in apply order: takeovers, and a
    standby's in-flight batch racing the new active one). Over a partitioned stream the
    members apply side by side, so the changes are counted per partition (a key's
    partition from its producer's subject) and summed: each is a partition that moved
    to the other member and applied there (``by_partition``: rows and switches)."""
    if partitioning is None:
        order = [proc for _, proc, _, _ in sorted(rows, key=lambda r: r[3])]
        changes = sum(1 for a, b in pairwise(order) if a != b)
        return {"rows": dict(Counter(order)), "switches": changes}
    per: dict[int, list[str]] = {}
    for key, proc, _, _ in sorted(rows, key=lambda r: r[3]):
        subject = f"{SUBJECT}.{key.split('-', 1)[0]}"
        per.setdefault(partitioning.partition_of(subject), []).append(proc)
    by_partition = {
        str(p): {"rows": dict(Counter(order)),
                 "switches": sum(1 for a, b in pairwise(order) if a != b)}
        for p, order in sorted(per.items())
    }  # fmt: skip
    return {
        "rows": dict(Counter(proc for _, proc, _, _ in rows)),
        "switches": sum(p["switches"] for p in by_partition.values()),
        "by_partition": by_partition,
    }


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
