"""bench-scale's table, N parsing and process-tree RSS polling (no server, no Spark)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

from bench._scale_report import plot, write_markdown
from bench.scale import Poller, median_of, parse_ns

META = {"label": "validation", "date": "d", "cpus": 2, "loadavg": (1.0, 1.0, 1.0),
        "storage": "file", "duplicate_window": 120.0}  # fmt: skip


def test_parse_ns_accepts_scientific_notation() -> None:
    assert parse_ns("1e4, 1e5,2000") == [10_000, 100_000, 2000]


def test_table_ratios_against_peer_and_smallest_n(tmp_path) -> None:  # type: ignore[no-untyped-def]
    records = [
        {"path": "publisher", "n": 100, "rate": 100.0, "client_rss_mib": 30.0},
        {"path": "publisher", "n": 1000, "rate": 80.0, "client_rss_mib": 45.0},
        {"path": "nats.go publish", "n": 1000, "rate": 160.0, "client_rss_mib": 10.0},
        {
            "path": "processor-sqlite",
            "n": 100,
            "rate": 5.0,
            "client_rss_mib": 40.0,
            "ledger_rows_after_prune": 0,
            "ledger_bytes_after_prune": 4096,
        },
        {"path": "spark-sink", "n": 100, "error": "Traceback\nBoom: no"},
    ]
    table = write_markdown(records, META)
    row = next(x for x in table.splitlines() if x.startswith("| publisher | 1,000 "))
    assert "0.50x nats.go publish" in row
    assert "| 0.80x |" in row and "| 1.50x |" in row
    assert "0 rows, 4 KiB" in table
    assert "FAILED: Boom: no" in table
    out = tmp_path / "scale.png"
    plot(records, out, META)
    assert out.stat().st_size > 0


def test_poller_sums_the_process_tree() -> None:
    code = (
        "import subprocess,sys; subprocess.run([sys.executable,'-c','import time; time.sleep(1)'])"
    )
    proc = subprocess.Popen([sys.executable, "-c", code])
    poller = Poller(proc.pid, os.getpid())
    proc.wait(timeout=30)
    poller.stop()
    # Two interpreters of several MiB each, summed; and this process as the "server".
    assert poller.client_peak > 2 * 4 * 1024
    assert poller.server_peak > 0


def test_repeats_report_the_median_round_and_a_failure_is_not_hidden() -> None:
    rounds = [
        {"path": "publisher", "n": 10, "rate": r, "client_cpu_us": c}
        for r, c in ((100.0, 3.0), (300.0, 1.0), (200.0, 2.0))
    ]
    rounds += [{"path": "spark", "n": 10, "rate": 5.0}, {"path": "spark", "n": 10, "error": "x"}]
    chosen = {r["path"]: r for r in median_of(rounds)}
    assert chosen["publisher"]["rate"] == 200.0 and chosen["publisher"]["client_cpu_us"] == 2.0
    assert chosen["publisher"]["rounds"] == [100, 300, 200]
    assert chosen["spark"].get("error") == "x"
    table = write_markdown(list(chosen.values()), META)
    assert "median of 100/300/200" in table
    one = [{"path": "publisher", "n": 10, "rate": 1.0}]
    assert median_of(one) == one


def test_cpu_sampler_counts_a_process_outside_its_tree_only_when_named() -> None:
    """A Spark case's timed CPU includes the nats-server its parent started (``also``)."""
    from bench._cpu import CpuSampler, _read

    # A process outside this tree (its shell exits at once), named like a server: it
    # burns about 0.6 s of CPU, says so, then idles until it is killed (a background
    # job of a shell script reads /dev/null, so it cannot wait on stdin).
    burn = (
        "import sys,time\n"
        "end=time.process_time()+0.6\n"
        "while time.process_time()<end: pass\n"
        "print('burnt', flush=True)\n"
        "time.sleep(60)\n"
    )
    shell = subprocess.Popen(
        ["sh", "-c", '"$1" -c "$0" nats-server & echo $!', burn, sys.executable],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert shell.stdout is not None
    pid = int(shell.stdout.readline())
    try:
        shell.wait(timeout=30)
        info = _read(pid)
        assert info is not None and info[0] != os.getpid()  # not our child: outside the tree
        named = CpuSampler(also=(pid,)).start()
        unnamed = CpuSampler().start()
        assert shell.stdout.readline().strip() == "burnt"
        assert unnamed.stop().get("nats-server", 0.0) == 0.0
        assert named.stop().get("nats-server", 0.0) >= 0.3
    finally:
        shell.stdout.close()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
