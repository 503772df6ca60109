"""The Spark part of the torture campaign: which trials run it, its fault schedule,
and the process-tree walk its faults rely on (no Spark here: plain processes)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from torture.spark import KINDS, SparkWorker, descendants, runs_spark, spark_schedule
from torture.topology import KINDS as TRIAL_KINDS


def test_one_trial_in_ten_runs_spark_and_every_trial_kind_gets_its_turn() -> None:
    chosen = [i for i in range(100) if runs_spark(i, 10)]
    assert len(chosen) == 10
    per_kind = Counter(TRIAL_KINDS[i % len(TRIAL_KINDS)] for i in chosen)
    assert set(per_kind) == set(TRIAL_KINDS) and min(per_kind.values()) >= 2
    assert not any(runs_spark(i, 0) for i in range(100))


def test_schedule_has_two_of_each_kind_in_order_within_the_phase() -> None:
    for seed in range(50):
        for duration in (8.0, 12.0, 20.0):
            faults = spark_schedule(seed, duration)
            assert Counter(f.kind for f in faults) == dict.fromkeys(KINDS, 2)
            starts = [f.start for f in faults]
            assert starts == sorted(starts) and starts[0] >= 1.5
            assert all(f.start + f.duration <= duration for f in faults)
            first_kill = next(f.start for f in faults if f.kind == "spark-kill")
            assert all(f.start < first_kill for f in faults if f.kind.startswith("pyworker-"))
    assert spark_schedule(1, 12.0) == spark_schedule(1, 12.0)
    # the order is seeded, not fixed
    orders = {tuple(f.kind for f in spark_schedule(seed, 12.0)) for seed in range(50)}
    assert len(orders) >= 10, orders
    only = spark_schedule(1, 12.0, ("spark-kill", "partition"))
    assert [f.kind for f in only] == ["spark-kill", "spark-kill"]


def test_kill_reaches_every_process_below_the_driver(tmp_path: Path) -> None:
    # driver -> child -> grandchild in its own process group (as pyspark.daemon does)
    code = (
        "import subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', "
        "'import os, subprocess, sys, time; os.setpgid(0, 0); "
        'subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]); '
        "time.sleep(600)']); time.sleep(600)"
    )
    worker = SparkWorker(
        "spark", [sys.executable, "-c", code], tmp_path / "log", restart_until_done=False
    )
    worker.start()
    assert worker.proc is not None
    try:
        deadline = time.monotonic() + 20
        tree: list[int] = []
        while len(tree) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)  # waiting for the two descendants to exist (bounded)
            tree = descendants(worker.proc.pid)
        assert len(tree) == 2
    finally:
        worker.kill()
    assert not worker.alive()
    for pid in tree:
        _wait_gone(pid)


def _wait_gone(pid: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return
        if state == "Z":  # killed, not yet reaped by init
            return
        time.sleep(0.05)
    subprocess.run(["ps", "-o", "pid,stat,cmd", "-p", str(pid)], check=False)
    os.kill(pid, 9)
    raise AssertionError(f"process {pid} survived the driver's kill")
