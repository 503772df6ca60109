"""Smoke run of the randomized fault campaign (torture/, issue 11).

Three short trials with a fixed seed (single server, R3 cluster, leaf -> hub),
servers in their own network namespaces, producers and processors killed and
paused at seeded random times, at start-up, during the run and during the drain;
the first trial also runs the Spark job (source -> ``jetstream`` sink and a
transactional ``foreachBatch``) with its driver killed and paused and its Python
workers killed and paused: every input record stored once and applied once, none
missing or duplicated in the Spark outputs, no worker failed, both stream readers
agree with the server, every fault's effect checked; and nothing of the run is
left behind. (tests/chaos/test_torture_sabotage.py shows the same run failing
when the system is broken on purpose.)
Also: leftovers of a harness killed with SIGKILL are removed by the next run.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
    pytest.mark.skipif(shutil.which("ip") is None, reason="iproute2 (ip) not installed"),
]


def _namespaces() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


def _postgres_available() -> bool:
    from harness import find_pg_bin

    try:
        find_pg_bin()
    except RuntimeError:
        return False
    return True


def _spark_available() -> bool:
    from torture.spark import java_available

    return java_available()


#: Every fault kind but the stack faults and the OS crashes (the menus' order).
CLASSIC = ",".join((
    "kill", "pause", "server-kill", "server-pause", "cluster-kill", "partition",
    "partition-pair", "degrade", "degrade-pair", "consumer-reset", "disk-full",
    "spark-kill", "spark-pause", "pyworker-kill", "pyworker-pause",
))  # fmt: skip


def test_three_trial_smoke_is_exactly_once_and_cleans_up(tmp_path: Path) -> None:
    # The stack faults and the OS crashes have their own cheap controls (sabotage,
    # durability): the smoke names the classic kinds, which also leaves out the power
    # loss of the cluster trial (a measured limit that cost the smoke a minute).
    argv = [sys.executable, "-m", "torture", "--trials", "3", "--seed", "7", "--duration",
            "8", "--faults", "3", "--stack-faults", "0", "--fault-kinds", CLASSIC,
            "--rate", "40", "--out", str(tmp_path)]  # fmt: skip
    if not _postgres_available():
        argv.append("--no-postgres")
    if not _spark_available():
        argv += ["--spark-every", "0"]
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=280)
    summary = json.loads((tmp_path / "latest.json").read_text())
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert summary["status"] == "done" and summary["violations"] == {}
    assert summary["trials"] == 3
    assert summary["kinds"] == {"single": 1, "cluster": 1, "leaf": 1}
    assert summary["records"] == 3 * 2 * 40 * 8 and summary["acked"] > 0
    from torture.report import KEYS

    for key in KEYS:  # counts, and harness_failures a list
        assert not summary[key], (key, summary[key])
    if _spark_available():
        assert summary["spark_trials"] == 1, summary
        spark_faults = {k: v for k, v in summary["faults"].items() if k.startswith(("spark", "py"))}
        assert sum(spark_faults.values()) >= 4, summary["faults"]
    # faults landed (their effect was checked) at start-up, during the run and the drain
    assert set(summary["faults_by_phase"]) == {"start-up", "run", "drain"}, summary
    landed = sum(summary["faults"].values())
    skipped = sum(s["count"] for s in summary["skipped"].values())
    assert landed >= 8 and skipped <= 2, (summary["faults"], summary["skipped"])
    assert f"os-{summary['run_id']}" not in _namespaces()
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    assert (run_dir / "report.md").exists()
    assert (run_dir / "latency-distribution.png").exists()


def test_leftovers_of_a_killed_harness_are_removed() -> None:
    from torture.netns import STATE_DIR, cleanup_stale

    run_id = "k" + secrets.token_hex(2)
    code = (
        f"from torture.netns import Net; net = Net({run_id!r}); net.add_node('a'); "
        "print('UP', flush=True); import sys; sys.stdin.read()"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "UP"
        assert f"os-{run_id}-a" in _namespaces()
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    assert (STATE_DIR / f"{run_id}.json").exists()
    assert run_id in cleanup_stale()
    assert f"os-{run_id}" not in _namespaces()
    links = subprocess.run(["ip", "link"], capture_output=True, text=True).stdout
    assert f"os{run_id}-h" not in links
    assert not (STATE_DIR / f"{run_id}.json").exists()


def test_sigterm_tears_the_run_down(tmp_path: Path) -> None:
    from torture.netns import STATE_DIR

    before = set(STATE_DIR.glob("*.json")) if STATE_DIR.is_dir() else set()
    argv = [sys.executable, "-m", "torture", "--trials", "1", "--kinds", "single",
            "--duration", "60", "--no-postgres", "--out", str(tmp_path)]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        ours: set[Path] = set()
        while not ours and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)  # waiting for the run's state file (condition, bounded)
            ours = set(STATE_DIR.glob("*.json")) - before
        assert ours, "the run never recorded its namespaces"
        run_id = json.loads(next(iter(ours)).read_text())["run_id"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    assert f"os-{run_id}" not in _namespaces()
    assert not (STATE_DIR / f"{run_id}.json").exists()
    mounts = Path("/proc/mounts").read_text()
    assert f"oncestream-torture-{run_id}" not in mounts


def test_concurrent_runs_get_distinct_subnets() -> None:
    """Two campaigns starting a trial at the same moment (the smoke next to `make torture`)
    must not share a subnet: their clients would reach each other's servers."""
    tag = secrets.token_hex(1)
    code = (
        "import sys; from torture.netns import Net; net = Net(sys.argv[1]); "
        "print(net.subnet, flush=True); sys.stdin.read(); net.teardown()"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, f"c{tag}{i}"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    try:
        subnets = []
        for proc in procs:
            assert proc.stdout is not None
            subnets.append(proc.stdout.readline().strip())
        assert len(set(subnets)) == 4, subnets
    finally:
        for proc in procs:
            proc.communicate("", timeout=30)
    assert f"os-c{tag}" not in _namespaces()


def test_a_device_named_host_in_the_root_namespace_does_not_stop_a_run() -> None:
    """The bridge's end of the host link is named ``host``. It used to be created in the
    root namespace and then moved: one left there by a run killed between the two steps
    made every later run fail with "File exists" (CI run of 1b36b3e)."""
    from torture.netns import Net

    ours = subprocess.run(["ip", "link", "show", "host"], capture_output=True).returncode != 0
    run_id = f"h{secrets.token_hex(2)}"
    if ours:  # else one is there already (a leftover): the case itself
        peer = ["peer", "name", f"os{run_id}-p"]
        subprocess.run(["ip", "link", "add", "host", "type", "veth", *peer], check=True)
    try:
        net = Net(run_id)
        try:
            assert net.add_node("n1").startswith(f"10.77.{net.subnet}.")
        finally:
            net.teardown()
    finally:
        if ours:
            subprocess.run(["ip", "link", "del", "host"], check=True)
    assert f"os-{run_id}" not in _namespaces()
