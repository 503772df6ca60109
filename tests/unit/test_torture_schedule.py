"""The fault campaign's scheduler (torture/nemesis.py): coverage by construction, reruns,
faults at start-up, during the run and during the drain."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

from torture.__main__ import ordinal
from torture.faults import holds, resolve
from torture.nemesis import CONSUMER_RESET, PRODUCERS, fault_menu, max_wait, menu_kinds, schedule
from torture.netns import class_packets, drop_bytecode
from torture.spark import describe_mode, spark_mode
from torture.topology import KINDS
from torture.trial import _held_back

ROOT = Path(__file__).resolve().parents[2]


def test_every_kind_of_every_menu_at_least_10_times_in_100_trials() -> None:
    for kind_index, kind in enumerate(KINDS):
        counts: Counter[str] = Counter()
        for i in range(kind_index, 100, len(KINDS)):
            faults = schedule(21000 + i, kind, 12.0, 5, campaign_seed=21, ordinal=ordinal(KINDS, i))
            counts.update(f.kind for f in faults)
        kinds = menu_kinds(fault_menu(kind))
        assert set(counts) == set(kinds)
        assert min(counts.values()) >= 10, (kind, counts)


def test_a_trial_reruns_from_its_seed_and_index_alone() -> None:
    a = schedule(7003, "cluster", 12.0, 5, campaign_seed=7, ordinal=0)
    b = schedule(7003, "cluster", 12.0, 5, campaign_seed=7, ordinal=0)
    assert a == b
    assert a != schedule(7004, "cluster", 12.0, 5, campaign_seed=7, ordinal=0)
    assert [f.phase for f in a] == ["start-up", "run", "run", "run", "drain"]
    for fault in a:
        assert fault.start + fault.duration <= 12.0 + 6.0 + 1e-6


def test_faults_start_at_start_up_during_the_run_and_in_the_drain() -> None:
    for seed in range(200):
        for kind in KINDS:
            faults = schedule(seed, kind, 12.0, 5, campaign_seed=seed % 7, ordinal=seed % 5)
            starts: dict[str, list[float]] = {"start-up": [], "run": [], "drain": []}
            for f in faults:
                starts[f.phase].append(f.start)
            assert all(0.2 <= s <= 1.5 for s in starts["start-up"])
            assert all(1.5 <= s <= 10.5 for s in starts["run"])
            assert all(12.0 <= s <= 13.5 for s in starts["drain"])
            # a drain fault never targets a producer: it may have finished its input
            assert all(f.target not in PRODUCERS for f in faults if f.phase == "drain")
    assert [f.phase for f in schedule(1, "single", 8.0, 3)] == ["start-up", "run", "drain"]
    assert [f.phase for f in schedule(1, "single", 8.0, 1)] == ["run"]


def test_leaf_trials_kill_and_cut_the_hub_too() -> None:
    menu = fault_menu("leaf")
    for kind in ("server-kill", "server-pause", "partition", "degrade"):
        assert (kind, "hub") in menu and (kind, "leaf") in menu


def test_schedule_command_prints_the_same_schedule_twice(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "torture", "--schedule", "--trials", "8", "--seed", "23",
            "--spark-every", "4", "--sabotage", "skip-position"]  # fmt: skip
    first = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)
    again = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    assert first.stdout == again.stdout
    rows = [json.loads(line) for line in first.stdout.splitlines()]
    assert [r["index"] for r in rows[:-1]] == list(range(8)) and "schedule_sha256" in rows[-1]
    assert sum(r["spark"] for r in rows[:-1]) == 2
    # the sabotage's forced kill of the session (a resume to skip a position in)
    assert all(
        {"kind": "kill", "target": "sess", "phase": "sabotage"}.items() <= f.items()
        for r in rows[:-1]
        for f in r["faults"]
        if f["phase"] == "sabotage"
    )
    other = subprocess.run([*argv[:6], "24", *argv[7:]], cwd=ROOT, capture_output=True,
                           text=True, timeout=60)  # fmt: skip
    assert other.stdout != first.stdout


def test_ordinal_counts_trials_of_the_same_kind() -> None:
    kinds = ("single", "cluster", "cluster")
    assert [ordinal(kinds, i) for i in range(6)] == [0, 0, 1, 1, 2, 3]


def test_roles_and_what_a_fault_holds() -> None:
    assert resolve("leader|follower", "c2", set(), "partition-pair", 0) == "c2|c1"
    busy = holds("partition-pair", "c2|c1")
    assert resolve("leader|follower", "c2", busy, "partition-pair", 0) == "c2|c3"
    assert resolve("follower", None, set(), "server-kill", 0) is None
    assert resolve("leaf|hub", None, set(), "partition-pair", 0) == "leaf|hub"
    assert holds("cluster-kill", "all") == {"srv:c1", "srv:c2", "srv:c3", "srv:c4"}
    assert holds("partition-pair", "c1|c3") == holds("partition-pair", "c3|c1")
    # a degrade waits for (and blocks) a cut of the links it shapes: its effect needs traffic
    assert holds("degrade", "c1") & holds("partition", "c1")
    assert holds("degrade-pair", "c1|c3") & holds("partition-pair", "c3|c1")
    assert holds("degrade-pair", "c1|c3") & holds("partition", "c3")
    assert not holds("degrade", "c1") & holds("partition-pair", "c1|c2")


def test_shaped_packets_are_read_from_tc_class_statistics() -> None:
    shown = (
        "class htb 1:1 root prio 0 rate 10Gbit ceil 10Gbit burst 0b cburst 0b \n"
        " Sent 123 bytes 4 pkt (dropped 0, overlimits 0 requeues 0) \n"
        "class htb 1:60 root leaf 8001: prio 0 rate 2048Kbit ceil 2048Kbit \n"
        " Sent 5000 bytes 17 pkt (dropped 0, overlimits 0 requeues 0) \n"
    )
    assert class_packets(shown, "1:60") == 17
    assert class_packets(shown, "1:1") == 4
    assert class_packets(shown, "1:61") == 0


def test_drop_bytecode_is_classic_bpf_for_tc() -> None:
    # ldh [12]; jeq IPv4; ld [30]; jeq 10.99.0.2; ld rand; jgt 50%; ret -1; ret 0
    assert drop_bytecode("10.99.0.2", 50.0) == (
        "8,40 0 0 12,21 0 5 2048,32 0 0 30,21 0 3 174260226,32 0 0 4294963256,"
        "37 1 0 2147483648,6 0 0 4294967295,6 0 0 0"
    )
    assert drop_bytecode(None, 100.0) == "4,40 0 0 12,21 0 1 2048,6 0 0 4294967295,6 0 0 0"


def test_coverage_warnings_name_kinds_below_10_in_100_trials() -> None:
    from torture.report import coverage_warnings

    def result(kind: str, faults: list[str], spark: bool = False) -> dict[str, object]:
        return {"kind": kind, "faults": [{"kind": f} for f in faults], "spark": spark}

    full = fault_menu("single")
    rows = [result("single", [k for k, _ in full][:14]) for _ in range(99)]
    rows.append(result("single", [], spark=True))
    warnings = coverage_warnings(rows)
    assert "fault kind disk-full landed 0 times (< 10)" in warnings
    assert "fault kind spark-kill landed 0 times (< 10)" in warnings
    assert "single trials: disk-full landed 0 times (< 10)" in warnings
    assert not [w for w in warnings if " kill " in w or " pause " in w], warnings
    assert coverage_warnings(rows[:50]) == []  # fewer than 100 trials: no verdict
    assert coverage_warnings(rows, ("kill", "pause")) == []  # restricted campaign


def test_a_consumer_reset_is_in_every_menu_and_scheduled_in_100_trials() -> None:
    argv = [sys.executable, "-m", "torture", "--schedule", "--trials", "100", "--seed", "7",
            "--spark-every", "10"]  # fmt: skip
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()[:-1]]
    for kind in KINDS:
        assert {t for k, t in fault_menu(kind) if k == CONSUMER_RESET} == {"lite", "pg"}
        resets = [f for r in rows if r["kind"] == kind for f in r["faults"]]
        assert sum(f["kind"] == CONSUMER_RESET for f in resets) >= 10, kind
    # it holds the consumer, not the processes: a kill of a processor may overlap it
    assert holds(CONSUMER_RESET, "lite") == {"consumer:lite"}
    # the Spark trials print their driver and sink choices, every combination twice
    modes = Counter(
        (r["spark_mode"]["connect"], r["spark_mode"]["ingest"]) for r in rows if r["spark"]
    )
    assert set(modes) == {(c, i) for c in (False, True) for i in ("auto", "atomic")}
    assert min(modes.values()) >= 2, modes
    assert all(r["spark_mode"]["headers"] == (r["kind"] == "leaf") for r in rows if r["spark"])
    # the hub stream's headers go through the sink under both drivers
    leaf = {r["spark_mode"]["connect"] for r in rows if r["spark"] and r["kind"] == "leaf"}
    assert leaf == {False, True}, leaf


def test_spark_choices_follow_the_spark_trials_ordinal() -> None:
    seen = [spark_mode(i, 10, False) for i in range(0, 100, 11)]
    assert [m["connect"] for m in seen] == [False, True, False, True, True, False, True, False,
                                            False, True]  # fmt: skip
    assert [m["ingest"] for m in seen[:4]] == ["auto", "auto", "atomic", "atomic"]
    assert describe_mode(spark_mode(3, 1, True)) == "connect/atomic/headers"


def test_a_due_membership_change_or_fault_of_every_node_holds_back_server_faults() -> None:
    """A due membership change needs a quorum, a due fault of every node needs every
    server free: faults that would take them wait (and start their own wait again once
    released), others go ahead; the reserving faults do not hold each other back."""

    def why(kind: str, target: str, *, membership: bool = False, whole: bool = False) -> str | None:
        return _held_back(kind, holds(kind, target), membership, whole)

    assert why("server-kill", "c1", membership=True) == "a membership change is due"
    assert why("partition", "c2", membership=True) == "a membership change is due"
    assert why("degrade", "c2", membership=True) is None  # a quorum survives it
    for kind in ("server-pause", "bitflip", "truncate", "os-crash", "disk-full"):
        assert why(kind, "c3", whole=True) == "a fault of every node is due"
    for kind in ("partition", "degrade", "partition-pair", "pg-kill", "kill"):
        assert why(kind, "c1|c2" if kind.endswith("-pair") else "c1", whole=True) is None
    for kind in ("cluster-kill", "power-loss"):  # it would leave the change no quorum
        assert why(kind, "all", membership=True) == "a membership change is due"
        assert why(kind, "all", whole=True) is None
    assert why("membership", "c1", membership=True, whole=True) is None
    assert why("server-kill", "c1") is None
    # The reserving faults wait long enough for the faults active when they fall due.
    assert min(max_wait(k) for k in ("membership", "cluster-kill", "power-loss")) >= 20
