"""Where each microsecond goes, ours and the peer's, on the bench-peers bars we miss (issue 40).

Paths (``--paths``, each a fresh server; N messages of 128 bytes):

- ``pipeline``: bench-peers' streaming query (``readStream`` -> ``writeStream``,
  ``AvailableNow``, N/10 per batch, after a warm-up query on N/10 other messages),
  jetstream -> jetstream against Spark ``kafka`` -> ``kafka``;
- ``spark-write``: bench-peers' ``df.write`` of N rows from 2 tasks, jetstream sink
  (msg ids) against the kafka sink (keys, idempotent producer);
- ``consume``: oncestream ``Processor`` + SQLite ledger against nats.go ``Consume`` +
  ``Ack`` (bench/peers/natsgo);
- ``postgres``: a per-message ``INSERT`` handler's cost on PostgreSQL, four ways of
  sending the same statements (``--pg-statements``), and the Processor end to end with
  that handler (bench/_scale_cases.py ``processor-postgres``, ``--pg-n`` messages).

Method. The Spark and Processor cases run bench/peers/_cases.py's own functions (and
bench/_scale_cases.py's) in a child process with their timed ``Window`` swapped for
one that also profiles, so the query, its warm-up and its window are bench-peers'.
Inside the window:

- every process of the child's tree: CPU seconds from /proc (bench/_cpu.py), the
  Python workers by module as bench/profile_pipeline.py names them;
- each JVM (Spark's, the Kafka broker): /proc/<pid>/task/*/stat sampled every 0.25 s,
  each thread named by ``jcmd Thread.print`` (a thread's /proc name is cut at 15
  characters) and put in a group by its name; CPU of threads that ended between
  samples is the row ``threads that ended``;
- nats-server: its Go CPU profile (``prof_port``; back-to-back 2 s profiles over the
  window, the last one running up to 2 s past it) and the nats.go client's
  (``-cpuprofile``): each sampled stack goes to the first group whose functions it
  contains (GC, then syscalls at the stack's top, then the subsystems), and the
  groups' shares of the samples are scaled to the process's CPU seconds from /proc;
- our Python process: py-spy (200 Hz, non-blocking) stacks grouped by function the
  same way, shares scaled to the process's /proc CPU; its threads from /proc too;
- PostgreSQL: CPU of each server process (backend, WAL writer, ...) from /proc.

CPU is reported in microseconds per message; a share-scaled group is as accurate as
the number of samples behind it (printed with each table). Needs py-spy
(``pip install py-spy``) and Go (``go tool pprof``).

Run: ``SPARK_LOCAL_IP=127.0.0.1 flock /tmp/oncestream-heavy.lock .venv/bin/python
bench/profile_peers.py --paths pipeline,consume --n 1e6``. Writes
``bench/results/profile-peers-<stamp>.json`` and prints Markdown tables.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._cpu import cpu_seconds
from bench.peers import _cases
from bench.peers.kafka import KafkaBroker, free_port
from bench.peers.run import _fill, cases, install
from bench.profile_pipeline import _jvm_pid, _key
from bench.scale import make_stream

from oncestream.server import JetStreamConfig, NatsServer, ServerConfig

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PATHS = ("pipeline", "spark-write", "consume", "postgres")
_TICK = os.sysconf("SC_CLK_TCK")
PROFILERS = ("py-spy", "jcmd", "go tool pprof", "pprof")

# --- grouping rules: (group, regex); the first group with a matching name wins -------

JVM_GROUPS = (
    ("task threads (Executor task launch/idle worker)", r"^Executor task"),
    ("Python runner I/O threads", r"stdout writer|stderr reader|[Pp]ython|Arrow|arrow"),
    ("Kafka producer network thread", r"^kafka-producer-network-thread"),
    ("Kafka consumer/coordinator threads", r"^kafka-coordinator|^kafka-consumer"),
    ("streaming query thread", r"^stream executio"),
    ("GC", r"^GC Thread|^G1 |^GC"),
    ("JIT compiler (C1/C2)", r"CompilerThre"),
    ("VM thread (safepoints)", r"^VM Thread|^VM Periodic"),
    ("netty / RPC", r"netty|rpc|dispatcher|shuffle|[Bb]lock[Mm]anager"),
    (
        "Spark scheduler / listeners",
        r"dag-scheduler|task-result|spark-listener|context-cleaner|heartbeat|executor-",
    ),
    ("py4j gateway", r"^Thread-\d+|py4j"),
)
BROKER_GROUPS = (
    ("request handlers", r"request-handler"),
    ("network processors", r"network-thread|socket-acceptor|Processor"),
    ("log flush / scheduler / cleaner", r"kafka-scheduler|log-cleaner|LogDirFailure|flush"),
    ("group / transaction coordinators", r"coordinator|ExpirationReaper|[Pp]urgatory"),
    ("KRaft / controller / metadata", r"raft|quorum|controller|metadata|broker-\d+-to"),
    ("GC", r"^GC Thread|^G1 |^GC"),
    ("JIT compiler (C1/C2)", r"CompilerThre"),
    ("VM thread (safepoints)", r"^VM Thread|^VM Periodic"),
)
_GO_GC = (
    "GC",
    r"^runtime\.(gcBgMarkWorker|gcAssistAlloc|bgsweep|bgscavenge|gcDrain|markroot|"
    r"sweepone|gcStart|wbBufFlush|scanobject|greyobject|gcMarkDone|gcMarkTermination|"
    r"mProf_Malloc|deductAssistCredit|gcSweep)",
)
_GO_SYSCALL = r"^(syscall\.|internal/runtime/syscall|runtime/internal/syscall|internal/poll)"
#: nats-server: (group, regex over any frame); GC first, syscalls (top 8 frames) second.
NATS_GROUPS = (
    ("msg-id de-dup", r"\(\*stream\)\.(checkMsgId|storeMsgId|purgeMsgIds|ddindex|rebuildDedupe)"),
    (
        "acks",
        r"\(\*consumer\)\.(processAck|processInboundAcks|pushAck|processTerm|processNak|ackMsg)"
        r"|UpdateAcks",
    ),
    (
        "JetStream store: write",
        r"\(\*(fileStore|msgBlock|memStore)\)\.(StoreMsg|storeRawMsg|StoreRawMsg|writeMsgRecord"
        r"|flushPendingMsgs|enableForWriting|newMsgBlockForWrite|syncBlocks|flushLoop|"
        r"writeAt|compact|spinUpFlushLoop|checkLastBlock)",
    ),
    ("JetStream store: read", r"\(\*(fileStore|msgBlock|memStore)\)\."),
    ("consumer delivery", r"\(\*consumer\)\.|\(\*consumerFileStore\)"),
    (
        "header checks (msg id, expected-*)",
        r"checkMsgHeadersPreClusteredProposal|getHeaderKeyIndex|sliceHeader|"
        r"^github.com/nats-io/nats-server/v2/server\.getHeader$",
    ),
    (
        "stream ingest (other)",
        r"processJetStreamMsg|processInboundJetStreamMsg|processJetStreamBatch|"
        r"processJetStreamFast|\(\*stream\)\.process|\(\*jetStream\)",
    ),
    (
        "out queue -> clients (deliveries, PubAcks)",
        r"\(\*stream\)\.internalLoop|\(\*jsOutQ\)|\(\*Server\)\.internalSendLoop",
    ),
    ("client write (flush)", r"\(\*client\)\.(flushOutbound|writeLoop|flushClients|flushSignal)"),
    (
        "client read / parse / routing",
        r"\(\*client\)\.|\(\*Sublist\)|\(\*Account\)|\(\*Server\)\.(deliver|process)",
    ),
    ("Go runtime scheduler", r"^runtime\.(schedule|findRunnable|mcall|park_m|netpoll|futex)"),
)
#: nats.go client: the same groups as our Python client where they exist.
NATSGO_GROUPS = (
    ("acks", r"\(\*jetStreamMsg\)\.(Ack|ackReply|ack)|\(\*Msg\)\.(Ack|ackReply)"),
    (
        "Message construction",
        r"jetstream\.\(\*pullConsumer\)|jetstream\.\(\*jetStream\)\.toJSMsg|"
        r"jetstream\.checkMsg|DecodeHeadersMsg|decodeHeadersMsg|GetMetadataFields|"
        r"\(\*jetStreamMsg\)|\(\*pullSubscription\)",
    ),
    ("frame parsing", r"\(\*Conn\)\.(parse|processMsg|process\w*Args|readLoop)"),
    ("client write (flush)", r"\(\*Conn\)\.(flusher|publish|flush)|bufio\."),
    ("Go runtime scheduler", r"^runtime\.(schedule|findRunnable|mcall|park_m|netpoll|futex)"),
)
#: Our Python process (py-spy frames are "function (path:line)").
MEASUREMENT = "measurement (the bench's /proc samplers)"
PY_GROUPS = (
    # "own:": only the stack's first frame outside the standard library is tested;
    # "leaf:": only the stack's top frame.
    (
        "measurement (the bench's /proc samplers)",
        r"own:^(\w+\.)?\w+ \(.*bench/_cpu\.py|"
        r"own:^(ThreadSampler\.\w+|_stat|descendants|_cmdline|GoProfile\.\w+) \(",
    ),
    # Main-thread samples whose Python stack ends at the asyncio.run() call (py-spy saw
    # no frame above it: the event loop between Python frames).
    ("event loop / other", r"leaf:^(child|processor|pipeline|spark_write) \(.*bench/"),
    ("thread-pool wait (py-spy counts it)", r"leaf:^_worker \(.*concurrent/futures/thread\.py"),
    (
        "ledger commit (fsync)",
        r"^(\w+\.)?(_commit|commit) \(.*(process/_applying|ledger/_sqlite|ledger/_postgres)",
    ),
    ("ledger claim", r"^(\w+\.)?(claim|_claim\w*) \(.*(process/_applying|ledger/)"),
    ("handler insert", r"^(\w+\.)?(insert_row|_pg_insert|_timed_handler) "),
    ("acks", r"process/_acking|process/_ackfrontier|^_UnsentAcks"),
    ("Message construction", r"oncestream/_message\.py|oncestream/_headers\.py"),
    ("frame parsing (+ per-frame callback)", r"oncestream/_nats/|nats/protocol/parser"),
    ("pull stream", r"oncestream/read/"),
    ("nats-py client (other)", r"site-packages/nats/"),
    ("psycopg outside handler/claim/commit frames", r"site-packages/psycopg/"),
    ("Processor (other)", r"oncestream/process/|oncestream/ledger/"),
    ("event loop / other", r"asyncio/|selectors\.py"),
)


def classify(frames: list[str], groups: Iterable[tuple[str, str]], go: bool) -> str:
    """The group of one sampled stack (``frames`` leaf first)."""
    if go:
        if any(re.search(_GO_GC[1], f) for f in frames):
            return "GC"
        if any(re.search(_GO_SYSCALL, f) for f in frames[:8]):
            store = any(re.search(r"\(\*(msgBlock|fileStore)\)", f) for f in frames)
            return "syscalls: store files" if store else "syscalls: network / other"
    own = next((f for f in frames if not re.match(_STDLIB, f)), frames[0])
    for group, pattern in groups:
        if pattern.startswith("own:"):
            if any(re.search(alt, own) for alt in pattern[4:].split("|own:")):
                return group
        elif pattern.startswith("leaf:"):
            if re.search(pattern[5:], frames[0]):
                return group
        elif any(re.search(pattern, f) for f in frames):
            return group
    return "other"


def name_group(name: str, groups: Iterable[tuple[str, str]]) -> str:
    return next((g for g, pattern in groups if re.search(pattern, name)), "other")


# --- samplers ----------------------------------------------------------------------


def _stat(path: str) -> tuple[str, float, int] | None:
    """(comm, CPU seconds, parent pid) from a /proc stat file; None when it is gone."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    comm = text[text.index("(") + 1 : text.rindex(")")]
    fields = text[text.rindex(")") + 2 :].split()
    return comm, (int(fields[11]) + int(fields[12])) / _TICK, int(fields[1])


def descendants(root: int) -> list[int]:
    """``root`` and every process below it."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := _stat(f"/proc/{entry}/stat")) is not None:
            parents[int(entry)] = st[2]
    found, todo = {root}, [root]
    while todo:
        pid = todo.pop()
        for child, parent in parents.items():
            if parent == pid and child not in found:
                found.add(child)
                todo.append(child)
    return sorted(found)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def jvm_thread_names(pid: int) -> dict[int, str]:
    """Thread id -> Java thread name, from ``jcmd PID Thread.print``."""
    proc = subprocess.run(
        ["jcmd", str(pid), "Thread.print"], capture_output=True, text=True, check=False
    )
    names = {}
    for line in proc.stdout.splitlines():
        match = re.match(r'^"(.*)" .*nid=(0x[0-9a-fA-F]+|\d+)', line)
        if match:
            names[int(match.group(2), 0)] = match.group(1)
    return names


class ThreadSampler:
    """CPU seconds of every thread of some processes between ``start`` and ``stop``.

    ``pids()`` is asked at each sample (every ``interval`` s), so processes that
    start inside the window are counted from 0. ``java``: pids whose threads are
    named by ``jcmd`` at start and stop.
    """

    def __init__(
        self, pids: Callable[[], Iterable[int]], interval: float = 0.25, java: bool = False
    ) -> None:
        self.pids, self.interval, self.java = pids, interval, java
        self.first: dict[tuple[int, int], float] = {}
        self.last: dict[tuple[int, int], tuple[float, str]] = {}
        self.proc_first: dict[int, float] = {}
        self.proc_last: dict[int, tuple[float, str]] = {}
        self.names: dict[int, str] = {}
        self._started = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        for pid in self.pids():
            proc = _stat(f"/proc/{pid}/stat")
            if proc is None:
                continue
            self.proc_first.setdefault(pid, proc[1] if not self._started else 0.0)
            self.proc_last[pid] = (proc[1], _cmdline(pid) or proc[0])
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                st = _stat(f"/proc/{pid}/task/{tid}/stat")
                if st is None:
                    continue
                key = (pid, int(tid))
                self.first.setdefault(key, st[1] if not self._started else 0.0)
                self.last[key] = (st[1], st[0])

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def _name(self) -> None:
        if self.java:
            for pid in list(self.proc_last):
                self.names.update(jvm_thread_names(pid))

    def start(self) -> ThreadSampler:
        self._sample()
        self._name()
        self._started = True
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
        self._name()

    def threads(self) -> list[tuple[int, str, float]]:
        """(pid, thread name, CPU seconds) of each thread, and each process's ended threads."""
        out = []
        summed: dict[int, float] = {}
        for (pid, tid), (cpu, comm) in self.last.items():
            used = cpu - self.first[(pid, tid)]
            summed[pid] = summed.get(pid, 0.0) + used
            out.append((pid, self.names.get(tid, comm), used))
        for pid, (cpu, _) in self.proc_last.items():
            ended = cpu - self.proc_first[pid] - summed.get(pid, 0.0)
            if ended > 0.005:
                out.append((pid, "threads that ended", ended))
        return out

    def grouped(self, groups: Iterable[tuple[str, str]]) -> dict[str, float]:
        out: dict[str, float] = {}
        rules = [*groups, ("threads that ended", r"^threads that ended$")]
        for _, name, used in self.threads():
            group = name_group(name, rules)
            out[group] = out.get(group, 0.0) + used
        return out

    def top(self, n: int = 12) -> list[tuple[str, float]]:
        merged: dict[str, float] = {}
        for _, name, used in self.threads():
            short = re.sub(r"\d+", "N", name)  # task / handler numbers
            merged[short] = merged.get(short, 0.0) + used
        return sorted(((k, round(v, 3)) for k, v in merged.items()), key=lambda kv: -kv[1])[:n]


class GoProfile:
    """A Go program's CPU profile over a window: back-to-back pprof fetches of ``chunk`` s."""

    def __init__(self, port: int, out: Path, chunk: int = 2) -> None:
        self.port, self.out, self.chunk = port, out, chunk
        self.files: list[Path] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        url = f"http://127.0.0.1:{self.port}/debug/pprof/profile?seconds={self.chunk}"
        while not self._stop.is_set():
            path = self.out / f"prof-{self.port}-{len(self.files)}.pb.gz"
            with urllib.request.urlopen(url, timeout=self.chunk + 30) as resp:
                path.write_bytes(resp.read())
            self.files.append(path)

    def start(self) -> GoProfile:
        self.out.mkdir(parents=True, exist_ok=True)
        self._thread.start()
        return self

    def stop(self) -> list[Path]:
        self._stop.set()
        self._thread.join()
        return self.files


_VALUE = r"^\s*([\d.]+)(ns|us|µs|ms|s|mins|hrs)\s+(\S.*)$"


def go_traces(files: list[Path]) -> list[tuple[float, list[str]]]:
    """(seconds, frames leaf first) of each stack of the merged profiles."""
    if not files:
        return []
    proc = subprocess.run(
        ["go", "tool", "pprof", "-traces", *map(str, files)],
        capture_output=True,
        text=True,
        check=True,
    )
    units = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "mins": 60.0, "hrs": 3600}
    out = []
    for block in proc.stdout.split(
        "-----------+-------------------------------------------------------"
    ):
        lines = [x for x in block.splitlines() if x.strip()]
        # Label lines ("stream: SCALE") come first; the value line starts the stack.
        first = next((i for i, x in enumerate(lines) if re.match(_VALUE, x)), None)
        if first is None:
            continue
        match = re.match(_VALUE, lines[first])
        assert match is not None
        frames = [match.group(3)] + [x.strip() for x in lines[first + 1 :]]
        frames = [f.split(" ")[0] for f in frames]
        out.append((float(match.group(1)) * units[match.group(2)], frames))
    return out


#: Frames skipped when naming what a group is made of (Go runtime, Python stdlib).
_STDLIB = (
    r"^(runtime\.|internal/|syscall\.|sync\.|sync/|time\.|os\.|io\.|bufio\.|bytes\.|strings\."
    r"|encoding/|.*\((<frozen|" + re.escape(sys.base_prefix) + r"/lib/python))"
)


def shares(
    stacks: list[tuple[float, list[str]]], groups: Iterable[tuple[str, str]], go: bool
) -> dict[str, Any]:
    """Each group's share of the sampled stacks, the sample count, and the top leaf functions."""
    total = sum(w for w, _ in stacks) or 1.0
    by: dict[str, float] = {}
    leaf: dict[str, float] = {}
    per_group: dict[str, dict[str, float]] = {}
    rules = list(groups)
    for weight, frames in stacks:
        group = classify(frames, rules, go)
        by[group] = by.get(group, 0.0) + weight
        leaf[frames[0]] = leaf.get(frames[0], 0.0) + weight
        # What a group is made of: its stacks' first frame outside the runtime/stdlib.
        own = next((f for f in frames if not re.match(_STDLIB, f)), frames[0])
        per_group.setdefault(group, {})[own] = per_group.get(group, {}).get(own, 0.0) + weight

    def top(counts: dict[str, float], k: int) -> list[tuple[str, float]]:
        ranked = sorted(counts.items(), key=lambda kv: -kv[1])[:k]
        return [(name, round(v / total, 4)) for name, v in ranked]

    return {
        "shares": {k: v / total for k, v in sorted(by.items(), key=lambda kv: -kv[1])},
        "samples": total,
        "top_leaf": top(leaf, 15),
        "top_by_group": {g: top(c, 6) for g, c in per_group.items()},
    }


class PySpy:
    """py-spy on one Python process (200 Hz, non-blocking), collapsed stacks."""

    def __init__(self, pid: int, out: Path) -> None:
        spy = Path(sys.executable).with_name("py-spy")
        if not spy.exists():
            raise SystemExit("py-spy is needed: .venv/bin/pip install py-spy")
        self.out = out
        argv = [str(spy), "record", "-p", str(pid), "-r", "200", "-f", "raw", "--nonblocking"]
        argv.append("--full-filenames")
        self.proc = subprocess.Popen(
            [*argv, "-o", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def stop(self) -> list[tuple[float, list[str]]]:
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=120)
        stacks = []
        for line in self.out.read_text().splitlines():
            head, _, count = line.rpartition(" ")
            if head and count.isdigit():
                stacks.append((float(count), head.split(";")[::-1]))
        return stacks


# --- the child: one case with a profiled window ---------------------------------------


class ProfiledWindow(_cases.Window):
    """bench-peers' timed window, with the profilers of this case running inside it."""

    prof_port = 0  # the nats-server's pprof port (0: the server is a Kafka broker)
    pyspy = False
    postgres_pid = 0
    work = Path(tempfile.gettempdir())
    last: ProfiledWindow | None = None

    def __enter__(self) -> ProfiledWindow:
        ProfiledWindow.last = self
        jvm = _jvm_pid()
        self.jvm = ThreadSampler(lambda: [jvm] if jvm else [], java=True).start()
        self.me = ThreadSampler(lambda: [os.getpid()]).start()
        self.broker = (
            ThreadSampler(lambda: [self.server_pid], java=True).start()
            if not self.prof_port
            else None
        )
        pg = self.postgres_pid
        pg_pids = descendants(pg) if pg else []  # the backends exist before the window
        self.pg = ThreadSampler(lambda: pg_pids).start() if pg else None
        self.go = GoProfile(self.prof_port, self.work).start() if self.prof_port else None
        self.spy = PySpy(os.getpid(), self.work / "pyspy.txt") if self.pyspy else None
        super().__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        for sampler in (self.jvm, self.me, self.broker, self.pg):
            if sampler is not None:
                sampler.stop()
        self.go_files = self.go.stop() if self.go else []
        self.py_stacks = self.spy.stop() if self.spy else []

    def profile(self) -> dict[str, Any]:
        processes: dict[str, float] = {}
        listed = []
        for pid, (used, cmd) in self.sampler.processes().items():
            if used > 0 and not any(p in cmd for p in PROFILERS):
                key = _key(cmd)
                if key == "driver" and pid != os.getpid():  # a one-off Python process
                    key = "other Python: " + " ".join(Path(w).name for w in cmd.split()[:3])
                processes[key] = processes.get(key, 0.0) + used
                listed.append((round(used, 3), cmd[:200]))
        out: dict[str, Any] = {"processes": processes, "server_cpu": self.server}
        out["process_list"] = sorted(listed, reverse=True)
        if self.jvm.proc_last:
            out["jvm_threads"] = self.jvm.grouped(JVM_GROUPS)
            out["jvm_top"] = self.jvm.top()
        out["driver_threads"] = self.me.top()
        if self.broker is not None:
            out["broker_threads"] = self.broker.grouped(BROKER_GROUPS)
            out["broker_top"] = self.broker.top()
        if self.pg is not None:
            pg: dict[str, float] = {}
            for pid, (cpu, cmd) in self.pg.proc_last.items():
                title = "backend" if "127.0.0.1(" in cmd else cmd.removeprefix("postgres: ")
                title = "postmaster" if " -D " in cmd else title.strip()
                pg[title] = pg.get(title, 0.0) + cpu - self.pg.proc_first[pid]
            out["postgres"] = pg
        if self.go_files:
            out["server_pprof"] = shares(go_traces(self.go_files), NATS_GROUPS, go=True)
        if self.py_stacks:
            out["python"] = shares(self.py_stacks, PY_GROUPS, go=False)
        return out


def child(args: argparse.Namespace) -> None:
    ProfiledWindow.prof_port = args.prof_port
    ProfiledWindow.work = Path(tempfile.mkdtemp(prefix="profile-peers-"))
    ProfiledWindow.pyspy = True
    _cases.Window = ProfiledWindow  # the cases look their Window up when they run
    ns = argparse.Namespace(
        format=args.format,
        target=args.target,
        n=args.n,
        server_pid=args.server_pid,
        pre_change=False,
        cold=False,
    )
    if args.case == "processor-postgres":
        from bench import _scale_cases

        ProfiledWindow.postgres_pid = args.pg_pid
        real = _scale_cases.processor

        async def windowed(*a: Any, **kw: Any) -> Any:
            with ProfiledWindow(args.server_pid):
                return await real(*a, **kw)

        _scale_cases.processor = windowed
        asyncio.run(_scale_cases.processor_case(args.target, args.n, "SCALE", args.pg_url))
        window = ProfiledWindow.last
        assert window is not None
        result = window.result(args.n)
    else:
        run = {
            "pipeline": _cases.pipeline,
            "spark-write": _cases.spark_write,
            "processor": _cases.processor,
        }[args.case]
        result = run(ns)
        window = ProfiledWindow.last
        assert window is not None
    result["profile"] = window.profile()
    shutil.rmtree(ProfiledWindow.work, ignore_errors=True)
    print("CASE-JSON " + json.dumps(result), flush=True)


# --- the parent: servers, fills, children --------------------------------------------


def _nats_server(work: Path) -> tuple[NatsServer, int]:
    port = free_port()
    config = ServerConfig(
        jetstream=JetStreamConfig(store_dir=work / "jetstream"), extra={"prof_port": port}
    )
    return NatsServer(config, work_dir=work), port


def _run_child(argv: list[str], timeout: float) -> dict[str, Any]:
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, __file__, "--child", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("CASE-JSON ")), None)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"child {argv[:2]} failed: {(proc.stderr or proc.stdout)[-2500:]}")
    return dict(json.loads(line.removeprefix("CASE-JSON ")))


def _case(path: str, system: str) -> Any:
    return next(c for c in cases() if c.path == path and c.system == system)


def run_spark_or_processor(path: str, system: str, child_case: str, fmt: str, n: int) -> Any:
    """One bench-peers case (``path``/``system``) on a fresh server, profiled in a child."""
    case = _case(path, system)
    with tempfile.TemporaryDirectory(prefix="profile-peers-") as tmp:
        port = 0
        if case.server == "kafka":
            server: Any = KafkaBroker()
        else:
            server, port = _nats_server(Path(tmp))
        try:
            server.start()
            target = server.bootstrap if case.server == "kafka" else server.url
            if case.server == "nats" and path != "spark-write":
                asyncio.run(
                    make_stream(target, duplicate_window=120, storage="file", batched=case.batched)
                )
            if case.fill:
                _fill(case, target, n)
            argv = [child_case, "--format", fmt, "--target", target, "--n", str(n)]
            argv += ["--server-pid", str(server.pid), "--prof-port", str(port)]
            record = _run_child(argv, 1800 + n / 500)
        finally:
            server.close()
    record["system"] = system
    return record


def run_natsgo_consume(n: int) -> dict[str, Any]:
    case = _case("consume", "nats.go jetstream Consume + ack")
    with tempfile.TemporaryDirectory(prefix="profile-peers-") as tmp:
        server, port = _nats_server(Path(tmp))
        server.start()
        try:
            asyncio.run(make_stream(server.url, duplicate_window=120, storage="file", batched=None))
            _fill(case, server.url, n)
            profile = Path(tmp) / "natsgo.pprof"
            go = GoProfile(port, Path(tmp) / "server").start()
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            server0 = cpu_seconds(server.pid)
            argv = [*case.cmd(server.url, n, server.pid), "-cpuprofile", str(profile)]
            proc = subprocess.run(argv, capture_output=True, text=True, check=False)
            server_cpu = cpu_seconds(server.pid) - server0
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            files = go.stop()
            if proc.returncode != 0:
                raise RuntimeError(f"natsgo failed: {proc.stderr[-1500:]}")
            record = case.parse(proc.stdout)
            client = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
            record.update(
                client_cpu=round(client, 3),
                server_cpu=round(server_cpu, 3),
                profile={
                    "processes": {"nats.go client": client},
                    "server_cpu": server_cpu,
                    "client_pprof": shares(go_traces([profile]), NATSGO_GROUPS, go=True),
                    "server_pprof": shares(go_traces(files), NATS_GROUPS, go=True),
                },
            )
        finally:
            server.close()
    record["system"] = case.system
    return record


# --- PostgreSQL --------------------------------------------------------------------

PG_SQL = "INSERT INTO effects (body) VALUES (%s)"


def pg_micro(url: str, backends: Callable[[], list[int]], statements: int) -> list[dict[str, Any]]:
    """Client vs backend CPU per INSERT, four ways of sending them (transactions of 1000)."""
    import psycopg
    from psycopg import pq

    body = bytes(range(128))
    per_tx = 1000
    txs = max(1, statements // per_tx)
    conn = psycopg.connect(url, autocommit=True)
    conn.execute("DROP TABLE IF EXISTS effects")
    conn.execute("CREATE TABLE effects (id BIGSERIAL PRIMARY KEY, body BYTEA)")
    backend = int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])  # type: ignore[index]

    def execute_in_pipeline() -> None:
        for _ in range(txs):
            with conn.pipeline(), conn.transaction():
                for _ in range(per_tx):
                    conn.execute(PG_SQL, (body,))

    def cursor_in_pipeline() -> None:
        cur = conn.cursor()
        for _ in range(txs):
            with conn.pipeline(), conn.transaction():
                for _ in range(per_tx):
                    cur.execute(PG_SQL, (body,))

    def executemany() -> None:
        cur = conn.cursor()
        rows = [(body,)] * per_tx
        for _ in range(txs):
            with conn.transaction():
                cur.executemany(PG_SQL, rows)

    def libpq_pipeline() -> None:
        pg = conn.pgconn
        sql = b"INSERT INTO effects (body) VALUES ($1)"
        pg.enter_pipeline_mode()
        try:
            for _ in range(txs):
                pg.send_query_params(b"BEGIN", None)
                for _ in range(per_tx):
                    pg.send_query_params(sql, [body], [17], [1])
                pg.send_query_params(b"COMMIT", None)
                pg.pipeline_sync()
                while True:
                    res = pg.get_result()
                    if res is None:
                        continue
                    if res.status == pq.ExecStatus.PIPELINE_SYNC:
                        break
                    if res.status != pq.ExecStatus.COMMAND_OK:
                        raise RuntimeError(res.error_message.decode())
        finally:
            pg.exit_pipeline_mode()

    variants = (
        ("psycopg conn.execute in conn.pipeline()", execute_in_pipeline),
        ("psycopg one cursor.execute in conn.pipeline()", cursor_in_pipeline),
        ("psycopg cursor.executemany", executemany),
        ("libpq pipeline mode (pgconn.send_query_params)", libpq_pipeline),
    )
    out = []
    for name, run in (*variants, *variants):  # the first round warms the plan cache and pages
        conn.execute("TRUNCATE effects")
        others = [p for p in backends() if p != backend]
        other0 = sum(cpu_seconds(p) for p in others)
        back0 = cpu_seconds(backend)
        cpu0 = time.thread_time()
        t0 = time.perf_counter()
        run()
        wall = time.perf_counter() - t0
        client = time.thread_time() - cpu0
        back = cpu_seconds(backend) - back0
        other = sum(cpu_seconds(p) for p in others) - other0
        count = int(conn.execute("SELECT count(*) FROM effects").fetchone()[0])  # type: ignore[index]
        if count != txs * per_tx:
            raise SystemExit(f"{name}: {count} rows, expected {txs * per_tx}")
        out.append(
            {
                "variant": name,
                "statements": count,
                "rate": count / wall,
                "client_us": 1e6 * client / count,
                "backend_us": 1e6 * back / count,
                "other_pg_us": 1e6 * other / count,
            }
        )
    conn.execute("DROP TABLE effects")  # the Processor case creates its own
    conn.close()
    return out[len(variants) :]


def run_postgres(n: int, statements: int) -> dict[str, Any]:
    from harness import PostgresServer

    pg = PostgresServer().start()
    try:
        postmaster = pg.pid or 0
        micro = pg_micro(pg.url, lambda: descendants(postmaster), statements)
        case = _case("consume", "oncestream Processor + SQLite ledger")
        with tempfile.TemporaryDirectory(prefix="profile-peers-") as tmp:
            server, port = _nats_server(Path(tmp))
            server.start()
            try:
                asyncio.run(make_stream(server.url, duplicate_window=120, storage="file"))
                _fill(case, server.url, n)
                argv = ["processor-postgres", "--target", server.url, "--n", str(n)]
                argv += ["--server-pid", str(server.pid), "--prof-port", str(port)]
                argv += ["--pg-url", pg.url, "--pg-pid", str(postmaster)]
                e2e = _run_child(argv, 1800 + n / 200)
            finally:
                server.close()
        e2e["system"] = "oncestream Processor + PostgresLedger, INSERT handler"
        e2e["n"] = n
    finally:
        pg.stop()
    return {"micro": micro, "processor": e2e}


# --- tables ------------------------------------------------------------------------


def _us(seconds: float, n: int) -> float:
    return 1e6 * seconds / n


def breakdown(record: dict[str, Any], n: int) -> list[tuple[str, float]]:
    """(component: group, µs per message) rows of one profiled run."""
    prof = record["profile"]
    rows: list[tuple[str, float]] = []
    procs = dict(prof["processes"])
    jvm_total = procs.pop("spark-jvm", 0.0)
    if "jvm_threads" in prof:
        for group, used in sorted(prof["jvm_threads"].items(), key=lambda kv: -kv[1]):
            rows.append((f"Spark JVM: {group}", _us(used, n)))
        rows.append(("Spark JVM: total", _us(jvm_total, n)))
    driver = procs.pop("driver", None)
    client_go = procs.pop("nats.go client", None)
    for key, used in sorted(procs.items(), key=lambda kv: -kv[1]):
        # A process seen last as a zombie has no command line left.
        key = (
            "a one-off process that exited (command line gone)"
            if key.strip() == ("other Python:")
            else key
        )
        rows.append((f"Python: {key}", _us(used, n)))
    if "python" in prof and driver is not None:
        shares_ = prof["python"]["shares"]
        for group, share in shares_.items():
            rows.append((f"driver / Processor (Python): {group}", _us(driver * share, n)))
        rows.append(("driver / Processor (Python): total", _us(driver, n)))
        measured = shares_.get(MEASUREMENT, 0.0)
        rows.append(
            ("driver / Processor (Python): total less measurement", _us(driver * (1 - measured), n))
        )
    elif driver is not None:
        rows.append(("driver (Python)", _us(driver, n)))
    if client_go is not None:
        for group, share in prof["client_pprof"]["shares"].items():
            rows.append((f"nats.go client: {group}", _us(client_go * share, n)))
        rows.append(("nats.go client: total", _us(client_go, n)))
    server = prof["server_cpu"]
    if "server_pprof" in prof:
        for group, share in prof["server_pprof"]["shares"].items():
            rows.append((f"nats-server: {group}", _us(server * share, n)))
        rows.append(("nats-server: total", _us(server, n)))
    if "broker_threads" in prof:
        for group, used in sorted(prof["broker_threads"].items(), key=lambda kv: -kv[1]):
            rows.append((f"Kafka broker: {group}", _us(used, n)))
        rows.append(("Kafka broker: total", _us(server, n)))
    for title, used in sorted(prof.get("postgres", {}).items(), key=lambda kv: -kv[1]):
        rows.append((f"PostgreSQL: {title}", _us(used, n)))
    return [(k, v) for k, v in rows if v >= 0.005 or ": total" in k]


def side_by_side(title: str, records: list[dict[str, Any]], n: int) -> str:
    """One Markdown table: a row per component/group, a column per system."""
    cols = [dict(breakdown(r, n)) for r in records]
    order: list[str] = []
    for r in records:
        order += [k for k, _ in breakdown(r, n) if k not in order]
    lines = [f"### {title}", ""]
    lines.append("| µs per message | " + " | ".join(r["system"] for r in records) + " |")
    lines.append("|---|" + "---:|" * len(records))
    lines.append(
        "| msg/s | " + " | ".join(f"{r['rate']:,.0f}" for r in records) + " |",
    )
    for key in order:
        cells = [f"{c[key]:.2f}" if key in c else "" for c in cols]
        bold = ": total" in key
        label = f"**{key}**" if bold else key
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    # The profilers (py-spy, jcmd) are left out here; the Window's client_cpu counts them.
    client = [sum(r["profile"]["processes"].values()) for r in records]
    lines.append(
        "| **client total** | " + " | ".join(f"**{_us(c, n):.2f}**" for c in client) + " |"
    )
    lines.append(
        "| **server total** | "
        + " | ".join(f"**{_us(r['server_cpu'], n):.2f}**" for r in records)
        + " |"
    )
    samples = []
    for r in records:
        prof = r["profile"]
        got = [f"py-spy {prof['python']['samples']:.0f}"] if "python" in prof else []
        for key in ("server_pprof", "client_pprof"):
            if key in prof:
                got.append(f"{key} {prof[key]['samples']:.1f} s")
        if got:
            samples.append(f"{r['system']}: " + ", ".join(got))
    if samples:
        lines += [
            "",
            "Samples behind the shares (py-spy counts; pprof seconds): " + "; ".join(samples),
        ]
    return "\n".join(lines) + "\n"


def pg_table(micro: list[dict[str, Any]]) -> str:
    lines = [
        "### PostgreSQL: one INSERT of 128 B per message (transactions of 1000)",
        "",
        "| how | statements/s | client µs | backend µs | other PG processes µs | total µs |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in micro:
        total = r["client_us"] + r["backend_us"] + r["other_pg_us"]
        lines.append(
            f"| {r['variant']} | {r['rate']:,.0f} | {r['client_us']:.2f} | "
            f"{r['backend_us']:.2f} | {r['other_pg_us']:.2f} | {total:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--paths", default=",".join(PATHS))
    parser.add_argument("--n", default="1e6", help="messages per case")
    parser.add_argument("--pg-statements", default="5e4", help="postgres: INSERTs per variant")
    parser.add_argument("--pg-n", default="", help="postgres: Processor messages (default --n)")
    parser.add_argument("--tables", default="", help="reprint the tables of a results file")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("case", nargs="?", help=argparse.SUPPRESS)
    parser.add_argument("--format", default="jetstream", help=argparse.SUPPRESS)
    parser.add_argument("--target", default="", help=argparse.SUPPRESS)
    parser.add_argument("--server-pid", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--prof-port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--pg-url", default="", help=argparse.SUPPRESS)
    parser.add_argument("--pg-pid", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.n = int(float(args.n))
        child(args)
        return 0
    if args.tables:
        saved = json.loads(Path(args.tables).read_text())
        md = [tables(path, got, saved["meta"]["n"]) for path, got in saved["results"].items()]
        saved["markdown"] = md
        Path(args.tables).write_text(json.dumps(saved, indent=1))
        print("\n".join(md))
        return 0
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    bad = [p for p in paths if p not in PATHS]
    if bad:
        parser.error(f"--paths: unknown {', '.join(bad)} (allowed: {', '.join(PATHS)})")
    try:
        n = int(float(args.n))
        statements = int(float(args.pg_statements))
        pg_n = int(float(args.pg_n or args.n))
    except ValueError as exc:
        parser.error(f"--n / --pg-statements / --pg-n must be numbers: {exc}")
    if min(n, statements, pg_n) < 1000:
        parser.error("--n, --pg-statements and --pg-n must be at least 1000")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    install()
    meta = {"n": n, "date": time.strftime("%Y-%m-%d %H:%M"), "load_before": os.getloadavg()}
    results: dict[str, Any] = {}
    md: list[str] = []
    plan = {
        "pipeline": [
            ("pipeline", "oncestream jetstream", "pipeline", "jetstream"),
            ("pipeline", "Spark kafka", "pipeline", "kafka"),
        ],
        "spark-write": [
            ("spark-write", "oncestream jetstream", "spark-write", "jetstream"),
            ("spark-write", "Spark kafka", "spark-write", "kafka"),
        ],
    }
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / time.strftime("profile-peers-%Y%m%d-%H%M%S.json")
    failed = False
    for path in paths:
        print(f"== {path}", flush=True)
        try:
            md.append(run_path(path, plan, n, pg_n, statements, results))
            print(md[-1], flush=True)
        except Exception as exc:  # the other paths still run; the error is recorded
            failed = True
            results[path] = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"{path} FAILED: {exc}", flush=True)
        meta["load_after"] = os.getloadavg()
        out.write_text(json.dumps({"meta": meta, "results": results, "markdown": md}, indent=1))
    print("\n".join(md))
    print(f"results written to {out}")
    return 1 if failed else 0


def run_path(
    path: str,
    plan: dict[str, list[tuple[str, str, str, str]]],
    n: int,
    pg_n: int,
    statements: int,
    results: dict[str, Any],
) -> str:
    """Run one path's cases into ``results``; its Markdown tables."""
    if path in plan:
        results[path] = [run_spark_or_processor(*spec, n) for spec in plan[path]]
    elif path == "consume":
        ours = run_spark_or_processor(
            "consume", "oncestream Processor + SQLite ledger", "processor", "jetstream", n
        )
        results[path] = [ours, run_natsgo_consume(n)]
    else:
        results[path] = run_postgres(pg_n, statements)
    return tables(path, results[path], n)


def tables(path: str, got: Any, n: int) -> str:
    """The Markdown tables of one path's results."""
    if isinstance(got, dict) and "error" in got:
        return f"### {path}: failed\n\n{got['error']}\n"
    if path == "postgres":
        pg_n = got["processor"]["n"]
        title = f"Processor + PostgreSQL, N={pg_n:,}"
        return pg_table(got["micro"]) + "\n" + side_by_side(title, [got["processor"]], pg_n)
    title = "consume with acks" if path == "consume" else path
    return side_by_side(f"{title}, N={n:,}", got, n)


if __name__ == "__main__":
    sys.exit(main())
