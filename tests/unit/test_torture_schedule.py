"""The fault campaign's scheduler (torture/nemesis.py): coverage by construction, reruns."""

from __future__ import annotations

from collections import Counter

from torture.__main__ import ordinal
from torture.faults import holds, resolve
from torture.nemesis import fault_menu, menu_kinds, schedule
from torture.netns import drop_bytecode
from torture.topology import KINDS


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
    for fault in a:
        assert 2.0 <= fault.start <= 7.0
        assert fault.start + fault.duration <= max(12.0, fault.start + 2.0) + 1e-6


def test_ordinal_counts_trials_of_the_same_kind() -> None:
    kinds = ("single", "cluster", "cluster")
    assert [ordinal(kinds, i) for i in range(6)] == [0, 0, 1, 1, 2, 3]


def test_roles_and_what_a_fault_holds() -> None:
    assert resolve("leader|follower", "c2", set(), "partition-pair", 0) == "c2|c1"
    busy = holds("partition-pair", "c2|c1")
    assert resolve("leader|follower", "c2", busy, "partition-pair", 0) == "c2|c3"
    assert resolve("follower", None, set(), "server-kill", 0) is None
    assert resolve("leaf|hub", None, set(), "partition-pair", 0) == "leaf|hub"
    assert holds("cluster-kill", "all") == {"srv:c1", "srv:c2", "srv:c3"}
    assert holds("partition-pair", "c1|c3") == holds("partition-pair", "c3|c1")


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
    assert "fault kind disk-full injected 0 times (< 10)" in warnings
    assert "fault kind spark-kill injected 0 times (< 10)" in warnings
    assert "single trials: disk-full injected 0 times (< 10)" in warnings
    assert not [w for w in warnings if " kill " in w or " pause " in w], warnings
    assert coverage_warnings(rows[:50]) == []  # fewer than 100 trials: no verdict
    assert coverage_warnings(rows, ("kill", "pause")) == []  # restricted campaign
