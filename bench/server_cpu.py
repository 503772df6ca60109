"""nats-server CPU per message under nats.go async publish, for the 10^7 fall-off analysis.

Starts a fresh file-storage server (its environment is this process's, so
``GOGC=400 python bench/server_cpu.py ...`` reaches it), creates stream SCALE
(bench-scale's config, the given duplicate window), runs ``bench/go/natsref -cases
publish`` for N messages of 128 bytes and prints the publish rate, the
server's CPU microseconds per message (``/proc/<pid>/stat``) and its peak RSS
(sampled as in bench-scale).
Needs ``make bench-ref``. See docs/benchmarks.md, "Where 10^7 falls off".

Usage: ``python bench/server_cpu.py N WINDOW_SECONDS`` (e.g. ``1e7 120``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._cpu import cpu_seconds
from bench.scale import go_cmd, make_stream, run_measured

from oncestream.server import NatsServer

HERE = Path(__file__).resolve().parent


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("n", type=_positive, help="messages, e.g. 1e7")
    parser.add_argument("window", type=_positive, help="the stream's duplicate window, seconds")
    args = parser.parse_args()  # exit 2, naming the bad value, on bad usage
    n, window = int(args.n), args.window
    natsref = HERE / "go" / "natsref"
    if not os.access(natsref, os.X_OK):
        raise SystemExit(f"{natsref} is not built: run make bench-ref")
    with NatsServer() as server:
        asyncio.run(make_stream(server.url, duplicate_window=window, storage="file"))
        pid = server.pid
        assert pid is not None
        before = cpu_seconds(pid)
        record = run_measured(go_cmd(str(natsref), "nats.go publish", server.url, n), server, 1800)
        used = cpu_seconds(pid) - before
    if "error" in record:
        raise SystemExit(f"nats.go publish failed: {record['error']}")
    print(
        f"N={n:,} duplicate_window={window:g}s GOGC={os.environ.get('GOGC', '-')}: "
        f"nats.go publish {record['rate']:,.0f} msg/s; nats-server {1e6 * used / n:.2f} us "
        f"CPU/msg, peak RSS {record['server_rss_mib']:,.0f} MiB"
    )


if __name__ == "__main__":
    main()
