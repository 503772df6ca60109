"""Group scaling: 1, 2 and 4 members over 8 partitions, each held to a CPU share, and uncapped.

Part of ``make bench-scale``. A fresh nats-server (uncapped) holds a partitioned
stream (8 partitions by key, N messages of 128 B over 1,000 keys). Each case runs
a new group (fresh consumers from the first message, fresh SQLite ledgers, one
per partition) of member processes (bench/_group_member.py) and measures how fast
the group applies the stream: the messages left (the partitions' consumers'
pending + awaiting ack) are sampled every 0.05 s, and the rate is taken between
80% and 20% left (each crossing interpolated between its two samples), past the
start (members joining, first takeovers) and the tail.

- **capped**: each member in its own cgroup v1 folder with ``cpu.cfs_quota_us`` =
  GROUP_SCALE_SHARE x period (default 0.2 core), a per-message handler: the
  efficiency of n members is rate(n) / (n x rate(1)), the bar 0.9.
- **uncapped**: members with a batch handler (one ``executemany`` per transaction),
  1, 2 and 4; the best is compared with nats.go's jetstream ``Consume`` + ack
  (bench/peers/natsgo, explicit acks, one consumer, no ledger) on the same stream in
  the same run, the bar 1.0; and nats.go with one filtered consumer per partition
  (what the layout costs nats-server, whoever consumes it). The uncapped cases and
  nats.go run GROUP_SCALE_ROUNDS times, interleaved (each round: every member count,
  then nats.go); each reports the median of its rounds and the ratio is of medians
  (at 400,000 messages one round takes 1-2 s, and single rounds of one run were
  0.77x-1.18x apart).

The members' consumers use explicit acks, the Processor's default;
``GROUP_MEMBER_OPTIONS='{"ack_policy": "all"}'`` runs them with one ack per batch
(the best configuration, docs/production.md). Needs root (the caps) and Go (the
nats.go reference is built by bench/peers/run.py's steps when missing).

Env: GROUP_SCALE_N (400000), GROUP_SCALE_SHARE (0.2; 0 leaves the capped cases out),
GROUP_SCALE_MEMBERS (1,2,4), GROUP_SCALE_BATCH (the capped cases', 1000),
GROUP_SCALE_UNCAPPED_BATCH (the uncapped ones', the Processor's default),
GROUP_SCALE_ROUNDS (3), GROUP_SCALE_PARTITIONS (8), GROUP_SCALE_KEYS (1000),
GROUP_MEMBER_OPTIONS (JSON: more ProcessorOptions of every member, e.g. ``{"ack_policy": "all"}``).
Output: bench/results/group-scale-<time>.json and .md.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._cgroup import CpuCaps
from bench._common import PAYLOAD_128, fresh_server, report
from bench._cpu import cpu_seconds
from bench.peers.kafka import PEERS

from oncestream import ConnectOptions, ProcessorOptions, Publisher, PublisherOptions, connect
from oncestream.streams import Partitioning, StreamSpec, ensure_stream

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
#: nats.go's jetstream reference, as bench-peers builds it (bench/peers/natsgo).
NATSGO = PEERS / "bin" / "natsgo"
STREAM = "GS"
PARTITIONS = int(os.environ.get("GROUP_SCALE_PARTITIONS", "8"))
KEYS = int(os.environ.get("GROUP_SCALE_KEYS", "1000"))
LAYOUT = Partitioning(subjects="gs.*", partitions=PARTITIONS, key=(1,))
N = int(float(os.environ.get("GROUP_SCALE_N", "400000")))
SHARE = float(os.environ.get("GROUP_SCALE_SHARE", "0.2"))
COUNTS = tuple(int(c) for c in os.environ.get("GROUP_SCALE_MEMBERS", "1,2,4").split(","))
ROUNDS = int(os.environ.get("GROUP_SCALE_ROUNDS", "3"))
#: Seconds between two samples of the messages left.
SAMPLE = 0.05
BATCH = os.environ.get("GROUP_SCALE_BATCH", "1000")
#: The uncapped members' batch: the Processor's default unless given (the bar is what a
#: user gets; 1000 cost the uncapped group 30-40% of its rate, bench/results
#: group-scale-20261129-150307.md against -145442).
UNCAPPED_BATCH = os.environ.get("GROUP_SCALE_UNCAPPED_BATCH", str(ProcessorOptions().batch))
#: More ProcessorOptions of every member (bench/_group_member.py reads the same variable).
OPTIONS = json.loads(os.environ.get("GROUP_MEMBER_OPTIONS") or "{}")


async def _fill(url: str) -> dict[int, int]:
    """The stream, filled; the number of messages in each partition."""
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        await ensure_stream(
            conn,
            StreamSpec(name=STREAM, subjects=("gs.*",), partitions=PARTITIONS, partition_key=(1,)),
        )
        async with Publisher(conn, PublisherOptions(stream=STREAM)) as pub:
            for first in range(0, N, 10_000):
                count = min(10_000, N - first)
                ids = range(first, first + count)
                futures = await pub.publish_many(
                    [f"gs.k{i % KEYS}" for i in ids], [PAYLOAD_128] * count, [f"m{i}" for i in ids]
                )
                await asyncio.gather(*futures)
        sizes = {}
        for partition in range(PARTITIONS):
            info = await conn.api(
                f"STREAM.INFO.{STREAM}", {"subjects_filter": LAYOUT.filter_for(partition)}
            )
            sizes[partition] = sum((info["state"].get("subjects") or {}).values())
        assert sum(sizes.values()) == N, sizes
        return sizes


async def _left(conn: Any, group: str, sizes: dict[int, int]) -> int:
    left = 0
    for partition, size in sizes.items():
        try:
            info = await conn.consumer_info(STREAM, f"{group}-p{partition}")
        except Exception:
            left += size  # not created yet
            continue
        left += int(info.get("num_pending") or 0) + int(info.get("num_ack_pending") or 0)
    return left


async def _run_group(
    server_pid: int,
    url: str,
    sizes: dict[int, int],
    members: int,
    kind: str,
    share: float | None,
    caps: CpuCaps | None,
) -> dict[str, Any]:
    group = f"g{kind[0]}{members}{'c' if share else 'u'}{time.monotonic_ns() % 10**6}"
    work = Path(tempfile.mkdtemp(prefix="group-scale-"))
    procs: list[subprocess.Popen[str]] = []
    #: (seconds since start, messages left, server CPU s, members' CPU s)
    samples: list[tuple[float, int, float, float]] = []
    try:
        for index in range(members):
            batch = BATCH if share else UNCAPPED_BATCH
            command = [sys.executable, str(HERE / "_group_member.py"), url, str(work),
                       f"m{index}", STREAM, group, kind, batch]  # fmt: skip
            procs.append(_spawn(command, share, caps))
        began = time.monotonic()
        async with await connect(ConnectOptions(servers=(url,))) as conn:
            deadline = began + max(600.0, N / 500)
            while time.monotonic() < deadline:
                left = await _left(conn, group, sizes)
                cpu = sum(cpu_seconds(p.pid) for p in procs)
                samples.append((time.monotonic() - began, left, cpu_seconds(server_pid), cpu))
                if left == 0:
                    break
                await asyncio.sleep(SAMPLE)
        if samples[-1][1]:
            raise RuntimeError(f"{members} members ({kind}): {samples[-1][1]} left at the deadline")
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(work, ignore_errors=True)
    at80, at20 = _crossing(samples, 0.8 * N), _crossing(samples, 0.2 * N)
    done = at80[1] - at20[1]
    return {
        "members": members,
        "handler": kind,
        "cpu_share": share,
        "rate": round(done / max(at20[0] - at80[0], 1e-9), 1),
        "seconds_to_done": round(samples[-1][0], 2),
        # CPU per message between the two marks: where the time goes.
        "server_us_per_msg": round((at20[2] - at80[2]) * 1e6 / max(done, 1), 2),
        "members_us_per_msg": round((at20[3] - at80[3]) * 1e6 / max(done, 1), 2),
    }


def _crossing(
    samples: list[tuple[float, int, float, float]], level: float
) -> tuple[float, float, float, float]:
    """The sample where the messages left reach ``level``, interpolated linearly between
    the last sample above it and the first at or below it (time and CPU alike)."""
    index = next(i for i, s in enumerate(samples) if s[1] <= level)
    if index == 0 or samples[index][1] == level:
        return tuple(float(x) for x in samples[index])  # type: ignore[return-value]
    above, below = samples[index - 1], samples[index]
    part = (above[1] - level) / (above[1] - below[1])
    return tuple(a + (b - a) * part for a, b in zip(above, below, strict=True))  # type: ignore[return-value]


def _median_row(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The round of median rate, with every round's rate beside it."""
    ordered = sorted(rounds, key=lambda r: r["rate"])
    return {**ordered[len(ordered) // 2], "rounds": [r["rate"] for r in rounds]}


def _spawn(command: list[str], share: float | None, caps: CpuCaps | None) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if caps is not None and share is not None:
        return caps.popen(command, share=share, env=env, stdout=subprocess.DEVNULL)
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, text=True)


def _natsgo(url: str, server_pid: int, filters: tuple[str, ...] = ()) -> dict[str, Any] | None:
    if not NATSGO.exists():  # built as bench-peers builds it (Go module proxy, .peers/go)
        go = str(PEERS / "go")
        env = dict(
            os.environ, GOPATH=go, GOMODCACHE=f"{go}/pkg/mod", GOCACHE=f"{go}/cache",
            GOPROXY="https://proxy.golang.org", GOFLAGS="-modcacherw", GO111MODULE="on",
        )  # fmt: skip
        try:
            subprocess.run(
                ["go", "build", "-o", str(NATSGO), "."], cwd=HERE / "peers" / "natsgo", env=env,
                check=True,
            )  # fmt: skip
        except (OSError, subprocess.CalledProcessError) as exc:
            print(f"nats.go reference not built ({NATSGO}): {exc}")
            return None
    server0, own0 = cpu_seconds(server_pid), _children_cpu()
    out = subprocess.run(
        [str(NATSGO), "-url", url, "-stream", STREAM, "-n", str(N), "-cases", "consume",
         "-filters", ",".join(filters)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    server_cpu, own_cpu = cpu_seconds(server_pid) - server0, _children_cpu() - own0
    for line in out.splitlines():
        if line.startswith("{"):
            data = json.loads(line)
            return {
                "case": "nats.go jetstream Consume + ack"
                + (f", a consumer per partition ({len(filters)})" if filters else ""),
                "rate": float(data["rate"]),
                # The whole run (consumer creation and start included).
                "server_us_per_msg": round(server_cpu * 1e6 / N, 2),
                "client_us_per_msg": round(own_cpu * 1e6 / N, 2),
            }
    print(f"nats.go reference printed no result: {out[-500:]}")
    return None


def _line(row: dict[str, Any]) -> str:
    return (
        f"{row['rate']:.0f} msg/s (CPU us/msg: server {row['server_us_per_msg']}, members "
        f"{row['members_us_per_msg']})"
    )


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def main() -> None:
    server = fresh_server()
    assert server.pid is not None
    results: dict[str, Any] = {
        "capped": [], "uncapped": [], "natsgo": None, "natsgo_partitions": None
    }  # fmt: skip
    try:
        sizes = await _fill(server.url)
        with CpuCaps() if SHARE else contextlib.nullcontext() as caps:
            for members in COUNTS if SHARE else ():
                row = await _run_group(
                    server.pid, server.url, sizes, members, "message", SHARE, caps
                )
                results["capped"].append(row)
                print(f"capped {SHARE:g} core x {members}: {_line(row)}", flush=True)
        uncapped: dict[int, list[dict[str, Any]]] = {members: [] for members in COUNTS}
        natsgo: list[dict[str, Any]] = []
        for round_ in range(ROUNDS):
            for members in COUNTS:
                row = await _run_group(server.pid, server.url, sizes, members, "batch", None, None)
                uncapped[members].append(row)
                print(
                    f"round {round_ + 1}: uncapped x {members} (batch handler): {_line(row)}",
                    flush=True,
                )
            reference = _natsgo(server.url, server.pid)
            if reference is not None:
                natsgo.append(reference)
                print(f"round {round_ + 1}: nats.go {reference['rate']:.0f} msg/s", flush=True)
        results["uncapped"] = [_median_row(rows) for rows in uncapped.values()]
        results["natsgo"] = _median_row(natsgo) if natsgo else None
        # The same client on the group's layout: one filtered consumer per partition,
        # what nats-server's filtering costs whoever consumes the partitions.
        filters = tuple(LAYOUT.filter_for(p) for p in range(PARTITIONS))
        results["natsgo_partitions"] = _natsgo(server.url, server.pid, filters)
    finally:
        server.close()
    one = results["capped"][0]["rate"] if results["capped"] else 0.0
    for row in results["capped"]:
        row["efficiency"] = round(row["rate"] / (row["members"] * one), 3)
        report(
            "group-scale",
            f"{row['members']} members x {SHARE:g} core, per-message handler",
            row["rate"],
            efficiency=row["efficiency"],
        )
    best = max(results["uncapped"], key=lambda r: r["rate"])
    ratio = None
    if results["natsgo"]:
        ratio = round(best["rate"] / results["natsgo"]["rate"], 3)
        report(
            "group-scale",
            "nats.go jetstream Consume + ack",
            results["natsgo"]["rate"],
            baseline=True,
        )
    report(
        "group-scale",
        f"best uncapped: {best['members']} members, batch handler",
        best["rate"],
        vs_natsgo=ratio,
    )
    stamp = time.strftime("%Y%m%d-%H%M%S")
    record = {
        "bench": "group-scale",
        "when": stamp,
        "commit": _git("rev-parse", "--short", "HEAD"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "n": N,
        "partitions": PARTITIONS,
        "keys": KEYS,
        "cpu_share": SHARE,
        "batch": int(BATCH),
        "uncapped_batch": int(UNCAPPED_BATCH),
        "rounds": ROUNDS,
        "member_options": OPTIONS,
        **results,
        "best_uncapped_vs_natsgo": ratio,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"group-scale-{stamp}.json").write_text(json.dumps(record, indent=2) + "\n")
    (RESULTS / f"group-scale-{stamp}.md").write_text(_markdown(record))
    print(f"wrote {RESULTS / f'group-scale-{stamp}.json'}")


def _markdown(record: dict[str, Any]) -> str:
    lines = [
        f"# group scaling, {record['when']} (commit {record['commit']}, load after "
        f"{record['load_after']})",
        "",
        f"{record['n']:,} messages of 128 B over {record['keys']} keys, {record['partitions']} "
        f"partitions, SQLite ledger per partition, batch {record['batch']} (capped) / "
        f"{record.get('uncapped_batch', record['batch'])} (uncapped), member options "
        f"{json.dumps(record.get('member_options') or {})}.",
        "",
    ]
    if record["capped"]:
        lines += [
        f"| members x {record['cpu_share']:g} core (per-message handler) | msg/s | efficiency "
        "| server CPU us/msg | members CPU us/msg |",
        "|---|---|---|---|---|",
        ]  # fmt: skip
    for row in record["capped"]:
        lines.append(
            f"| {row['members']} | {row['rate']:,.0f} | {row['efficiency']:.2f} "
            f"| {row['server_us_per_msg']} | {row['members_us_per_msg']} |"
        )
    lines += [
        "",
        f"| uncapped, batch handler, ack policy {OPTIONS.get('ack_policy', 'explicit')} "
        f"| msg/s (median of {record.get('rounds', 1)}) | server CPU us/msg | client CPU us/msg "
        "| each round's msg/s |",
        "|---|---|---|---|---|",
    ]
    for row in record["uncapped"]:
        lines.append(
            f"| {row['members']} members | {row['rate']:,.0f} | {row['server_us_per_msg']} "
            f"| {row['members_us_per_msg']} | {_rounds(row)} |"
        )
    for go in (record["natsgo"], record.get("natsgo_partitions")):
        if go:
            lines.append(
                f"| {go['case']} | {go['rate']:,.0f} | "
                f"{go['server_us_per_msg']} | {go['client_us_per_msg']} | {_rounds(go)} |"
            )
    if record["natsgo"]:
        lines.append(f"\nbest group / nats.go: {record['best_uncapped_vs_natsgo']}")
    return "\n".join(lines) + "\n"


def _rounds(row: dict[str, Any]) -> str:
    return ", ".join(f"{rate:,.0f}" for rate in row.get("rounds", ()))


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


if __name__ == "__main__":
    asyncio.run(main())
