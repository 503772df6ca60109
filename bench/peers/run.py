"""bench-peers: oncestream beside what users would pick instead, one table.

Peers (installed on first use under ``.peers/``, see :func:`install`): Kafka
(KRaft, one node, bench/peers/kafka.py) with its perf tools and Spark's ``kafka``
source and sink; ``nats bench`` (natscli); the current nats.go ``jetstream``
package and orbit.go's batch publishers (bench/peers/natsgo); the Debian nats.go
1.22 reference (bench/go, ``make bench-ref``) when built.

Every case gets a fresh server (nats-server from the venv, or a fresh Kafka
broker); read cases fill it first with N 128-byte messages. Per case: rate,
client and server CPU microseconds per message, peak RSS of the client's process
tree and of the server (sampled every 100 ms). CPU: Python/Spark cases measure
their timed part from inside (bench/_cpu.py); Go and Java tools are measured
whole (their start-up included: ~1-2 CPU s for a JVM tool).

Env / flags: PEERS_N (``1e6``), PEERS_PATHS (all), PEERS_SKIP (rows whose system
contains any of these comma-separated words are left out, e.g. ``cold,pre-change``),
PEERS_OUT_WINDOW (the pipeline's output stream's duplicate window, bench/peers/_cases.py),
PEERS_LABEL, PEERS_SERVER_HEAP
(``1GiB``: rows of the publish, Spark write and pipeline paths whose nats-server runs
with the Kafka broker's heap, see SERVER_HEAP; empty: none). Output: one rich
table, bench/results/peers-*.json, docs/img/peers.png.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench._cpu import cpu_seconds
from bench.peers.kafka import PEERS, KafkaBroker, install_kafka, kafka_classpath, spark_kafka_jars
from bench.scale import Poller, make_stream

from oncestream.server import NatsServer

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RESULTS = ROOT / "bench" / "results"
NATSREF = ROOT / "bench" / "go" / "natsref"
NATSGO = PEERS / "bin" / "natsgo"
NATSCLI = PEERS / "bin" / "nats"
PATHS = ("publish", "consume", "spark-read", "spark-write", "pipeline")
ONCESTREAM = "oncestream"
#: The rows on the settings before 0.2.0 (streams without allow_batched), for comparison.
PRE_CHANGE = "pre-change oncestream"
#: The heap the Kafka broker gets (``-Xms1g -Xmx1g``, its start script's default), given
#: to nats-server for the rows that name it: Go collects when the heap reaches the
#: limit instead of each time it doubles (GOGC=100, the default: 1.8 µs of the
#: server's 9.9 per message in the pipeline's profile). PEERS_SERVER_HEAP="" drops them.
SERVER_HEAP = os.environ.get("PEERS_SERVER_HEAP", "1GiB")
HEAP_ENV = {"GOMEMLIMIT": SERVER_HEAP, "GOGC": "off"}
HEAP_ROWS = f", server heap {SERVER_HEAP} (GOMEMLIMIT, GOGC=off)"


def _go_env() -> dict[str, str]:
    go = str(PEERS / "go")
    return dict(
        os.environ,
        GOPATH=go,
        GOMODCACHE=f"{go}/pkg/mod",
        GOCACHE=f"{go}/cache",
        GOBIN=str(PEERS / "bin"),
        GOPROXY="https://proxy.golang.org",
        GOFLAGS="-modcacherw",
        GO111MODULE="on",
    )


def install() -> dict[str, float]:
    """Fetch and build every peer missing from ``.peers/``; seconds per peer (0 if cached)."""
    took: dict[str, float] = {}
    PEERS.mkdir(exist_ok=True)

    def step(name: str, done: bool, action: Callable[[], object]) -> None:
        if done:
            took[name] = 0.0
            return
        print(f"installing {name} ...", flush=True)
        started = time.monotonic()
        action()
        took[name] = round(time.monotonic() - started, 1)
        print(f"  {name}: {took[name]:.0f}s", flush=True)

    def go(*args: str, cwd: Path = ROOT) -> None:
        subprocess.run(["go", *args], cwd=cwd, env=_go_env(), check=True)

    step("kafka jars (Maven Central)", any(PEERS.glob("kafka-*/kafka_2.13-*.jar")), install_kafka)
    step(
        "spark-sql-kafka jars (Maven Central)",
        any(PEERS.glob("spark-sql-kafka-*/.complete")),
        spark_kafka_jars,
    )
    step(
        "natscli (Go module proxy)",
        NATSCLI.exists(),
        lambda: go("install", "github.com/nats-io/natscli/nats@v0.5.1"),
    )
    step(
        "nats.go jetstream reference (Go module proxy)",
        NATSGO.exists() and NATSGO.stat().st_mtime > (HERE / "natsgo" / "main.go").stat().st_mtime,
        lambda: go("build", "-o", str(NATSGO), ".", cwd=HERE / "natsgo"),
    )
    return took


@dataclass
class Case:
    path: str
    system: str
    server: str  # "nats" or "kafka"
    fill: bool
    cmd: Callable[[str, int, int], list[str]]  # (target, n, server pid) -> argv
    parse: Callable[[str], dict[str, Any]]
    inner_cpu: bool = False  # the case reports its timed CPU itself
    note: str = ""
    #: The stream's allow_batched (None: as oncestream creates streams, on where the
    #: server takes fast-ingest batches; False: the settings before 0.2.0).
    batched: bool | None = None
    #: Environment of the nats-server (its Go runtime's heap settings, HEAP_ENV).
    server_env: dict[str, str] | None = None


def _case_json(out: str) -> dict[str, Any]:
    line = next(x for x in out.splitlines() if x.startswith("CASE-JSON "))
    return dict(json.loads(line.removeprefix("CASE-JSON ")))


def _go_json(out: str) -> dict[str, Any]:
    return dict(json.loads(next(x for x in out.splitlines() if x.startswith('{"case"'))))


def _natscli(out: str) -> dict[str, Any]:
    match = re.search(r"stats: ([\d,]+) msgs/sec", out)
    if not match:
        raise ValueError("no stats line")
    return {"rate": float(match.group(1).replace(",", ""))}


def _producer_perf(out: str) -> dict[str, Any]:
    match = re.search(r"(\d+) records sent, ([\d.]+) records/sec", out)
    if not match:
        raise ValueError("no summary line")
    return {"rate": float(match.group(2))}


def _consumer_perf(out: str) -> dict[str, Any]:
    lines = [x for x in out.splitlines() if x.count(",") >= 9 and not x.startswith("start.time")]
    fields = [f.strip() for f in lines[-1].split(",")]
    return {"rate": float(fields[9]), "rate_with_rebalance": float(fields[5])}


def _py(case: str, fmt: str = "jetstream", *extra: str) -> Callable[[str, int, int], list[str]]:
    def cmd(target: str, n: int, pid: int) -> list[str]:
        return [
            sys.executable,
            str(HERE / "_cases.py"),
            case,
            "--format",
            fmt,
            "--target",
            target,
            "--n",
            str(n),
            "--server-pid",
            str(pid),
            *extra,
        ]

    return cmd


def _go_program(binary: Path, flag: str) -> Callable[[str, int, int], list[str]]:
    """The argv of a Go reference program (both take the same flags) for one case."""
    return lambda url, n, _: [
        str(binary),
        "-url",
        url,
        "-n",
        str(n),
        "-stream",
        "SCALE",
        "-subject",
        "scale.x",
        "-cases",
        flag,
    ]


def _natsgo(flag: str) -> Callable[[str, int, int], list[str]]:
    return _go_program(NATSGO, flag)


def _natsref(flag: str) -> Callable[[str, int, int], list[str]]:
    return _go_program(NATSREF, flag)


def _java(main: str, *args: str) -> list[str]:
    return ["java", "-Xmx512m", "-cp", kafka_classpath(), main, *args]


def _kafka_produce(bootstrap: str, n: int, _: int) -> list[str]:
    return _java(
        "org.apache.kafka.tools.ProducerPerformance",
        "--topic",
        "scale",
        "--num-records",
        str(n),
        "--record-size",
        "128",
        "--throughput",
        "-1",
        "--producer-props",
        f"bootstrap.servers={bootstrap}",
        "acks=all",
        "enable.idempotence=true",
    )


def _kafka_consume(bootstrap: str, n: int, _: int) -> list[str]:
    return _java(
        "org.apache.kafka.tools.ConsumerPerformance",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        "scale",
        "--messages",
        str(n),
        "--group",
        "peers",
    )


def cases() -> list[Case]:
    def natscli_pub(url: str, n: int, _: int) -> list[str]:
        return [
            str(NATSCLI),
            "-s",
            url,
            "bench",
            "js",
            "pub",
            "async",
            "scale.x",
            "--dedup",
            "--msgs",
            str(n),
            "--size",
            "128",
            "--no-progress",
            "--stream",
            "SCALE",
        ]

    def natscli_sub(url: str, n: int, _: int) -> list[str]:
        return [
            str(NATSCLI),
            "-s",
            url,
            "bench",
            "js",
            "consume",
            "--msgs",
            str(n),
            "--no-progress",
            "--stream",
            "SCALE",
        ]

    out = [
        Case(
            "publish",
            "oncestream Publisher (msg ids)",
            "nats",
            False,
            _py("publisher"),
            _case_json,
            inner_cpu=True,
        ),
        *(
            [
                Case(
                    "publish",
                    f"oncestream Publisher (msg ids){HEAP_ROWS}",
                    "nats",
                    False,
                    _py("publisher"),
                    _case_json,
                    inner_cpu=True,
                    server_env=HEAP_ENV,
                )
            ]
            if SERVER_HEAP
            else []
        ),
        Case(
            "publish",
            f"{PRE_CHANGE} Publisher (msg ids, no allow_batched)",
            "nats",
            False,
            _py("publisher"),
            _case_json,
            inner_cpu=True,
            batched=False,
        ),
        Case(
            "publish",
            "nats.go 1.22 PublishAsync (msg ids)",
            "nats",
            False,
            _natsref("publish"),
            _go_json,
        ),
        Case(
            "publish",
            "nats.go jetstream PublishAsync (msg ids)",
            "nats",
            False,
            _natsgo("publish"),
            _go_json,
        ),
        Case(
            "publish",
            "orbit.go atomic batch x1000 (msg ids)",
            "nats",
            False,
            _natsgo("batch"),
            _go_json,
        ),
        Case("publish", "orbit.go fast batch (msg ids)", "nats", False, _natsgo("fast"), _go_json),
        Case("publish", "nats bench js pub async --dedup", "nats", False, natscli_pub, _natscli),
        Case(
            "publish",
            "Kafka ProducerPerformance (idempotent, acks=all)",
            "kafka",
            False,
            _kafka_produce,
            _producer_perf,
        ),
        Case(
            "consume",
            "oncestream Processor + SQLite ledger",
            "nats",
            True,
            _py("processor"),
            _case_json,
            inner_cpu=True,
        ),
        Case("consume", "nats.go 1.22 fetch(500) + ack", "nats", True, _natsref("fetch"), _go_json),
        Case(
            "consume", "nats.go jetstream Consume + ack", "nats", True, _natsgo("consume"), _go_json
        ),
        Case(
            "consume", "nats bench js consume (explicit acks)", "nats", True, natscli_sub, _natscli
        ),
        Case(
            "consume",
            "Kafka ConsumerPerformance (group, auto-commit)",
            "kafka",
            True,
            _kafka_consume,
            _consumer_perf,
        ),
    ]
    for path in ("spark-read", "spark-write", "pipeline"):
        fill = path != "spark-write"
        out.append(
            Case(path, "oncestream jetstream", "nats", fill, _py(path), _case_json, inner_cpu=True)
        )
        if path != "spark-read" and SERVER_HEAP:
            out.append(
                Case(
                    path,
                    f"oncestream jetstream{HEAP_ROWS}",
                    "nats",
                    fill,
                    _py(path),
                    _case_json,
                    inner_cpu=True,
                    server_env=HEAP_ENV,
                )
            )
        if path != "spark-read":  # reading does not depend on allow_batched
            out.append(
                Case(
                    path,
                    f"{PRE_CHANGE} jetstream (no allow_batched)",
                    "nats",
                    fill,
                    _py(path, "jetstream", "--pre-change"),
                    _case_json,
                    inner_cpu=True,
                    batched=False,
                )
            )
        out.append(
            Case(path, "Spark kafka", "kafka", fill, _py(path, "kafka"), _case_json, inner_cpu=True)
        )
        if path == "pipeline":  # the first query of a session too (no warm-up)
            for fmt, system in (("jetstream", "oncestream jetstream"), ("kafka", "Spark kafka")):
                out.append(
                    Case(
                        path,
                        f"{system}, first query (cold)",
                        "kafka" if fmt == "kafka" else "nats",
                        fill,
                        _py(path, fmt, "--cold"),
                        _case_json,
                        inner_cpu=True,
                    )
                )
    if not os.access(NATSREF, os.X_OK):
        print(f"{NATSREF} not built (make bench-ref): nats.go 1.22 rows skipped", flush=True)
        out = [c for c in out if "1.22" not in c.system]
    return out


def _fill(case: Case, target: str, n: int) -> None:
    if case.server == "kafka":
        proc = subprocess.run(_kafka_produce(target, n, 0), capture_output=True, text=True)
    else:
        proc = subprocess.run(_natsgo("publish")(target, n, 0), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"fill failed: {proc.stderr[-1500:]}")


def measure(case: Case, n: int) -> dict[str, Any]:
    record: dict[str, Any] = {"path": case.path, "system": case.system, "n": n}
    server: Any = KafkaBroker() if case.server == "kafka" else NatsServer(env=case.server_env)
    try:
        server.start()
        target = server.bootstrap if case.server == "kafka" else server.url
        if case.server == "nats" and "orbit" not in case.system and case.path != "spark-write":
            asyncio.run(
                make_stream(target, duplicate_window=120, storage="file", batched=case.batched)
            )
        if case.fill:
            _fill(case, target, n)
        env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYTHONPATH=str(ROOT))
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        server0 = cpu_seconds(server.pid)
        started = time.monotonic()
        proc = subprocess.Popen(
            case.cmd(target, n, server.pid),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        poller = Poller(proc.pid, server.pid)
        try:
            out, err = proc.communicate(timeout=1800 + n / 500)
        finally:
            poller.stop()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        record["wall_seconds"] = round(time.monotonic() - started, 1)
        if proc.returncode != 0:
            record["error"] = (err or out)[-1500:]
            return record
        record.update(case.parse(out))
        if not case.inner_cpu:
            record["client_cpu"] = round(
                after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 3
            )
            record["server_cpu"] = round(cpu_seconds(server.pid) - server0, 3)
        record["client_rss_mib"] = round(poller.client_peak / 1024, 1)
        record["server_rss_mib"] = round(poller.server_peak / 1024, 1)
        record["client_us_per_msg"] = round(1e6 * record["client_cpu"] / n, 2)
        record["server_us_per_msg"] = round(1e6 * record["server_cpu"] / n, 2)
    except Exception as exc:
        record["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        server.close()
    return record


def table(records: list[dict[str, Any]], meta: dict[str, Any]) -> Any:
    from rich.table import Table

    t = Table(
        title=f"oncestream and its peers, N={meta['n']:,} x 128 B, one run ({meta['date']}, "
        f"load {meta['loadavg_before'][0]:.1f})"
    )
    for col in (
        "path",
        "system",
        "msg/s",
        "vs oncestream",
        "client CPU us/msg",
        "server CPU us/msg",
        "client RSS MiB",
        "server RSS MiB",
    ):
        t.add_column(col, justify="left" if col in ("path", "system") else "right")
    for path in PATHS:
        rows = [r for r in records if r["path"] == path]
        ours = next((r for r in rows if r["system"].startswith(ONCESTREAM) and "rate" in r), None)
        for r in rows:
            if "error" in r:
                t.add_row(path, r["system"], "failed", "", "", "", "", "")
                continue
            ratio = f"{r['rate'] / ours['rate']:.2f}x" if ours and r is not ours else ""
            t.add_row(
                path,
                r["system"],
                f"{r['rate']:,.0f}",
                ratio,
                f"{r['client_us_per_msg']:.1f}",
                f"{r['server_us_per_msg']:.1f}",
                f"{r['client_rss_mib']:,.0f}",
                f"{r['server_rss_mib']:,.0f}",
            )
        t.add_section()
    return t


def plot(records: list[dict[str, Any]], out: Path, meta: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in records if "rate" in r]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(15, 0.42 * len(ok) + 2), sharey=True)
    labels = [f"{r['path']}: {r['system']}" for r in ok][::-1]
    rates = [r["rate"] / 1000 for r in ok][::-1]
    colors = [
        "tab:green"
        if r["system"].startswith(ONCESTREAM)
        else "tab:olive"
        if r["system"].startswith(PRE_CHANGE)
        else ("tab:orange" if "afka" in r["system"] else "tab:blue")
        for r in ok
    ][::-1]
    ax1.barh(labels, rates, color=colors)
    ax1.set_xlabel("thousand messages/s (higher is better)")
    client = [r["client_us_per_msg"] for r in ok][::-1]
    server = [r["server_us_per_msg"] for r in ok][::-1]
    ax2.barh(labels, client, color="tab:gray", label="client")
    ax2.barh(labels, server, left=client, color="tab:purple", label="server")
    ax2.set_xlabel("CPU microseconds per message (lower is better)")
    ax2.legend(loc="lower right")
    fig.suptitle(
        "oncestream (green; streams without fast-ingest batches: olive) vs NATS peers (blue) "
        "vs Kafka (orange), "
        f"N={meta['n']:,}, "
        f"2 cores shared with the server, load {meta['loadavg_before'][0]:.1f}"
    )
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", default=os.environ.get("PEERS_N", "1e6"))
    parser.add_argument("--paths", default=os.environ.get("PEERS_PATHS", ",".join(PATHS)))
    parser.add_argument("--skip", default=os.environ.get("PEERS_SKIP", ""))
    parser.add_argument("--label", default=os.environ.get("PEERS_LABEL", ""))
    parser.add_argument("--plot", default=str(ROOT / "docs" / "img" / "peers.png"))
    args = parser.parse_args()
    n = int(float(args.n))
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    skip = [w.strip() for w in args.skip.split(",") if w.strip()]
    started = time.monotonic()
    took = install()
    print(
        f"peers ready in {time.monotonic() - started:.0f}s (first use downloads and builds; "
        f"cached afterwards under {PEERS})",
        flush=True,
    )
    meta: dict[str, Any] = {
        "n": n,
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "label": args.label,
        "skipped": skip,
        "out_window": os.environ.get("PEERS_OUT_WINDOW") or None,
        "cpus": os.cpu_count(),
        "loadavg_before": os.getloadavg(),
        "install_seconds": took,
        "spark_kafka": spark_kafka_jars()[0],
        "kafka": install_kafka().name,
    }
    records = []
    chosen = [c for c in cases() if c.path in paths and not any(w in c.system for w in skip)]
    for case in chosen:
        print(f"  {case.path}: {case.system}", flush=True)
        rec = measure(case, n)
        if "error" in rec:
            print(f"    FAILED: {rec['error'][-800:]}", flush=True)
        else:
            print(
                f"    {rec['rate']:,.0f} msg/s, CPU us/msg client {rec['client_us_per_msg']}"
                f" server {rec['server_us_per_msg']}",
                flush=True,
            )
        records.append(rec)
    meta["loadavg_after"] = os.getloadavg()
    from rich.console import Console

    console = Console()
    t = table(records, meta)
    if console.is_terminal:
        console.print(t)
    else:
        width = console.measure(t, options=console.options.update(width=100_000)).maximum
        Console(width=width, no_color=True, highlight=False).print(t)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / time.strftime("peers-%Y%m%d-%H%M%S.json")
    out.write_text(json.dumps({"meta": meta, "results": records}, indent=2))
    print(f"results written to {out}")
    if args.plot:
        plot(records, Path(args.plot), meta)
        print(f"plot written to {args.plot}")
    return 1 if any("error" in r for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
