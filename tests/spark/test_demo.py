"""`oncestream demo --messages 20000 --hard-faults` in a subprocess: exit 0, nothing lost
or doubled, and nothing on the console but the demo's own lines (issue 22)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Java/Spark start-up and log4j lines, Python tracebacks: none may reach the console.
NOISE = re.compile(
    r"Traceback \(most recent call last\)|Using incubator modules|log4j|NativeCodeLoader"
    r"| WARN |WARNING: |Exception in thread|ConnectionResetError|Picked up _?JAVA"
)


def test_demo_small_run_is_exactly_once(tmp_path: Path) -> None:
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", COLUMNS="100")
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("oncestream")),
            "demo",
            "--messages",
            "20000",
            "--hard-faults",
            "--json",
            "--data-dir",
            str(tmp_path / "demo"),
            "--plot",
            str(tmp_path / "latency.png"),
        ],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=280)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.communicate()
        raise
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text[-4000:]
    line = next(x for x in text.splitlines() if x.startswith("DEMO-JSON "))
    summary = json.loads(line.removeprefix("DEMO-JSON "))
    assert summary["ok"] is True
    assert summary["stored_in_orders"] == 20000
    assert summary["duplicates_dropped_by_server"] > 0  # the planted re-sends happened
    enriched = summary["enriched"]
    assert (enriched["found"], enriched["missing"], enriched["duplicated"]) == (20000, 0, 0)
    assert enriched["unexpected"] == 0
    assert summary["revenue_ok"] is True
    assert summary["faults"], "the demo must inject its query kill"
    assert any("nats-server" in fault for fault in map(str, summary["faults"])), summary["faults"]
    lines = text.splitlines()
    # One line per event, as a log file or CI shows it: no wrapping, no source path.
    assert not [line for line in lines if "_runner.py" in line]
    assert any(
        line.endswith("fault: killed streaming query 'enriched' in the middle of a micro-batch")
        for line in lines
    ), text[-3000:]
    noise = [line for line in text.splitlines() if NOISE.search(line)]
    assert noise == [], noise
    stamped = [line for line in text.splitlines() if re.match(r"\[[^\]]*\d:\d\d\]", line)]
    assert stamped and all(re.match(r"\[\d\d:\d\d:\d\d\] ", line) for line in stamped), stamped
    sent = summary["publishes_sent"]
    assert sent >= 20000 + summary["resent_by_publisher"], summary
    assert not (tmp_path / "demo").exists(), "without --keep the data directory is removed"
    assert summary["latency_plot"] == str(tmp_path / "latency.png")
    assert (tmp_path / "latency.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
