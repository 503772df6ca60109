"""Under Spark Connect, a writer given a stale ``checkpoint_location`` is refused.

Run 1 on checkpoint chk1 dies after the target's commit of batch 0 (before Spark's
commit). Run 2 starts over on a new checkpoint chk2 with other input, but its
``transactional``/``delta`` still gets ``checkpoint_location=chk1``. The scope read
from chk1 is run 1's query id, which records batch 0, and chk1 holds no commit of
batch 0: without a check that chk1 is the running query's checkpoint, run 2's
batch 0 was skipped as a replay and its 100 rows lost with no error
(tests/spark/_stale_location_job.py). Run 2 must fail with a ``ConfigError`` naming
the location instead, also when the writer is built by the worker importing the
module of a foreachBatch function pickled by reference (``by_reference``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spark._connect_server import ROOT, job_env

pytestmark = pytest.mark.timeout(300)


def test_a_stale_checkpoint_location_is_refused_not_skipped(connect_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    proc = subprocess.run(
        [sys.executable, "-m", "tests.spark._stale_location_job", connect_server.url,
         str(tmp_path)],
        cwd=ROOT, env=job_env(), capture_output=True, text=True, timeout=280, check=False,
    )  # fmt: skip
    results = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and results, proc.stderr[-3000:]
    result = json.loads(results[-1][len("RESULT ") :])
    for writer in ("transactional", "delta", "by_reference"):
        # Run 1, its own location given, got to its planted crash: the check passed it.
        assert "planted crash" in (result[writer]["first"] or ""), (writer, result)
        error = result[writer]["error"] or ""
        assert "ConfigError" in error, (writer, result)
        assert f"checkpoint_location={str(tmp_path / writer / 'chk1')!r}" in error, error
        assert "not this query's checkpointLocation" in error, error
        assert "queries running in the session" in error, error  # the new check, not commits
        assert result[writer]["b_rows"] == 0, (writer, result)  # refused, nothing half-written
