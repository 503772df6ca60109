"""The README's walk-through, run end to end against an embedded server."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests._support import free_port

ROOT = Path(__file__).resolve().parents[2]
MARKER = (
    "<!-- not-run: covered by tests/integration/test_walkthrough.py::test_readme_walkthrough -->"
)


def _block() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index(MARKER)
    match = re.search(r"```sh\n(.*?)^```", text[start:], re.S | re.M)
    assert match, "the walk-through's sh block is missing"
    return match.group(1)


def _metric(output: str, name: str) -> list[float]:
    return [float(v) for v in re.findall(rf"^{name}\{{[^}}]*\}} (\S+)$", output, re.M)]


def test_readme_walkthrough(nats_server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    script = _block()
    assert "oncestream stream add ORDERS" in script and "dlq replay" in script
    code = script.replace("nats://127.0.0.1:4222", nats_server.url)
    code = code.replace("9464", str(free_port()))
    env = dict(os.environ, COLUMNS="200", HOME=str(tmp_path))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    work = tmp_path / "cwd"
    work.mkdir()
    proc = subprocess.run(
        ["bash", "-e", "-c", code], cwd=work, env=env, capture_output=True, text=True, timeout=120
    )
    out = proc.stdout
    assert proc.returncode == 0, f"{out[-3000:]}\n{proc.stderr[-3000:]}"
    # step 2: the metrics and status agree on 7 applied, 3 dead-lettered
    assert _metric(out, "oncestream_processor_applied_total") == [7.0, 3.0]
    assert _metric(out, "oncestream_processor_dead_lettered_total") == [3.0]
    status_rows = [ln for ln in out.splitlines() if ln.strip().startswith("│ billing")]
    assert len(status_rows) == 2, out
    assert status_rows[0].split("│")[-2].strip() == "7"  # ledger_applied, the last column
    # step 3: the dead letters name orders 3, 5 and 8 and why they failed
    for order in (3, 5, 8):
        assert f"no price list for order {order}" in out
    # step 4: replayed once; the re-run replays nothing
    assert "replayed 3 dead letters from ORDERS_DLQ" in out
    assert "replayed 0 dead letters from ORDERS_DLQ" in out
    # step 5: the metrics, status and the table agree
    assert _metric(out, "oncestream_consumer_ack_floor_sequence") == [13.0]
    final = status_rows[1].split("│")
    assert final[-2].strip() == "10" and "13" in [c.strip() for c in final]
    assert "(10, 10, 550)" in out
