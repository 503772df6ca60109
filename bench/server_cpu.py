"""nats-server CPU per message under nats.go async publish, for the 10^7 fall-off analysis.

Starts a fresh file-storage server (its environment is this process's, so
``GOGC=400 python bench/server_cpu.py ...`` reaches it), creates stream SCALE
(one subject, the given duplicate window), runs ``bench/go/natsref -cases
publish`` for N messages of 128 bytes and prints the publish rate, the
server's CPU microseconds per message (``/proc/<pid>/stat``) and its peak RSS.
Needs ``make bench-ref``. See docs/benchmarks.md, "Where 10^7 falls off".

Usage: ``python bench/server_cpu.py N WINDOW_SECONDS`` (e.g. ``1e7 120``).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._cpu import cpu_seconds

from oncestream import ConnectOptions, connect
from oncestream.server import NatsServer
from oncestream.streams import StreamSpec, ensure_stream

HERE = Path(__file__).resolve().parent


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM"):
            return int(line.split()[1]) / 1024
    return 0.0


async def make_stream(url: str, window: float) -> None:
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        await ensure_stream(
            conn, StreamSpec(name="SCALE", subjects=("scale.x",), duplicate_window=window)
        )


def main() -> None:
    if len(sys.argv) != 3:
        raise SystemExit(__doc__.strip().splitlines()[-1])
    n, window = int(float(sys.argv[1])), float(sys.argv[2])
    natsref = HERE / "go" / "natsref"
    if not os.access(natsref, os.X_OK):
        raise SystemExit(f"{natsref} is not built: run make bench-ref")
    with NatsServer() as server:
        asyncio.run(make_stream(server.url, window))
        pid = server.pid
        assert pid is not None
        before = cpu_seconds(pid)
        cmd = [str(natsref), "-url", server.url, "-n", str(n), "-stream", "SCALE"]
        cmd += ["-subject", "scale.x", "-cases", "publish"]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=True)
        used = cpu_seconds(pid) - before
        rate = json.loads(out.stdout.strip().splitlines()[-1])["rate"]
        print(
            f"N={n:,} duplicate_window={window:g}s GOGC={os.environ.get('GOGC', '-')}: "
            f"nats.go publish {rate:,.0f} msg/s; nats-server {1e6 * used / n:.2f} us CPU/msg, "
            f"peak RSS {peak_rss_mib(pid):,.0f} MiB"
        )


if __name__ == "__main__":
    main()
