"""The fault campaign's checker (torture/checker.py) on hand-made histories and states.

Each test breaks one thing in an otherwise clean trial and asserts the one
violation it must produce; the completeness rules (every input record stored and
applied, not only the acknowledged ones) come first.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from torture.checker import check, expected_keys, violations
from torture.report import landing, landing_warnings, summarize
from torture.trial import STREAM_LOST

KEYS = ["pub-0", "pub-1", "pub-2", "sess-0", "sess-1"]


def _history(acked: list[str]) -> list[dict[str, Any]]:
    return [
        {"mono": float(i), "process": k.split("-")[0], "op": "ack", "key": k, "latency": 0.01}
        for i, k in enumerate(acked)
    ]


def _state(**changes: Any) -> dict[str, Any]:
    ones = dict.fromkeys(KEYS, 1)
    state: dict[str, Any] = {
        "index": 0,
        "seed": 7000,
        "kind": "single",
        "inputs": {"pub": {"positions": 3}, "sess": {"positions": 2}},
        "processed_stream": "T",
        "streams": {"T": dict(ones)},
        "reads": {"T": {"raw": dict(ones), "project": dict(ones), "messages": 5}},
        "effects": {"sqlite": dict(ones), "postgres": dict(ones)},
        "faults": [],
        "worker_failures": [],
        "unfinished": [],
    }
    state.update(copy.deepcopy(changes))
    return state


def _stored(counts: dict[str, int]) -> dict[str, Any]:
    """A state whose producers' stream holds ``counts`` (both readers and the server agree)."""
    return {
        "streams": {"T": counts},
        "reads": {"T": {"raw": counts, "project": counts, "messages": sum(counts.values())}},
    }


def _nonzero(result: dict[str, Any]) -> dict[str, int]:
    return {k: v for k, v in violations(result).items() if v}


def test_a_clean_trial_has_no_violation() -> None:
    result = check(_history(KEYS), _state())
    assert _nonzero(result) == {}
    assert result["records"] == 5 and result["acked"] == 5


def test_a_resume_that_skipped_a_position_is_unstored_though_nothing_was_acked_for_it() -> None:
    # sess-1 was never sent: no ack, not in the stream, no effect. Checking only the
    # acknowledged keys (the old rule) sees nothing; the input says it is missing.
    left = {k: 1 for k in KEYS if k != "sess-1"}
    state = _state(**_stored(left), effects={"sqlite": left})
    result = check(_history([k for k in KEYS if k != "sess-1"]), state)
    assert result["lost"] == []
    assert result["unstored"] == ["sess-1"]
    assert result["missing_effects"] == {"sqlite": ["sess-1"]}
    assert _nonzero(result) == {"unstored": 1, "missing_effects": 1}


def test_an_acked_record_missing_from_the_stream_is_lost_and_unstored() -> None:
    left = {k: 1 for k in KEYS if k != "pub-1"}
    result = check(_history(KEYS), _state(**_stored(left)))
    assert result["lost"] == ["pub-1"] and result["unstored"] == ["pub-1"]
    assert _nonzero(result) == {"lost": 1, "unstored": 1}


def test_a_publisher_that_gave_up_leaves_its_records_unstored() -> None:
    # No ack line (the publish failed for good), the worker exited 1: both count.
    left = {k: 1 for k in KEYS if k != "pub-2"}
    failure = {"worker": "pub", "code": 1, "why": "exit code", "log_tail": ["PublishFailed"]}
    state = _state(**_stored(left), effects={"sqlite": left}, worker_failures=[failure])
    result = check(_history(list(left)), state)
    assert _nonzero(result) == {"unstored": 1, "missing_effects": 1, "worker_failures": 1}
    assert result["worker_failures"][0]["log_tail"] == ["PublishFailed"]


def test_a_record_stored_without_its_ack_line_is_fine() -> None:
    # SIGKILL between the PubAck and the history line: stored once, nothing lost.
    result = check(_history(KEYS[:-1]), _state())
    assert _nonzero(result) == {}
    assert result["acked"] == 4


def test_stored_twice_applied_twice_and_unexpected_keys() -> None:
    twice = dict.fromkeys(KEYS, 1) | {"pub-0": 2}
    result = check(_history(KEYS), _state(**_stored(twice)))
    assert _nonzero(result) == {"duplicated": 1}

    effects = {"sqlite": dict.fromkeys(KEYS, 1) | {"sess-0": 2}, "postgres": dict.fromkeys(KEYS, 1)}
    result = check(_history(KEYS), _state(effects=effects))
    assert result["applied_twice"] == {"sqlite": ["sess-0"], "postgres": []}
    assert _nonzero(result) == {"applied_twice": 1}

    stray = dict.fromkeys(KEYS, 1) | {"zzz-9": 1}
    effects = {"sqlite": stray, "postgres": dict.fromkeys(KEYS, 1)}
    result = check(_history(KEYS), _state(**_stored(stray), effects=effects))
    assert result["unexpected"] == ["zzz-9", "zzz-9"]  # stored, and applied
    assert _nonzero(result) == {"unexpected": 2}


def test_effects_must_equal_the_input_not_only_the_processed_stream() -> None:
    # Lost from the stream and never applied: missing in both databases too.
    left = {k: 1 for k in KEYS if k != "pub-0"}
    result = check(_history(KEYS), _state(**_stored(left), effects={"sqlite": left}))
    assert result["missing_effects"] == {"sqlite": ["pub-0"]}


def test_the_cli_input_is_read_from_its_file(tmp_path: Path) -> None:
    file = tmp_path / "cli-input.jsonl"
    file.write_text("".join(json.dumps({"id": f"cli-{i}", "n": i}) + "\n" for i in range(3)))
    inputs = {"pub": {"positions": 1}, "cli": {"file": str(file), "id_field": "id"}}
    assert expected_keys(inputs) == {"pub-0": "pub", "cli-0": "cli", "cli-1": "cli", "cli-2": "cli"}
    stored = {"pub-0": 1, "cli-0": 1, "cli-2": 1}
    state = _state(inputs=inputs, **_stored(stored), effects={"sqlite": stored})
    # the CLI records no acks: only its input file says what it had to store
    result = check(_history(["pub-0"]), state)
    assert result["unstored"] == ["cli-1"] and result["lost"] == []
    assert _nonzero(result) == {"unstored": 1, "missing_effects": 1}


def test_unfinished_producers_and_worker_errors_are_violations() -> None:
    failures = [
        {"worker": "lite", "code": 1, "why": "exit code", "log_tail": ["Traceback", "Boom"]},
        {"worker": "pg1", "code": None, "why": "still running 15s after SIGTERM", "log_tail": []},
    ]
    unfinished = [{"worker": "cli", "log_tail": ["gave up"]}]
    result = check(_history(KEYS), _state(worker_failures=failures, unfinished=unfinished))
    assert _nonzero(result) == {"worker_failures": 3}
    cli = result["worker_failures"][-1]
    assert cli["worker"] == "cli" and cli["why"] == "never finished its input"
    assert cli["log_tail"] == ["gave up"]


def test_the_two_readers_and_the_server_count_must_agree() -> None:
    ones = dict.fromkeys(KEYS, 1)
    short = {k: 1 for k in KEYS if k != "pub-2"}
    reads = {"T": {"raw": ones, "project": short, "messages": 5}}
    assert _nonzero(check(_history(KEYS), _state(reads=reads))) == {"reader_mismatch": 1}
    reads = {"T": {"raw": ones, "project": ones, "messages": 6}}
    result = check(_history(KEYS), _state(reads=reads))
    assert result["reader_mismatch"] == {"T": 1}


def test_leaf_records_missing_at_the_hub() -> None:
    ones = dict.fromkeys(KEYS, 1)
    hub = {k: 1 for k in KEYS if k != "sess-0"}
    streams = {"T": ones, "TH": hub}
    result = check(_history(KEYS), _state(kind="leaf", streams=streams, sourced_after_s=1.0))
    assert result["missing_at_hub"] == ["sess-0"]
    assert _nonzero(result) == {"missing_at_hub": 1}


@pytest.mark.parametrize(
    ("output", "missing", "duplicated"),
    [
        ({k: 1 for k in KEYS if k != "pub-1"}, ["pub-1"], []),
        (dict.fromkeys(KEYS, 1) | {"pub-1": 2}, [], ["pub-1"]),
        (dict.fromkeys(KEYS, 1) | {"nope": 1}, ["+nope"], []),
    ],
)
def test_spark_outputs_must_hold_every_input_record_once(
    output: dict[str, int], missing: list[str], duplicated: list[str]
) -> None:
    spark = {"stream": dict.fromkeys(KEYS, 1), "db": output}
    result = check(_history(KEYS), _state(spark=spark))
    assert result["spark_missing"] == {"stream": [], "db": missing}
    assert result["spark_duplicated"] == {"stream": [], "db": duplicated}


def test_the_report_counts_landed_and_skipped_faults_per_kind_with_reasons() -> None:
    faults = [
        {"kind": "kill", "target": "pub", "resolved": "pub", "phase": "run"},
        {"kind": "kill", "target": "lite", "resolved": "lite", "phase": "drain"},
        {"kind": "kill", "target": "cli", "resolved": "cli", "skipped": True,
         "why": "the producer had finished its input"},
        {"kind": "partition", "target": "s1", "resolved": "s1", "skipped": True,
         "why": "host still reaches it: open"},
    ]  # fmt: skip
    result = check(_history(KEYS), _state(faults=faults))
    result["wall_s"] = 1.0
    assert [f["kind"] for f in result["faults"]] == ["kill", "kill"]
    per = landing([result])
    assert per["kill"] == {
        "landed": 2,
        "skipped": 1,
        "landed_pct": 66.7,
        "reasons": {"the producer had finished its input": 1},
        "not_applicable": 0,
    }
    assert per["partition"]["landed"] == 0 and per["partition"]["landed_pct"] == 0.0
    summary = summarize([result], seed=7)
    assert summary["faults"] == {"kill": 2}
    assert summary["skipped"]["partition"] == {
        "count": 1,
        "reasons": {"host still reaches it: open": 1},
    }
    assert summary["faults_by_phase"] == {"drain": 1, "run": 1}
    assert summary["landing_workers"]["kill:cli"] == {
        "landed": 0,
        "skipped": 1,
        "landed_pct": 0.0,
        "reasons": {"the producer had finished its input": 1},
        "not_applicable": 0,
    }
    assert summary["landing_workers"]["kill:pub"]["landed"] == 1
    assert "partition:s1" not in summary["landing_workers"]
    assert summary["violations"] == {}
    broken = check(_history(KEYS), _state(**_stored({k: 1 for k in KEYS if k != "pub-0"})))
    broken["wall_s"] = 1.0
    assert summarize([result, broken], seed=7)["violations"] == {"lost": 1, "unstored": 1}


def test_a_membership_change_after_the_stream_was_lost_is_apart_only_in_a_limit_trial() -> None:
    """A membership change that found no stream (an OS crash under the default sync took
    it) is not applicable where the trial reports that loss as a measured limit, and a
    plain skip anywhere else: the landed share cannot be bought with the reason alone."""
    lost = {"kind": "membership", "target": "c2", "skipped": True, "why": STREAM_LOST}
    landed = {"kind": "membership", "target": "c3", "resolved": "c3"}
    limited = {
        "faults": [landed],
        "skipped": [lost],
        "limit": "sync_interval default",
        "gone_streams": ["T"],
    }
    counted = {"faults": [landed], "skipped": [lost], "limit": None, "gone_streams": ["T"]}
    # A limit trial whose final read found the stream (one "not found" on the way only).
    readable = {**limited, "gone_streams": ["TP"]}
    assert landing([readable])["membership"]["skipped"] == 1
    assert landing([limited])["membership"] == {
        "landed": 1,
        "skipped": 0,
        "landed_pct": 100.0,
        "reasons": {},
        "not_applicable": 1,
    }
    assert landing([counted])["membership"]["landed_pct"] == 50.0
    assert landing([counted])["membership"]["not_applicable"] == 0
    only = landing([{"faults": [], "skipped": [lost], "limit": "x", "gone_streams": ["T"]}])
    only = only["membership"]
    assert only["landed"] == only["skipped"] == 0 and only["not_applicable"] == 1
    assert only["landed_pct"] is None
    assert landing_warnings(landing([counted] * 5)) == [
        "fault kind membership landed 50.0 % of 10 attempts (< 90%)"
    ]


def test_a_kind_landing_in_fewer_than_90_percent_of_its_attempts_is_warned() -> None:
    per = {
        "kill": {"landed": 9, "skipped": 1, "landed_pct": 90.0, "reasons": {}},
        "degrade": {"landed": 8, "skipped": 2, "landed_pct": 80.0, "reasons": {}},
        "partition": {"landed": 1, "skipped": 1, "landed_pct": 50.0, "reasons": {}},
    }
    # partition: too few attempts for a verdict
    assert landing_warnings(per) == ["fault kind degrade landed 80.0 % of 10 attempts (< 90%)"]


def test_a_leaderless_replicas_count_is_unknown_to_the_drain() -> None:
    """The drain must not end on a count a replica gave without a leader (CI run of decd285)."""
    from torture.trial import leader_count

    state = {"messages": 638}
    assert leader_count({"state": state, "cluster": {"name": "C", "leader": ""}}) == 0
    assert leader_count({"state": state, "cluster": {"name": "C"}}) == 0
    assert leader_count({"state": state, "cluster": {"name": "C", "leader": "c2"}}) == 638
    assert leader_count({"state": state}) == 638  # a single server: no cluster block


def test_takeovers_are_counted_as_switches_of_the_applying_instance() -> None:
    from torture.trial import _switches

    rows = [("a", "pg1", 0.0, 1.0), ("c", "pg2", 0.0, 3.0), ("b", "pg1", 0.0, 2.0)]
    rows += [("d", "pg1", 0.0, 4.0)]
    assert _switches(rows) == {"rows": {"pg1": 3, "pg2": 1}, "switches": 2}
    assert _switches([]) == {"rows": {}, "switches": 0}


def test_a_fault_on_a_postgres_processor_without_postgres_is_skipped(tmp_path: Path) -> None:
    import asyncio

    from torture.nemesis import Fault
    from torture.trial import Trial

    trial = Trial(index=0, seed=1, kind="single", out=tmp_path, run_id="t", duration=8.0,
                  faults=0, rate=10.0, pg_template=None)  # fmt: skip
    trial.topo = object()  # type: ignore[assignment]
    trial.net = object()  # type: ignore[assignment]
    for kind, target in (("kill", "pg2"), ("pause", "pg1"), ("consumer-reset", "pg")):
        outcome = asyncio.run(trial._apply(Fault(1.0, 1.0, kind, target), target))
        assert not outcome.landed and not outcome.retry and not outcome.touched, outcome


async def test_a_key_stored_twice_is_reported_with_each_copys_sequence_and_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Seed 52, trial 15: a re-send held by a paused server reached the leader 4.86 s
    after the first copy, past the 4 s window; the report shows when each copy came."""
    import torture.rawread as rawread

    stored = [(5, "pub-0", "2026-11-30T07:38:10.491Z"), (6, "pub-1", "2026-11-30T07:38:10.5Z"),
              (9, "pub-0", "2026-11-30T07:38:15.351000001Z")]  # fmt: skip

    async def walk(url: str, stream: str, domain: Any, visit: Any, times: Any = None) -> Any:
        for seq, key, at in stored:
            times[seq] = at
            visit(seq, key, {})
        return {"messages": 3, "first_seq": 5, "last_seq": 9}

    monkeypatch.setattr(rawread, "_walk", walk)
    raw = await rawread._read("nats://x", "T", None)
    assert raw.copies == {"pub-0": ((5, stored[0][2]), (9, stored[2][2]))}
    state = _state(**_stored(dict.fromkeys(KEYS, 1) | {"pub-0": 2}))
    copies = {k: [list(c) for c in v] for k, v in raw.copies.items()}
    state["reads"]["T"]["copies"] = copies
    result = check(_history(KEYS), state)
    assert _nonzero(result) == {"duplicated": 1}
    assert any("pub-0 stored 2 times" in n and "4.860 s apart" in n for n in result["notes"])
