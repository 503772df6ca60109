"""The campaign's drawn options and the checks they add (torture/options.py, checker.py):
dead letters and replays accounted per consumer, the Publisher's own stream in
short-window trials, losses the server's settings allow reported as measured limits,
a harness failure reported as a trial's failure, faults landed per option."""

from __future__ import annotations

import copy
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from torture.__main__ import harness_failure, parse, trial_plan
from torture.checker import CLI_HORIZON, CLI_WINDOW, allowed_loss, check, spark_check, violations
from torture.nemesis import STACK_FAULTS, menu_kinds, schedule, stack_menu
from torture.options import SHORT_WINDOW, SPARK_VALUES, VALUES, TrialOptions, draw, failing_key
from torture.report import _held_lines, by_option, durability, summarize

from oncestream.publish import PublisherOptions

KEYS = ["sess-0", "sess-1", "sess-2", "cli-0", "cli-1"]


def _nonzero(result: dict[str, Any]) -> dict[str, int]:
    return {k: v for k, v in violations(result).items() if v}


def test_each_option_value_comes_up_in_every_few_trials() -> None:
    seen: dict[str, Counter[str]] = {name: Counter() for name in {**VALUES, **SPARK_VALUES}}
    for index in range(12):
        drawn = draw(42, index, index).as_dict()
        for name, value in drawn.items():
            if name in seen:
                seen[name][value] += 1
    for name, values in {**VALUES, **SPARK_VALUES}.items():
        assert set(seen[name]) == set(values), (name, seen[name])
    assert draw(42, 5, None) == draw(42, 5, None)  # a trial reruns from its number
    assert draw(42, 5, None).sink_stream is None  # Spark options only in Spark trials


def test_a_failing_share_of_keys_is_a_hash_every_process_agrees_on() -> None:
    keys = [f"pub-{i}" for i in range(20000)]
    share = sum(failing_key(k, 0.005) for k in keys) / len(keys)
    assert 0.003 < share < 0.007
    assert not any(failing_key(k, 0.0) for k in keys)
    assert [failing_key(k, 0.01) for k in keys[:50]] == [failing_key(k, 0.01) for k in keys[:50]]


def test_options_are_pinned_and_a_leaf_trial_keeps_its_dead_letters() -> None:
    args = parse(["--trials", "4", "--seed", "3", "--option", "dead_letters=replay",
                  "--option", "window=short", "--spark-every", "0"])  # fmt: skip
    plans = [trial_plan(args, i) for i in range(4)]
    for plan in plans:
        opts: TrialOptions = plan["options"]
        assert opts.window == "short" and opts.fail_share > 0
        # The hub's sourced stream has no subjects to replay into, nor has a partitioned
        # stream the stored subjects its dead letters name.
        no_replay = plan["kind"] == "leaf" or opts.members == "partitioned"
        assert opts.dead_letters == ("keep" if no_replay else "replay")
    with pytest.raises(SystemExit):
        parse(["--option", "window=long"])


def test_the_stack_faults_cover_every_kind_ten_times_in_100_trials() -> None:
    for kind, count in STACK_FAULTS.items():
        kinds = menu_kinds(stack_menu(kind))
        seen: Counter[str] = Counter()
        for ordinal in range(25):  # 100 trials: 25 of each kind
            faults = schedule(ordinal, kind, 12.0, count, campaign_seed=42, ordinal=ordinal,
                              menu=stack_menu(kind), group=f"stack:{kind}")  # fmt: skip
            seen.update(f.kind for f in faults)
        assert set(seen) == set(kinds), kind
        assert min(seen.values()) >= 10, (kind, seen)


# -- dead letters, replays, the Publisher's own stream ---------------------------------------


def _state(mode: str, failing: list[str], **changes: Any) -> dict[str, Any]:
    ones = dict.fromkeys(KEYS, 1)
    applied = {k: 1 for k in KEYS if mode == "replay" or k not in failing}
    # One dead letter per message and consumer (its msg id names the consumer): the
    # SQLite processor's (lite) and the PostgreSQL pair's (pg); none left once replayed.
    letters: dict[str, dict[str, int]] = {}
    if mode == "keep":
        letters["pg"] = dict.fromkeys(failing, 1)
        letters["lite"] = dict.fromkeys(failing, 1)
    state: dict[str, Any] = {
        "index": 0,
        "seed": 1,
        "kind": "single",
        "sync": "always",
        "inputs": {
            "pub": {"positions": 2, "stream": "TP", "processed": False},
            "sess": {"positions": 3, "stream": "T", "processed": True},
            "cli": {"positions": 2, "stream": "T", "processed": True},
        },
        "processed_stream": "T",
        "streams": {"T": dict(ones), "TP": {"pub-0": 1, "pub-1": 1}},
        "reads": {},
        "effects": {"sqlite": dict(applied), "postgres": dict(applied)},
        "options": {"dead_letters": mode, "fail_share": 0.1},
        "failing": failing,
        "dead_letters": letters,
        "replays": dict.fromkeys(failing, 2) if mode == "replay" else {},  # a copy per letter
        "faults": [],
        "worker_failures": [],
        "unfinished": [],
    }
    state.update(copy.deepcopy(changes))
    return state


def test_dead_letters_kept_once_and_not_applied_are_clean() -> None:
    result = check([], _state("keep", ["sess-1"]))
    assert _nonzero(result) == {}, result["dead_letters"]
    # The Publisher's stream in a short-window trial: stored, checked, not processed.
    assert result["missing_effects"] == {"sqlite": [], "postgres": []}


def test_a_dead_letter_missing_twice_or_applied_is_a_violation() -> None:
    state = _state("keep", ["sess-1", "cli-0"])
    state["dead_letters"] = {
        "pg-p1": {"sess-1": 1, "cli-0": 1},  # a partition's consumer writes PostgreSQL's
        "lite": {"sess-1": 2, "sess-0": 1},
    }
    state["effects"]["postgres"]["cli-0"] = 1  # applied although it failed
    result = check([], state)
    assert result["dead_letters"] == {
        "dlq": [
            "missing:cli-0@sqlite",
            "twice:sess-1@sqlite",
            "unexpected:sess-0@sqlite",
            "applied:cli-0@postgres",
        ]
    }
    assert _nonzero(result) == {"dead_letters": 4}


def test_a_replayed_key_is_replayed_once_and_applied_once() -> None:
    result = check([], _state("replay", ["sess-1"]))
    assert _nonzero(result) == {}
    twice = _state("replay", ["sess-1"], replays={"sess-1": 3})
    assert check([], twice)["replays"] == ["twice:sess-1"]
    reset = [{"kind": "consumer-reset", "resolved": "all"}]
    twice_reset = _state("replay", ["sess-1"], replays={"sess-1": 3}, faults=reset)
    assert check([], twice_reset)["replays"] == ["twice:sess-1"]  # replay adds no copy
    left = _state("replay", ["sess-1"], replays={"sess-1": 1})  # lite's copy only
    left["dead_letters"]["pg"] = {"sess-1": 1}
    result = check([], left)
    assert result["replays"] == ["missing:sess-1"]
    assert result["dead_letters"] == {"dlq": ["not-replayed:sess-1@postgres"]}


def test_a_lost_record_of_the_publishers_own_stream_is_found_there() -> None:
    state = _state("keep", [], streams={"T": dict.fromkeys(KEYS, 1), "TP": {"pub-0": 1}})
    history = [{"mono": 0.0, "process": "pub", "op": "ack", "key": "pub-1"}]
    result = check(history, state)
    assert result["lost"] == ["pub-1"] and result["unstored"] == ["pub-1"]
    assert result["missing_effects"] == {"sqlite": [], "postgres": []}


def _held(gap: float, fault: str = "server-pause", length: float = 4.8, key: str = "cli-1"):  # type: ignore[no-untyped-def]
    """A short-window trial where ``key`` reached the leader twice, ``gap`` s apart, with a
    ``fault`` of ``length`` s running between the copies (finding 25's shape)."""
    first = datetime(2026, 11, 30, 7, 38, 10, tzinfo=UTC)
    second = first + timedelta(seconds=gap)
    copies = {key: [[4879, first.isoformat()], [5110, second.isoformat()]]}
    start = first.timestamp() + 0.1  # paused just after the first copy reached the leader
    fault = {"kind": fault, "resolved": "c2", "wall_start": start, "wall_end": start + length}
    streams = {"T": {**dict.fromkeys(KEYS, 1), key: 2}, "TP": {"pub-0": 1, "pub-1": 1}}
    twice = {k: (2 if k == key else 1) for k in KEYS}
    read = {"copies": copies, "independent_only": True}
    return _state(
        "none", [], options={"window": "short"}, faults=[fault], streams=streams,
        reads={"T": read}, effects={"sqlite": twice, "postgres": dict(twice)},
    )  # fmt: skip


def test_a_cli_resend_held_past_the_short_window_is_the_windows_limit() -> None:
    assert (CLI_WINDOW, CLI_HORIZON) == (SHORT_WINDOW, 3.3)
    horizon = PublisherOptions(stream="T", ack_timeout=1, max_attempts=3).retry_horizon
    assert horizon == pytest.approx(CLI_HORIZON, abs=0.05)  # trial.py's CLI flags
    result = check([], _held(4.86))
    assert _nonzero(result) == {}
    assert list(result["held_resends"]) == ["cli-1"]
    assert "held by server-pause of c2" in result["held_resends"]["cli-1"]
    summary = summarize([result], seed=1)
    assert summary["violations"] == {} and summary["held_resends"][0]["key"] == "cli-1"
    assert any("trial 0 cli-1" in line for line in _held_lines(summary))
    # The same copies are a violation without the evidence: inside the window, too far
    # apart for the horizon and the hold, no holding fault, not the CLI's, a default window.
    not_held = [
        _held(3.5),
        _held(9.5),
        _held(4.86, fault="kill"),
        _held(4.86, key="sess-1"),
    ]
    default = _held(4.86)
    default["options"] = {"window": "default"}
    rerun = _held(4.86)  # a run of the CLI started between the copies: its re-send
    rerun["starts"] = {"cli": [rerun["faults"][0]["wall_end"] - 0.2]}
    for state in [*not_held, default, rerun]:
        assert _nonzero(check([], state)) == {"duplicated": 1, "applied_twice": 2}
    thrice = _held(4.86)  # applied three times: not what a held re-send does
    thrice["effects"]["sqlite"]["cli-1"] = 3
    assert _nonzero(check([], thrice)) == {"applied_twice": 1}


def test_spark_outputs_hold_a_replayed_key_twice() -> None:
    spark = {"stream": {"a": 1, "b": 2}, "db": {"a": 1, "b": 1}}
    missing, duplicated = spark_check(spark, {"a", "b"}, {"b": 1})
    assert duplicated == {"stream": [], "db": []}
    assert missing == {"stream": [], "db": ["b"]}


# -- measured limits, harness failures, per-option counts -------------------------------------


def test_losses_the_settings_allow_are_a_measured_limit_not_a_violation() -> None:
    crash = [{"kind": "power-loss", "resolved": "all"}]
    stored = {"T": {k: 1 for k in KEYS if k != "sess-0"}, "TP": {"pub-0": 1, "pub-1": 1}}
    lost = _state("none", [], sync="default", kind="cluster", faults=crash, streams=stored)
    assert allowed_loss(lost) == "sync_interval default (2 min) and power-loss"
    history = [{"mono": 0.0, "process": "sess", "op": "ack", "key": "sess-0"}]
    limited = check(history, lost)
    assert limited["lost"] == ["sess-0"] and limited["limit"]
    always = dict(lost, sync="always", kind="cluster-sync")
    assert allowed_loss(always) is None  # with always the same loss counts
    counted = check(history, always)
    summary = summarize([limited, counted], seed=1)
    assert summary["violations"] == {"lost": 1, "unstored": 1}  # the always trial only
    assert summary["measured_limits"]["totals"] == {"lost": 1, "unstored": 1}
    rows = durability([limited, counted])
    assert rows["R3, sync default"]["crash_lost"] == 1
    assert rows["R3, sync always"]["lost"] == 1


def test_a_crash_that_lost_nothing_leaves_every_violation_counted() -> None:
    """The default sync and a landed power loss make a trial the setting's measured limit
    only when acknowledged writes were lost: otherwise an effect applied twice counts."""
    crash = [{"kind": "power-loss", "resolved": "all"}]
    state = _state("none", [], sync="default", kind="cluster", faults=crash)
    state["effects"]["sqlite"]["sess-1"] = 2
    result = check([{"mono": 0.0, "process": "sess", "op": "ack", "key": "sess-1"}], state)
    assert result["lost"] == [] and result["limit"] is None
    summary = summarize([result], seed=1)
    assert summary["violations"] == {"applied_twice": 1}
    assert summary["measured_limits"]["trials"] == []
    # A stream every server calls "not found" after the crash is gone: the limit again.
    error = "STREAM.INFO T: {'err_code': 10059, 'description': 'stream not found'}"
    gone = {"waited_s": 60.0, "errors": [error, error], "meta_leader": {}, "project_reader": ""}
    state["reads"] = {"T": {"unreadable": gone}}
    assert check([], state)["limit"] == "sync_interval default (2 min) and power-loss"
    refused = "nats://10.77.1.4:4222: ConnectionRefusedError: [Errno 111] Connect call failed"
    state["reads"]["T"]["unreadable"]["errors"] = [error, refused]
    assert check([], state)["limit"] == "sync_interval default (2 min) and power-loss"
    state["reads"]["T"]["unreadable"]["errors"] = [error, "timeout"]
    assert check([], state)["limit"] is None


def test_a_stream_that_went_back_is_the_settings_limit_even_when_unreadable() -> None:
    """Seed 62, trial 4: after an OS crash with the default sync a leader without the
    last acknowledged writes took over (new records were acknowledged at their
    sequences), then the stream stayed leaderless, so nothing showed as ``lost``."""
    crash = [{"kind": "os-crash", "resolved": "c1"}]
    state = _state("none", [], sync="default", kind="cluster", faults=crash)
    state["effects"]["sqlite"].pop("sess-2")  # what the stall left unapplied
    history = [
        {"mono": 0.0, "process": "sess", "op": "ack", "key": "sess-0", "seq": 1},
        {"mono": 0.1, "process": "sess", "op": "ack", "key": "sess-1", "seq": 2},
        {"mono": 0.2, "process": "sess", "op": "ack", "key": "sess-1", "seq": 2},  # a dup
        {"mono": 0.3, "process": "cli", "op": "ack", "key": "cli-0", "seq": 3},
        {"mono": 0.4, "process": "pub", "op": "ack", "key": "pub-0", "seq": 3},  # stream TP
        {"mono": 0.5, "process": "pub", "op": "ack", "key": "pub-1", "seq": 0},  # batch
        {"mono": 0.6, "process": "pub", "op": "ack", "key": "pub-0", "seq": 0},
        {"mono": 9.0, "process": "sess", "op": "ack", "key": "sess-2", "seq": 2},  # went back
    ]
    result = check(history, state)
    assert result["rewound"] == {"T": [2]}
    assert result["limit"] == "sync_interval default (2 min) and os-crash"
    assert result["lost"] == []
    assert summarize([result], seed=1)["violations"] == {}
    # With sync always nothing excuses it: the effect it left missing counts.
    always = check(history, dict(state, sync="always", kind="cluster-sync"))
    assert always["rewound"] == {"T": [2]} and always["limit"] is None
    assert violations(always)["missing_effects"] == 1
    assert check(history[:-1], state)["rewound"] == {}


def test_a_harness_crash_is_a_reported_trial_failure(tmp_path: Any) -> None:
    args = parse(["--trials", "1", "--spark-every", "0", "--out", str(tmp_path)])
    plan = trial_plan(args, 0)
    (tmp_path / "trial-000-single").mkdir()
    (tmp_path / "trial-000-single" / "pub.log").write_text("line one\nlast line\n")
    result = harness_failure(plan, tmp_path, RuntimeError("boom"))
    assert _nonzero(result) == {"harness_failures": 1}
    failure = result["harness_failures"][0]
    assert "RuntimeError: boom" in failure["error"]
    assert failure["logs"]["pub.log"] == ["line one", "last line"]
    summary = summarize([result], seed=1)
    assert summary["violations"] == {"harness_failures": 1}
    assert summary["harness_failures"][0]["trial"] == 0


def test_faults_landed_are_counted_per_option() -> None:
    results = [
        {**check([], _state("keep", [])), "faults": [{"kind": "pg-kill"}, {"kind": "kill"}]},
        {**check([], _state("none", [])), "faults": [{"kind": "pg-kill"}]},
    ]
    rows = by_option(results)
    assert rows["dead_letters=keep"] == {"trials": 1, "faults": 2, "violations": 0,
                                         "by_kind": {"kill": 1, "pg-kill": 1}}  # fmt: skip
    assert rows["dead_letters=none"]["by_kind"] == {"pg-kill": 1}


# -- the storage faults' file surgery ---------------------------------------------------------


def test_bit_flips_and_truncation_change_the_file(tmp_path: Any) -> None:
    import random
    from pathlib import Path

    from torture.storefaults import flip_bits, stream_files, truncate

    msgs = Path(tmp_path) / "jetstream" / "$G" / "streams" / "T" / "msgs"
    msgs.mkdir(parents=True)
    for name in ("1.blk", "2.blk", "index.db"):
        (msgs / name).write_bytes(bytes(range(256)) * 16)
    files = stream_files(Path(tmp_path), "T")
    assert [f.name for f in files] == ["1.blk", "2.blk"]
    before = files[0].read_bytes()
    offsets = flip_bits(files[0], random.Random(1), flips=2)
    after = files[0].read_bytes()
    assert len(after) == len(before) and len(offsets) == 2
    changed = [i for i in range(len(before)) if before[i] != after[i]]
    assert changed and set(changed) <= set(offsets)
    assert all(bin(before[i] ^ after[i]).count("1") == 1 for i in changed)
    size, keep = truncate(files[1], random.Random(2))
    assert size == 4096 and keep < size and files[1].stat().st_size == keep


def test_a_folder_the_server_removes_during_the_walk_is_skipped(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store is walked while its server runs: a raft group's folder that vanishes
    between being listed and being read is passed over (trial 97 of the 55b19a7 campaign:
    ``Path.glob`` raised FileNotFoundError, a harness failure)."""
    import os
    from pathlib import Path

    from torture.storefaults import stream_files

    msgs = Path(tmp_path) / "jetstream" / "$G" / "streams" / "T" / "msgs"
    msgs.mkdir(parents=True)
    (msgs / "1.blk").write_bytes(b"x")
    gone = Path(tmp_path) / "jetstream" / "$SYS" / "_js_" / "S-R3F-x" / "__msgs__"
    gone.mkdir(parents=True)
    scandir = os.scandir

    def vanishing(path: Any = ".") -> Any:
        if str(path).endswith("__msgs__"):
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", vanishing)
    assert [f.name for f in stream_files(Path(tmp_path), "T")] == ["1.blk"]


async def test_a_stream_every_server_says_is_not_found_is_gone_only_after_a_crash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torture.rawread as rawread

    async def not_found(url: str, stream: str, domain: Any) -> Any:
        raise RuntimeError(
            f"STREAM.INFO {stream}: {{'code': 404, 'err_code': 10059, 'description': 'x'}}"
        )

    monkeypatch.setattr(rawread, "_read", not_found)
    monkeypatch.setattr(rawread, "ROUND_PAUSE", 0.01)
    servers = ["nats://a:4222", "nats://b:4222"]
    read = await rawread.read_raw(servers, "T", wait=5.0, gone_after=0.1)
    assert read.gone and read.messages == 0 and not read.keys
    with pytest.raises(rawread.Unreadable):  # without a crash: unreadable, never "gone"
        await rawread.read_raw(servers, "T", wait=0.2)


def test_a_stream_is_gone_when_the_servers_not_recovering_say_not_found() -> None:
    """``_not_found``: "not found" from every server that could answer makes the stream
    gone; a server refusing the connection or still without JetStream (10008) does not
    count either way, and nothing but those answers is never "gone"."""
    from torture.checker import _not_found

    missing = "nats://a:4222: RuntimeError: STREAM.INFO T: {'code': 404, 'err_code': 10059}"
    recovering = "nats://b:4222: RuntimeError: seq 1: {'code': 503, 'err_code': 10008}"
    refused = "nats://c:4222: ConnectionRefusedError: [Errno 111] Connect call failed"
    timeout = "nats://b:4222: TimeoutError: STREAM.INFO T"

    def read(*errors: str) -> dict[str, Any]:
        return {"unreadable": {"errors": list(errors)}}

    assert _not_found(read(missing, recovering, missing, refused))
    assert _not_found(read(missing, refused))
    assert not _not_found(read(recovering, refused))
    assert not _not_found(read(missing, timeout))
    assert not _not_found(read())
