"""``python -m torture``'s verdicts and exit codes, with the trial replaced by a stand-in.

0 no violation, 1 violations (named in the output and in latest.json), 2 a harness
crash (latest.json says so; never an old verdict) or Spark trials without Java.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import torture.__main__ as torture_main
from torture.trial import planned_faults

KEYS = ["pub-0", "pub-1", "sess-0"]


class _Trial:
    """Writes a history and returns a final state; ``stored`` is what the stream holds."""

    stored: dict[str, int] = dict.fromkeys(KEYS, 1)
    crash = False
    exit_in_trial = False
    hang = False
    raises: BaseException | None = None

    def __init__(self, **kw: Any) -> None:
        self.kw = kw
        names = ("seed", "kind", "duration", "faults", "campaign_seed", "ordinal")
        plan = {n: kw[n] for n in names}
        self.faults = planned_faults(
            **plan,
            fault_kinds=kw["fault_kinds"],
            spark=kw["spark"],
            sabotage=kw["sabotage"],
            stack_faults=kw["stack_faults"],
        )
        self.dir = kw["out"] / f"trial-{kw['index']:03d}-{kw['kind']}"
        self.history = self.dir / "history.jsonl"

    async def run(self) -> dict[str, Any]:
        if self.crash:
            raise RuntimeError("the harness tripped over itself")
        if self.exit_in_trial:
            raise SystemExit(3)
        if self.raises is not None:
            raise self.raises
        if self.hang:
            try:
                await asyncio.Event().wait()  # never set: a trial that never ends
            finally:
                (self.kw["out"] / f"cleaned-{self.kw['index']}").touch()
        self.dir.mkdir(parents=True)
        lines = [{"mono": 0.0, "process": "nemesis", "op": "trial", "key": "single"}]
        lines += [
            {"mono": 1.0 + i, "process": k.split("-")[0], "op": "ack", "key": k, "latency": 0.01}
            for i, k in enumerate(KEYS)
        ]
        self.history.write_text("".join(json.dumps(line) + "\n" for line in lines))
        stored = dict(self.stored)
        return {
            "index": self.kw["index"],
            "seed": self.kw["seed"],
            "kind": self.kw["kind"],
            "inputs": {"pub": {"positions": 2}, "sess": {"positions": 1}},
            "processed_stream": "T",
            "streams": {"T": stored},
            "reads": {"T": {"raw": stored, "project": stored, "messages": len(stored)}},
            "effects": {"sqlite": dict.fromkeys(KEYS, 1)},
            "faults": [],
        }


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> type[_Trial]:
    class Trial(_Trial):
        pass

    monkeypatch.setattr(torture_main, "Trial", Trial)
    monkeypatch.setattr(torture_main, "cleanup_stale", list)
    monkeypatch.setattr(torture_main.os, "geteuid", lambda: 0)
    monkeypatch.setattr(torture_main, "java_available", lambda: True)
    return Trial


def _run(tmp_path: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    argv = ["--trials", "1", "--kinds", "single", "--duration", "6", "--no-postgres",
            "--spark-every", "0", "--out", str(tmp_path), *extra]  # fmt: skip
    code = torture_main.main(argv)
    return code, json.loads((tmp_path / "latest.json").read_text())


def test_no_violation_exits_0(
    fake: type[_Trial], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, latest = _run(tmp_path)
    assert code == 0, capsys.readouterr()
    assert latest["status"] == "done" and latest["violations"] == {}
    assert latest["records"] == 3 and "schedule_sha256" in latest and latest["code"]
    assert "no violations" in capsys.readouterr().out


def test_a_violation_exits_1_and_is_named(
    fake: type[_Trial], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.stored = {"pub-0": 1, "sess-0": 1}
    code, latest = _run(tmp_path)
    assert code == 1
    assert latest["status"] == "done"
    assert latest["violations"] == {"lost": 1, "unstored": 1}
    assert "VIOLATIONS: lost=1, unstored=1" in capsys.readouterr().out


def test_a_harness_crash_in_a_trial_is_that_trials_reported_failure(
    fake: type[_Trial], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The campaign goes on and ends with a verdict: the trial failed, with its traceback."""
    (tmp_path / "latest.json").write_text(json.dumps({"status": "done", "violations": {}}))
    fake.crash = True
    code, latest = _run(tmp_path, "--trials", "2")
    assert code == 1
    assert latest["status"] == "done" and latest["trials"] == 2
    assert latest["violations"] == {"harness_failures": 2}
    assert "the harness tripped over itself" in latest["harness_failures"][0]["error"]
    assert "VIOLATIONS: harness_failures=2" in capsys.readouterr().out
    report = next(tmp_path.glob("*/report.md")).read_text()
    assert "## Harness failures" in report and "the harness tripped over itself" in report
    totals = report.split("|---|", 1)[1].splitlines()[1]
    assert totals.endswith("| 2 |") and "Traceback" not in totals  # a count, not the list


def test_a_trial_that_exits_or_hangs_is_a_reported_failure_and_cleans_up(
    fake: type[_Trial], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SystemExit inside a trial and a trial past its deadline (cancelled: its clean-up
    runs) are the harness's failures in those trials; the campaign still ends with a
    verdict, and each trial's result is on disk (results.jsonl) as soon as it ends."""
    monkeypatch.setattr(torture_main, "TRIAL_DEADLINE", 0.2)
    fake.exit_in_trial = True
    code, latest = _run(tmp_path)
    assert code == 1 and latest["status"] == "done"
    assert latest["violations"] == {"harness_failures": 1}
    assert "SystemExit" in latest["harness_failures"][0]["traceback"]
    fake.exit_in_trial, fake.hang = False, True
    code, latest = _run(tmp_path, "--trials", "2")
    assert code == 1 and latest["violations"] == {"harness_failures": 2}
    assert "ran past its 0.2 s deadline" in latest["harness_failures"][0]["error"]
    assert sorted(p.name for p in tmp_path.glob("*/cleaned-*")) == ["cleaned-0", "cleaned-1"]
    done = [json.loads(line) for f in tmp_path.glob("*/results.jsonl") for line in f.open()]
    hung = [r["index"] for r in done if "deadline" in r["harness_failures"][0]["error"]]
    assert hung == [0, 1] and len(done) == 3


@pytest.mark.parametrize(
    ("raised", "reported"),
    [
        (asyncio.CancelledError(), "CancelledError"),
        (TimeoutError("connect timed out"), "TimeoutError: connect timed out"),
    ],
)
def test_a_stray_cancel_or_a_trials_own_timeout_is_that_trials_failure(
    fake: type[_Trial], tmp_path: Path, raised: BaseException, reported: str
) -> None:
    """A CancelledError (a BaseException) is reported, not escaped; a TimeoutError the
    trial raised itself is not taken for the deadline."""
    fake.raises = raised
    code, latest = _run(tmp_path)
    assert code == 1 and latest["status"] == "done"
    (failure,) = latest["harness_failures"]
    assert reported in failure["error"] and "deadline" not in failure["error"]


def test_a_report_that_fails_after_the_verdict_keeps_it(
    fake: type[_Trial],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A plot or the report's text failing leaves the verdict written, and the exit code it
    gives (not the harness crash's 2)."""

    def broken(*_: Any) -> None:
        raise RuntimeError("matplotlib fell over")

    monkeypatch.setattr(torture_main.report, "_plots", broken)
    monkeypatch.setattr(torture_main.report, "_markdown", broken)
    fake.stored = {"pub-0": 1, "sess-0": 1}
    code, latest = _run(tmp_path)
    assert code == 1, capsys.readouterr()
    assert latest["status"] == "done" and latest["violations"] == {"lost": 1, "unstored": 1}
    assert latest["report_errors"] == [
        "plots: RuntimeError: matplotlib fell over",
        "report.md: RuntimeError: matplotlib fell over",
    ]
    report = next(tmp_path.glob("*/report.md")).read_text()
    assert "1 trials: lost 1, unstored 1." in report and "matplotlib fell over" in report


def test_a_harness_crash_outside_the_trials_exits_2_and_says_so_in_latest_json(
    fake: type[_Trial],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "latest.json").write_text(json.dumps({"status": "done", "violations": {}}))

    def broken(*_: Any) -> None:
        raise RuntimeError("the harness tripped over itself")

    monkeypatch.setattr(torture_main.report, "write", broken)
    code, latest = _run(tmp_path)
    assert code == 2
    assert latest["status"] == "crashed" and latest["trials_done"] == 1
    assert "the harness tripped over itself" in latest["error"]
    assert "verdict is unknown" in capsys.readouterr().err


def test_spark_trials_without_java_stop_the_run_unless_spark_is_off(
    fake: type[_Trial],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(torture_main, "java_available", lambda: False)
    code = torture_main.main(["--trials", "2", "--spark-every", "1", "--out", str(tmp_path)])
    assert code == 2
    err = capsys.readouterr().err
    assert "Java 17+ or pyspark is missing" in err and "SPARK_EVERY=0" in err
    assert not (tmp_path / "latest.json").exists()
    code, latest = _run(tmp_path)  # --spark-every 0: Java is not needed
    assert code == 0 and latest["spark_trials"] == 0


def test_drop_row_needs_a_spark_trial(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        torture_main.parse(["--trials", "1", "--spark-every", "0", "--sabotage", "drop-row"])
    assert exit_.value.code == 2
    assert "drop-row needs a Spark trial" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--duration", "nan"], "--duration nan: need a finite number of seconds >= 5"),
        (["--duration", "inf"], "--duration inf: need a finite number"),
        (["--rate", "nan"], "--rate nan: need a finite number of messages per second > 0"),
        (["--rate", "inf"], "--rate inf: need a finite number"),
        (["--trials", "0"], "--trials 0: need 1 or more"),
        (["--kinds", "nosuch"], "--kinds 'nosuch': need a comma-separated list from single"),
        (["--option", "window=short", "--option", "window=default"], "given twice"),
        (["--option", "spark_out=delta", "--spark-every", "0"], "pins a Spark option"),
        (["--fault-kinds", "executor-kill", "--spark-every", "0"], "Spark faults only"),
        (
            ["--sabotage", "drop-row", "--spark-every", "1", "--fault-kinds", "partition-pair"],
            "drop-row needs a Spark trial",
        ),
    ],
)
def test_bad_values_are_refused_naming_the_value(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        torture_main.parse(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_an_interrupted_campaign_reports_the_trials_that_ran(
    fake: type[_Trial], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A stop after trial 0 keeps its verdict: a partial report, status interrupted,
    exit 130 (no verdict on the campaign)."""
    runs = {"n": 0}
    original = _Trial.run

    async def run_then_stop(self: _Trial) -> dict[str, Any]:
        runs["n"] += 1
        if runs["n"] > 1:
            raise KeyboardInterrupt("signal 15")
        return await original(self)

    fake.run = run_then_stop  # type: ignore[method-assign]
    argv = ["--trials", "3", "--kinds", "single", "--duration", "6", "--no-postgres",
            "--spark-every", "0", "--out", str(tmp_path)]  # fmt: skip
    assert torture_main.main(argv) == 130
    latest = json.loads((tmp_path / "latest.json").read_text())
    assert latest["status"] == "interrupted" and latest["trials"] == 1
    assert latest["violations"] == {}
    assert "after 1 trials" in capsys.readouterr().out
