"""A trial whose cluster does not answer at the end still ends with a verdict.

Seed 41, trial 19 (``cluster-sync``): after a partition between the two followers
healed, every server answered the independent reader's ``STREAM.INFO`` with 10008
("JetStream system temporarily unavailable": no metadata leader) for longer than
its five quick rounds, and the campaign stopped as a harness crash, verdict
unknown. The reader now waits for the cluster (bounded, and the wait is in the
verdict), and a stream that stays unreadable is a finding the checker reports.
The servers are stand-ins here: this is the harness's own logic.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torture.__main__ as torture_main
import torture.rawread as rawread
import torture.trial as trial_module
from torture.checker import check, load_history, violations
from torture.nemesis import Worker
from torture.options import TrialOptions
from torture.rawread import RawRead, read_raw
from torture.report import KEYS
from torture.workers import EFFECTS, EFFECTS_COLUMNS

UNAVAILABLE = (
    "STREAM.INFO T: {'code': 503, 'err_code': 10008, "
    "'description': 'JetStream system temporarily unavailable'}"
)
SERVERS = ["nats://10.0.0.1:4222", "nats://10.0.0.2:4222", "nats://10.0.0.3:4222"]


class _Cluster:
    """Answers ``_read`` with 10008 for the first ``unavailable`` calls, then the stream."""

    def __init__(self, unavailable: int) -> None:
        self.unavailable, self.calls = unavailable, 0

    async def read(self, url: str, stream: str, domain: str | None) -> RawRead:
        self.calls += 1
        if self.calls <= self.unavailable:
            raise RuntimeError(UNAVAILABLE)
        return RawRead(Counter({"pub-0": 1}), 1, 1, 1)


def _unreadable_error() -> type[Exception]:
    # On the code before this fix read_raw raised a plain RuntimeError.
    return getattr(rawread, "Unreadable", RuntimeError)


async def test_the_independent_reader_waits_for_a_cluster_that_comes_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """40 unanswered reads (over 13 rounds of the three servers) then an answer: the
    read succeeds and says it waited (before: it gave up after 15 reads)."""
    cluster = _Cluster(unavailable=40)
    monkeypatch.setattr(rawread, "_read", cluster.read)
    monkeypatch.setattr(rawread, "ROUND_PAUSE", 0.0, raising=False)
    read = await read_raw(SERVERS, "T")
    assert dict(read.keys) == {"pub-0": 1} and cluster.calls == 41
    assert len(read.errors) == 40 and "10008" in read.errors[-1]
    assert read.waited_s >= 0.0


async def test_the_wait_is_bounded_and_the_failure_names_the_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = _Cluster(unavailable=10**9)
    monkeypatch.setattr(rawread, "_read", cluster.read)
    monkeypatch.setattr(rawread, "ROUND_PAUSE", 0.01, raising=False)
    with pytest.raises(_unreadable_error(), match="10008") as failed:
        await read_raw(SERVERS, "T", wait=0.2)
    assert failed.value.waited_s >= 0.2  # type: ignore[attr-defined]
    assert cluster.calls == len(failed.value.errors)  # type: ignore[attr-defined]
    assert cluster.calls < 200  # rounds pause between them


class _Topology:
    """The cluster's addresses; no server answers its monitoring endpoint either."""

    def producer_target(self) -> dict[str, Any]:
        return {"servers": SERVERS, "domain": None}

    def processor_target(self) -> dict[str, Any]:
        return {**self.producer_target(), "stream": "T"}

    def meta_leaders(self) -> dict[str, str | None]:
        return {"c1": "", "c2": "", "c3": ""}


def _trial(tmp_path: Path) -> trial_module.Trial:
    trial = trial_module.Trial(
        index=19, seed=41019, kind="cluster-sync", out=tmp_path, run_id="ab",
        duration=12.0, faults=5, rate=1.0, pg_template=None,
    )  # fmt: skip
    trial.dir.mkdir(parents=True)
    lines = [
        {"mono": 0.0, "process": "nemesis", "op": "trial", "key": "cluster-sync"},
        {"mono": 1.0, "process": "pub", "op": "ack", "key": "pub-0", "latency": 0.01},
    ]
    trial.history.write_text("".join(json.dumps(line) + "\n" for line in lines))
    trial.inputs = {"pub": {"positions": 1}}
    with sqlite3.connect(trial.dir / "lite.db") as db:  # the processor applied pub-0
        db.execute(f"CREATE TABLE {EFFECTS} {EFFECTS_COLUMNS}")
        db.execute(f"INSERT INTO {EFFECTS} VALUES ('pub-0', 'lite', 2.0, 2.0)")
    trial.topo = _Topology()  # type: ignore[assignment]
    cli = Worker("cli", [], trial.dir / "cli.log", restart_until_done=True, cli=True)
    cli.done = True
    trial.workers = {"cli": cli}
    return trial


async def test_a_stream_no_server_answers_is_a_finding_in_the_verdict_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def unreadable(servers: list[str], stream: str, **_: Any) -> RawRead:
        error = _unreadable_error()
        if error is RuntimeError:
            raise RuntimeError(f"independent read of {stream!r} failed: [{UNAVAILABLE!r}]")
        raise error(stream, 60.2, [f"{SERVERS[0]}: RuntimeError: {UNAVAILABLE}"])

    async def project_reader(*_: Any, **__: Any) -> list[str]:
        raise RuntimeError("[10008] JetStream system temporarily unavailable")

    monkeypatch.setattr(trial_module, "read_raw", unreadable)
    trial = _trial(tmp_path)
    monkeypatch.setattr(trial, "stream_keys", project_reader)
    state = await trial._final_state()
    result = check(load_history(trial.history), state)

    assert {k: v for k, v in violations(result).items() if v} == {"unreadable": 1}
    finding = result["unreadable"]["T"]
    assert finding["waited_s"] == 60.2 and "10008" in finding["errors"][-1]
    assert finding["meta_leader"] == {"c1": "", "c2": "", "c3": ""}
    assert "temporarily unavailable" in finding["project_reader"]["error"]
    assert any("stream T unreadable for 60.2 s" in n for n in result["notes"])


async def test_a_wait_for_the_cluster_is_reported_with_the_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def waited(servers: list[str], stream: str, **_: Any) -> RawRead:
        errors = (f"{SERVERS[2]}: RuntimeError: {UNAVAILABLE}",) * 12
        return RawRead(Counter({"pub-0": 1}), 1, 1, 1, waited_s=14.5, errors=errors)

    async def project_reader(*_: Any, **__: Any) -> list[str]:
        return ["pub-0"]

    monkeypatch.setattr(trial_module, "read_raw", waited)
    trial = _trial(tmp_path)
    monkeypatch.setattr(trial, "stream_keys", project_reader)
    result = check(load_history(trial.history), await trial._final_state())
    assert not any(violations(result).values())
    assert any("waited 14.5 s (12 failed reads" in n for n in result["notes"])


async def test_the_products_reader_failing_where_the_independent_one_read_is_a_mismatch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def read(servers: list[str], stream: str, **_: Any) -> RawRead:
        return RawRead(Counter({"pub-0": 1}), 1, 1, 1)

    async def project_reader(*_: Any, **__: Any) -> list[str]:
        raise RuntimeError("[10008] JetStream system temporarily unavailable")

    monkeypatch.setattr(trial_module, "read_raw", read)
    trial = _trial(tmp_path)
    monkeypatch.setattr(trial, "stream_keys", project_reader)
    result = check(load_history(trial.history), await trial._final_state())
    assert {k: v for k, v in violations(result).items() if v} == {"reader_mismatch": 1}
    assert any("the product's reader failed" in n and "10008" in n for n in result["notes"])


def test_the_campaign_names_an_unreadable_trial_and_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class Trial:
        def __init__(self, **kw: Any) -> None:
            self.kw, self.faults = kw, []
            self.dir = kw["out"] / f"trial-{kw['index']:03d}-{kw['kind']}"
            self.history = self.dir / "history.jsonl"

        async def run(self) -> dict[str, Any]:
            self.dir.mkdir(parents=True)
            line = {"mono": 0.0, "process": "nemesis", "op": "trial", "key": "cluster-sync"}
            self.history.write_text(json.dumps(line) + "\n")
            finding = {"waited_s": 60.0, "failed_reads": 90, "errors": [UNAVAILABLE]}
            finding |= {"project_reader": {"error": "x"}, "meta_leader": {"c1": ""}}
            return {
                "index": self.kw["index"], "seed": self.kw["seed"], "kind": self.kw["kind"],
                "inputs": {"pub": {"positions": 0}}, "processed_stream": "T", "streams": {},
                "reads": {"T": {"unreadable": finding}}, "effects": {}, "faults": [],
            }  # fmt: skip

    monkeypatch.setattr(torture_main, "Trial", Trial)
    monkeypatch.setattr(torture_main, "cleanup_stale", list)
    monkeypatch.setattr(torture_main.os, "geteuid", lambda: 0)
    monkeypatch.setattr(torture_main, "trial_plan", _plan_without_faults)
    argv = ["--trials", "1", "--kinds", "cluster-sync", "--duration", "6", "--no-postgres",
            "--spark-every", "0", "--out", str(tmp_path)]  # fmt: skip
    code = torture_main.main(argv)
    latest = json.loads((tmp_path / "latest.json").read_text())
    assert code == 1, capsys.readouterr()
    assert latest["status"] == "done" and latest["violations"] == {"unreadable": 1}
    assert "VIOLATIONS: unreadable=1" in capsys.readouterr().out


def _plan_without_faults(args: Any, index: int) -> dict[str, Any]:
    kind = args.kinds[index % len(args.kinds)]
    return {"index": index, "kind": kind, "seed": 1000 + index, "spark": False, "faults": [],
            "options": TrialOptions(), "stack_faults": 0}  # fmt: skip


def test_the_guarantees_page_names_every_violation_count_and_the_readers_wait() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "guarantees.md").read_text()
    rows = {line.split("|")[1] for line in page.splitlines() if line.startswith("| `")}
    named = {name.strip(" `") for row in rows for name in row.split("/")}
    assert set(KEYS) <= named, sorted(set(KEYS) - named)
    assert f"for up to {rawread.READ_WAIT:g} s" in page
