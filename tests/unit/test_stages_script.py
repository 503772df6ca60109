"""scripts/stages.py (``make test``'s lanes): every stage runs, a failed one fails the run.

Real make targets of this Makefile stand in for the test stages: ``check-java`` (fast,
passes where the suite can run) and a target that does not exist (make exits 2).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from harness import ended

ROOT = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("stages_script", ROOT / "scripts" / "stages.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["stages_script"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


stages = _script()


def test_a_failed_stage_fails_the_run_and_the_others_still_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = stages.main(["--lane", "no-such-stage check-java", "--lane", "check-java"])
    out = capsys.readouterr().out
    assert code == 1
    table = out[out.index("stage ") :].splitlines()
    rows = {line.split()[0]: line.split() for line in table[1:-1]}
    assert rows["no-such-stage"][-1] == "2" and rows["check-java"][-1] == "0"
    assert sum(1 for line in table if line.startswith("check-java")) == 2  # both lanes ran it
    assert table[-1].endswith("FAILED: no-such-stage")
    assert "===== check-java (lane 2): exit 0" in out  # the second lane's output, shown whole


def test_every_stage_passing_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert stages.main(["--lane", "check-java", "--lane", "check-java"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("passed")


def test_no_lane_is_bad_usage() -> None:
    with pytest.raises(SystemExit) as exc:
        stages.main([])
    assert exc.value.code == 2


def test_a_stage_past_its_timeout_is_stopped_whole_and_fails(tmp_path: Path) -> None:
    """A hung stage (here a shell waiting on a child) is stopped with everything it
    started, and fails with 124, instead of holding the run until CI's own limit."""
    pidfile = tmp_path / "child.pid"
    argv = ["sh", "-c", f"sleep 600 & echo $! > {pidfile}; wait"]
    code, _ = stages._run(argv, tmp_path / "log", 1.0)
    assert code == 124
    child = int(pidfile.read_text())
    assert ended(child, 10), "the child outlived it"


def test_a_stage_within_its_timeout_keeps_its_exit_code(tmp_path: Path) -> None:
    assert stages._run(["sh", "-c", "exit 3"], tmp_path / "log", 60.0)[0] == 3


def test_a_non_positive_timeout_is_bad_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        stages.main(["--timeout", "0", "--lane", "check-java"])
    assert exc.value.code == 2
    assert "--timeout must be a positive number of seconds, got 0" in capsys.readouterr().err
