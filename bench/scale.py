"""bench-scale: every path at N = 10^5, 10^6, 10^7, with RSS, store size and nats.go beside it.

Each case runs in its own process (bench/_scale_cases.py, or the nats.go
reference bench/go built by ``make bench-ref``) against a nats-server started
with the same config. While it runs, /proc is polled: the client's peak RSS is
the peak of the summed VmRSS of its process tree (the Spark cases count the
driver JVM and the Python workers), sampled every 100 ms; the server's is its
peak VmRSS sampled during the case. Write cases (Publisher,
ProducerSession, Spark sink, nats.go publish) get a fresh server each; the read
cases share one server per N, filled once with the Publisher and restarted
before each case.

Env / flags: SCALE_NS (``1e5,1e6,1e7``), SCALE_CASES (all), SCALE_REPEATS (rounds per N,
1; the median round of each path is reported with every round's rate), SCALE_SPARK_MEMORY
(``2g``), SCALE_DUPLICATE_WINDOW (seconds, 120), SCALE_STORAGE (file),
SCALE_LABEL (a line printed above the table), NATSREF (the Go binary,
default bench/go/natsref). Output: bench/results/scale-*.json and .md,
docs/img/scale.png (``--plot``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._scale_cases import CASES, FAST_CASES, WRITE_CASES, scale_spec
from bench._scale_report import plot, write_markdown
from bench.bench_publish import measure_publisher_async

from oncestream import ConnectOptions, connect
from oncestream.server import NatsServer
from oncestream.streams import ensure_stream

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
GO_CASES = ("nats.go publish", "nats.go ordered", "nats.go fetch+ack")
GO_FLAG = {"nats.go publish": "publish", "nats.go ordered": "ordered", "nats.go fetch+ack": "fetch"}
STREAM = "SCALE"
MIB = 1024 * 1024


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return 0


def _tree(pid: int) -> list[int]:
    pids, todo = [], [pid]
    while todo and len(pids) < 500:
        current = todo.pop()
        pids.append(current)
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as fh:
                    todo.extend(int(x) for x in fh.read().split())
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return pids


_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of ``pid`` (its own threads, not its children)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK


class Poller:
    """Peak RSS and CPU seconds of a process tree and of the server, sampled every 100 ms.

    ``client_cpu`` is the last sample of every process seen in its tree (the
    JVM and Python workers of the Spark cases included; a process's last
    < 100 ms before it exits are missed; run_measured takes the larger of it
    and the exact CPU of what the case process reaped); the server's is the
    difference of its CPU seconds from the start of the case to the end.
    Both include start-up (a Python interpreter's imports), which weighs at
    10^5 and fades by 10^6; the Spark cases report their timed part instead
    (see run_measured), since a JVM's start-up and their warm-ups do not fade.
    """

    def __init__(self, client: int, server: int | None) -> None:
        self.client, self.server = client, server
        self.client_peak = self.server_peak = 0
        self.cpu: dict[int, float] = {}
        self.server_start = _cpu_seconds(server) if server else None
        self.server_cpu = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            tree = _tree(self.client)
            self.client_peak = max(self.client_peak, sum(_rss_kib(p) for p in tree))
            for pid in tree:
                seconds = _cpu_seconds(pid)
                if seconds is not None:
                    self.cpu[pid] = seconds
            if self.server:
                self.server_peak = max(self.server_peak, _rss_kib(self.server))
            self._stop.wait(0.1)

    @property
    def client_cpu(self) -> float:
        return sum(self.cpu.values())

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        if self.server and self.server_start is not None:
            end = _cpu_seconds(self.server)
            self.server_cpu = (end - self.server_start) if end is not None else 0.0


def _store_bytes(server: NatsServer) -> int:
    root = server.store_dir
    if root is None or not root.exists():
        return 0
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def run_measured(cmd: list[str], server: NatsServer, timeout: float) -> dict[str, Any]:
    """Run one case process; its CASE-JSON / nats.go JSON plus RSS figures."""
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYTHONPATH=str(HERE.parent))
    started = time.monotonic()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    poller = Poller(proc.pid, server.pid)
    out = err = ""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        err += f"\ntimed out after {timeout:.0f}s"
    finally:
        poller.stop()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # Exact for the case process and whatever it reaped; the samples add a JVM it did not.
    reaped = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    client_cpu = max(reaped, poller.client_cpu)
    record: dict[str, Any] = {"wall_seconds": round(time.monotonic() - started, 2)}
    line = next((x for x in out.splitlines() if x.startswith(("CASE-JSON ", '{"case"'))), None)
    if proc.returncode != 0 or line is None:
        record["error"] = (err or out)[-1500:]
        return record
    record.update(json.loads(line.removeprefix("CASE-JSON ")))
    n = int(record.get("messages") or record.get("n") or 0) or _n_of(cmd)
    if n:
        record["client_cpu_us"] = round(client_cpu / n * 1e6, 2)
        record["server_cpu_us"] = round(poller.server_cpu / n * 1e6, 2)
        timed = record.get("timed_cpu")
        if timed:
            # A Spark case's JVM start-up and warm-up reads/writes are not the rows it
            # timed: at 10^6 they were most of the client CPU, and 30% of the sink's
            # server CPU (its warm-up writes). The whole run's figures stay in the JSON.
            record["process_client_cpu_us"] = record["client_cpu_us"]
            record["process_server_cpu_us"] = record["server_cpu_us"]
            record["client_cpu_us"] = round(timed["client"] / n * 1e6, 2)
            if "server" in timed:
                record["server_cpu_us"] = round(timed["server"] / n * 1e6, 2)
    record["client_rss_mib"] = round(poller.client_peak / 1024, 1)
    record["server_rss_mib"] = round(poller.server_peak / 1024, 1)
    record["store_mib"] = round(_store_bytes(server) / MIB, 1)
    return record


def _n_of(cmd: list[str]) -> int:
    """The N of a case's command line (``--n N`` or nats.go's ``-n N``)."""
    for flag in ("--n", "-n"):
        if flag in cmd:
            return int(cmd[cmd.index(flag) + 1])
    return 0


async def make_stream(
    url: str,
    *,
    duplicate_window: float,
    storage: str,
    atomic: bool = False,
    batched: bool | None = False,
) -> None:
    """Create stream SCALE with the one config every case runs against (``scale_spec``)."""
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        spec = scale_spec(
            STREAM,
            duplicate_window=duplicate_window,
            storage=storage,
            atomic=atomic,
            batched=batched,
        )
        await ensure_stream(conn, spec)


def go_cmd(natsref: str, case: str, url: str, n: int) -> list[str]:
    """The nats.go reference's command line for one of ``GO_CASES`` on stream SCALE."""
    return [natsref, "-url", url, "-n", str(n), "-stream", STREAM, "-subject", "scale.x",
            "-cases", GO_FLAG[case]]  # fmt: skip


def _case_cmd(
    case: str, server: NatsServer, n: int, args: argparse.Namespace, pg: str | None
) -> list[str]:
    url = server.url
    if case in GO_CASES:
        return go_cmd(args.natsref, case, url, n)
    cmd = [sys.executable, str(HERE / "_scale_cases.py"), case, "--url", url, "--n", str(n),
           "--server-pid", str(server.pid),
           "--stream", STREAM, "--spark-memory", args.spark_memory,
           "--duplicate-window", str(args.duplicate_window), "--storage", args.storage]  # fmt: skip
    return [*cmd, "--pg-url", pg] if pg else cmd


def _timeout(n: int) -> float:
    return 600.0 + n / 2000.0  # 10^7 at >= 2k msg/s, plus start-up


class Postgres:
    """A throw-away PostgreSQL (harness/_postgres.py) with one fresh database per case."""

    def __init__(self) -> None:
        from harness import PostgresServer

        self.server = PostgresServer().start()
        self.count = 0

    def database(self) -> str:
        import psycopg

        self.count += 1
        name = f"scale_{self.count}"
        with psycopg.connect(self.server.url, autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {name}")
        return self.server.url.rsplit("/", 1)[0] + "/" + name

    def close(self) -> None:
        self.server.stop()


def measure_n(n: int, cases: list[str], args: argparse.Namespace, pg: Postgres | None) -> list:
    records: list[dict[str, Any]] = []

    def add(case: str, server: NatsServer, database: str | None = None) -> None:
        print(f"  {case} N={n:,}", flush=True)
        rec = run_measured(_case_cmd(case, server, n, args, database), server, _timeout(n))
        rec.update(path=case, n=n)
        if "error" in rec:
            print(f"    FAILED: {rec['error'][-600:]}", flush=True)
        else:
            print(
                f"    {rec['rate']:,.0f} msg/s, CPU client {rec.get('client_cpu_us')} us/msg,"
                f" server {rec.get('server_cpu_us')} us/msg; RSS client"
                f" {rec['client_rss_mib']} MiB, server {rec['server_rss_mib']} MiB,"
                f" store {rec['store_mib']} MiB",
                flush=True,
            )
        records.append(rec)

    for case in [c for c in cases if c in WRITE_CASES or c == "nats.go publish"]:
        with NatsServer() as server:
            if not case.startswith("spark-sink"):  # the sink recreates it itself, same spec
                asyncio.run(
                    make_stream(
                        server.url,
                        duplicate_window=args.duplicate_window,
                        storage=args.storage,
                        atomic=case == "producer-batch",
                        batched=case in FAST_CASES,
                    )
                )
            add(case, server)
    readers = [c for c in cases if c not in WRITE_CASES and c != "nats.go publish"]
    if readers:
        with NatsServer() as server:
            asyncio.run(
                make_stream(
                    server.url, duplicate_window=args.duplicate_window, storage=args.storage
                )
            )
            started = time.monotonic()
            asyncio.run(
                measure_publisher_async(server.url, n, STREAM, fresh=False, subject="scale.x")
            )
            filled = time.monotonic()
            print(f"  filled {n:,} messages in {filled - started:.1f}s", flush=True)
            # Until the duplicate window has passed, the server still tracks every msg id
            # of the fill (at 10^7 about 2 GB of Go heap that its GC marks), which slowed the
            # first read case by up to 14% and not the later ones: each reader gets the same
            # server state. SCALE_SETTLE=0 starts at once.
            if args.settle:
                time.sleep(max(0.0, args.duplicate_window + 1 - (time.monotonic() - filled)))
            for case in readers:
                server.restart()
                database = pg.database() if pg and case.startswith("processor-postgres") else None
                add(case, server, database)
    return records


def median_of(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per path, the round with the median rate, with every round's rate beside it.

    With one round, the records as they are. A path that failed in any round is
    reported as failed (its first failure): a median over the rounds that ran would
    hide it.
    """
    by_path: dict[str, list[dict[str, Any]]] = {}
    for rec in records:
        by_path.setdefault(rec["path"], []).append(rec)
    chosen = []
    for recs in by_path.values():
        if len(recs) == 1:
            chosen.append(recs[0])
            continue
        failed = [r for r in recs if "error" in r]
        if failed:
            chosen.append(failed[0])
            continue
        ranked = sorted(recs, key=lambda r: float(r["rate"]))
        median = dict(ranked[(len(ranked) - 1) // 2])
        median["rounds"] = [round(float(r["rate"])) for r in recs]
        chosen.append(median)
    return chosen


def parse_ns(text: str) -> list[int]:
    return [int(float(x)) for x in text.split(",") if x.strip()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    env = os.environ.get
    parser.add_argument("--ns", default=env("SCALE_NS", "1e5,1e6,1e7"))
    parser.add_argument("--cases", default=env("SCALE_CASES", ",".join(CASES + GO_CASES)))
    parser.add_argument("--spark-memory", default=env("SCALE_SPARK_MEMORY", "2g"))
    parser.add_argument(
        "--duplicate-window", type=float, default=float(env("SCALE_DUPLICATE_WINDOW", "120"))
    )
    parser.add_argument("--storage", default=env("SCALE_STORAGE", "file"))
    parser.add_argument(
        "--settle",
        type=int,
        default=int(env("SCALE_SETTLE", "1")),
        help="1: read cases start once the fill's duplicate window has passed",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=int(env("SCALE_REPEATS", "1")),
        help="rounds per N (each case on a fresh server each round); the median is reported",
    )
    parser.add_argument("--label", default=env("SCALE_LABEL", ""))
    parser.add_argument("--natsref", default=env("NATSREF", str(HERE / "go" / "natsref")))
    parser.add_argument("--plot", default=env("SCALE_PLOT", ""), help="PNG path for the plot")
    args = parser.parse_args()
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in cases if c not in CASES + GO_CASES]
    if unknown:
        parser.error(f"unknown cases {unknown}; allowed: {', '.join(CASES + GO_CASES)}")
    if not os.access(args.natsref, os.X_OK):
        print(f"nats.go reference {args.natsref} not built (make bench-ref): skipped", flush=True)
        cases = [c for c in cases if c not in GO_CASES]
    pg = Postgres() if any(c.startswith("processor-postgres") for c in cases) else None
    records: list[dict[str, Any]] = []
    try:
        for n in parse_ns(args.ns):
            rounds = []
            for round_ in range(args.repeats):
                print(f"N = {n:,}" + (f", round {round_ + 1}/{args.repeats}" * (args.repeats > 1)))
                rounds.extend(measure_n(n, cases, args, pg))
            records.extend(median_of(rounds))
    finally:
        if pg:
            pg.close()
    meta = {
        "label": args.label,
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "spark_memory": args.spark_memory,
        "duplicate_window": args.duplicate_window,
        "storage": args.storage,
        "cpus": os.cpu_count(),
        "loadavg": os.getloadavg(),
    }
    RESULTS.mkdir(exist_ok=True)
    stem = RESULTS / time.strftime("scale-%Y%m%d-%H%M%S")
    stem.with_suffix(".json").write_text(json.dumps({"meta": meta, "results": records}, indent=2))
    table = write_markdown(records, meta)
    stem.with_suffix(".md").write_text(table)
    print(table)
    print(f"results written to {stem}.json and .md")
    if args.plot:
        plot(records, Path(args.plot), meta)
        print(f"plot written to {args.plot}")
    return 1 if any("error" in r for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
