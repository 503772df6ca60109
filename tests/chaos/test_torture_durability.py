"""The lost-page-cache control of the fault campaign (torture/storefaults.py).

One short R3 trial whose only fault is a power loss of every node at once (each node's
store on our page-cache file system, torture/pagecache, which drops what was not
fsynced when told, as a machine crash drops the page cache). With nats-server's
default ``sync_interval`` (2 minutes) acknowledged writes are lost: the checker must
report them, as the server's measured limit for that setting (the campaign's verdict
does not count them, docs/guarantees.md); with ``sync_interval: always`` the same
trial loses nothing, and there a loss would count. Jepsen's analysis of nats-server
2.12.1 measured the same with a coordinated power loss.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _runnable() -> None:
    from torture.cachefs import unavailable

    missing = "network namespaces need root" if os.geteuid() != 0 else unavailable()
    if missing is not None:  # the file system is built here (make pagecache), never skipped
        pytest.fail(f"the lost-page-cache control cannot run: {missing}")


def _power_loss(tmp_path: Path, kind: str) -> tuple[subprocess.CompletedProcess[str], Any]:
    argv = [sys.executable, "-m", "torture", "--trials", "1", "--kinds", kind, "--seed", "5",
            "--duration", "5", "--faults", "0", "--stack-faults", "1", "--fault-kinds",
            "power-loss", "--rate", "40", "--no-postgres", "--spark-every", "0",
            "--option", "dead_letters=none", "--out", str(tmp_path)]  # fmt: skip
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=280)
    return result, json.loads((tmp_path / "latest.json").read_text())


def test_a_power_loss_with_the_default_sync_loses_acked_writes_and_they_are_reported(
    tmp_path: Path,
) -> None:
    result, latest = _power_loss(tmp_path, "cluster")
    output = result.stdout[-3000:] + result.stderr[-3000:]
    assert latest["status"] == "done", output
    assert latest["faults"].get("power-loss") == 1, (latest["faults"], latest["skipped"])
    limits = latest["measured_limits"]
    assert limits["trials"] and limits["trials"][0]["setting"] == "R3, sync default", limits
    assert limits["totals"].get("lost", 0) >= 1, limits  # acked, then gone: reported
    assert latest["durability"]["R3, sync default"]["crash_lost"] >= 1
    # A loss the setting allows is the server's limit, not oncestream's violation.
    assert latest["violations"] == {} and result.returncode == 0, output
    assert "measured limit (not a violation)" in result.stdout


def test_the_same_power_loss_with_sync_always_loses_nothing(tmp_path: Path) -> None:
    result, latest = _power_loss(tmp_path, "cluster-sync")
    output = result.stdout[-3000:] + result.stderr[-3000:]
    assert latest["status"] == "done", output
    assert latest["faults"].get("power-loss") == 1, (latest["faults"], latest["skipped"])
    assert latest["measured_limits"]["trials"] == []  # always: every loss would count
    assert latest["durability"]["R3, sync always"]["crash_lost"] == 0
    assert latest["lost"] == 0 and latest["violations"] == {}, output
    assert result.returncode == 0, output
