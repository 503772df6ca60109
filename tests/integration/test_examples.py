"""The runnable examples keep working (each starts its own embedded nats-server)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_publish_and_process_example_applies_each_order_once() -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "publish_and_process.py")],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "duplicates=10000" in result.stdout
    assert "table rows: 10000 (expected 10000)" in result.stdout
