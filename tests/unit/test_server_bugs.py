"""The known-bug table of nats-server releases and the start-up check that reads it.

The rows' facts (the releases that have each bug, the fixes) come from nats-server's
history (see src/oncestream/streams/_server_bugs.py); these tests pin them, the scope
rules, and what the start-up check does for a faked server version (the suite runs
one nats-server release; older ones are not started here).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from oncestream import ConfigError
from oncestream.publish._batch import batch_frames
from oncestream.streams import _version as version_module
from oncestream.streams import require_server
from oncestream.streams._internal import SERVER_BUGS, check_server_bugs, format_version, known_bugs

BUG = {bug.key: bug for bug in SERVER_BUGS}


def fake_conn(version: str, *, cluster: str | None = None) -> Any:
    """A connection whose server announced ``version`` (and ``cluster``) in its INFO."""
    major, minor, patch = (int(p) for p in version.split("."))
    info = {"version": version, **({"cluster": cluster} if cluster else {})}
    nc = SimpleNamespace(
        connected_server_version=SimpleNamespace(major=major, minor=minor, patch=patch),
        _server_info=info,
    )
    return SimpleNamespace(nc=nc)


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(version_module, "_warned", set())


@pytest.mark.parametrize(
    ("key", "affected", "clean"),
    [
        (
            "dedupe-leader-change",
            ["2.11.0", "2.11.17", "2.12.0", "2.12.8", "2.14.0"],
            ["2.10.25", "2.12.9", "2.12.15", "2.14.1", "2.14.5", "2.15.1"],
        ),
        ("atomic-eob-max-size", ["2.14.0", "2.14.2"], ["2.12.15", "2.14.3", "2.15.1"]),
        (
            "idempotent-create-created",
            ["2.12.14", "2.14.4"],
            ["2.12.13", "2.12.15", "2.14.3", "2.14.5", "2.15.1"],
        ),
        ("sync-blocks-pending-writes", ["2.12.0", "2.12.2"], ["2.11.12", "2.12.3", "2.14.0"]),
        (
            "rejected-consumer-create-deletes-state",
            ["2.10.0", "2.11.9", "2.12.0", "2.12.15", "2.14.0", "2.14.5"],
            ["2.9.25", "2.15.0", "2.15.1"],
        ),
    ],
)
def test_which_releases_have_each_bug(key: str, affected: list[str], clean: list[str]) -> None:
    bug = BUG[key]
    for version in affected:
        assert bug.affects(tuple(int(p) for p in version.split("."))), version
    for version in clean:
        assert not bug.affects(tuple(int(p) for p in version.split("."))), version
    for fixed in bug.fixed:  # a fix release is never in an affected range
        assert not bug.affects(fixed)


def test_every_row_names_its_upstream_fix_and_what_it_touches() -> None:
    assert len(BUG) == len(SERVER_BUGS)
    for bug in SERVER_BUGS:
        assert bug.reference.startswith("https://github.com/nats-io/nats-server/pull/")
        assert bug.breaks and bug.touches
        assert all(first <= last for first, last in bug.affected)
        assert (bug.severity == "none") == (bug.uses == ())


def test_the_fix_names_each_release_line() -> None:
    assert BUG["idempotent-create-created"].fix == ("nats-server 2.14.5 or newer (2.12.15 on 2.12)")
    assert BUG["atomic-eob-max-size"].fix == "nats-server 2.14.3 or newer"
    assert format_version((2, 12, 9)) == "2.12.9"


def test_scope_clustered_and_replicated() -> None:
    keys = lambda **kw: [b.key for b in known_bugs((2, 14, 0), **kw)]  # noqa: E731
    # Unknown deployment: what may apply (doctor) vs what does (start-up checks).
    rejected = "rejected-consumer-create-deletes-state"
    assert keys() == ["dedupe-leader-change", "atomic-eob-max-size", rejected]
    assert keys(assume=False) == ["atomic-eob-max-size", rejected]
    assert keys(cluster=True, replicas=1) == ["atomic-eob-max-size", rejected]
    assert keys(cluster=False, replicas=3) == [
        "dedupe-leader-change",
        "atomic-eob-max-size",
        rejected,
    ]
    created = lambda **kw: [b.key for b in known_bugs((2, 12, 14), **kw)]  # noqa: E731
    assert created(cluster=False) == [rejected]
    assert created(cluster=True, replicas=1) == ["idempotent-create-created", rejected]
    assert created(cluster=None, replicas=3, assume=False) == [
        "idempotent-create-created",
        rejected,
    ]
    assert known_bugs((2, 15, 1)) == []


def test_start_up_warns_once_per_process_and_bug(caplog: pytest.LogCaptureFixture) -> None:
    conn = fake_conn("2.14.0", cluster="east")
    with caplog.at_level(logging.WARNING, logger="oncestream.streams"):
        found = check_server_bugs(conn, "publish", replicas=3)
        again = check_server_bugs(conn, "publish", replicas=3)
    assert [b.key for b in found] == [b.key for b in again] == ["dedupe-leader-change"]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1
    assert "nats-server 2.14.0 has a known bug (dedupe-leader-change" in warnings[0]
    assert "pull/8106" in warnings[0] and "Fixed in nats-server 2.14.1 or newer" in warnings[0]
    assert "oncestream doctor" in warnings[0]


def test_start_up_says_nothing_outside_a_bugs_scope(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="oncestream.streams"):
        assert check_server_bugs(fake_conn("2.14.0"), "publish", replicas=1) == []
        assert check_server_bugs(fake_conn("2.14.0"), "publish") == []  # no stream: unknown
        assert check_server_bugs(fake_conn("2.14.4"), "create", replicas=1) == []  # no cluster
        assert check_server_bugs(fake_conn("2.14.2", cluster="c"), "publish", replicas=3) == []
        assert check_server_bugs(fake_conn("2.15.1", cluster="c"), "create", replicas=3) == []
    assert caplog.records == []


def test_the_create_row_is_reported_to_creates_and_publishers_in_a_cluster() -> None:
    conn = fake_conn("2.12.14", cluster="c")
    for use in ("create", "publish"):
        assert [b.key for b in check_server_bugs(conn, use, replicas=1)] == [
            "idempotent-create-created"
        ]
    assert check_server_bugs(conn, "read", replicas=1) == []


def test_a_refuse_row_stops_the_start() -> None:
    table = (replace(BUG["dedupe-leader-change"], at_start="refuse"),)
    with pytest.raises(ConfigError, match=r"2\.12\.3 has a known bug \(dedupe-leader-change"):
        check_server_bugs(fake_conn("2.12.3", cluster="c"), "publish", replicas=3, table=table)


def test_a_server_without_a_version_is_not_judged() -> None:
    conn = fake_conn("0.0.0")
    assert check_server_bugs(conn, "create", replicas=3) == []


def test_require_server_by_minor_or_patch_level() -> None:
    conn = fake_conn("2.14.2")
    require_server(conn, (2, 14), "x")
    require_server(conn, (2, 14, 2), "x")
    with pytest.raises(ConfigError, match=r"x needs nats-server 2\.14\.3 or newer; .* 2\.14\.2"):
        require_server(conn, (2, 14, 3), "x")
    with pytest.raises(ConfigError, match=r"needs nats-server 2\.15 or newer"):
        require_server(conn, (2, 15), "x")


def test_oncestreams_atomic_batches_commit_on_their_last_message_not_an_eob_marker() -> None:
    """Why the eob row touches nothing of oncestream (checked on 2.14.2 by hand: a chunk
    of 1000 with AtomicPublisher stored 1000; 1000 + an eob marker: 10199 too large)."""
    ids = [f"id-{i}" for i in range(1000)]
    frames = batch_frames(
        "b1",
        [b"out.x"] * 1000,
        [b"d"] * 1000,
        ids,
        None,
        b"_INBOX.r",
        expect={"Nats-Expected-Stream": "OUT"},
    )
    messages = frames.split(b"HPUB ")[1:]
    assert len(messages) == 1000  # the batch is exactly max_batch_size, no extra marker
    assert b"eob" not in frames.lower()
    assert b"Nats-Batch-Commit: 1" in messages[-1]
    assert all(b"Nats-Batch-Commit" not in m for m in messages[:-1])


def test_the_production_page_shows_every_row_of_the_table() -> None:
    """docs/production.md's table: each row's releases, fixes and upstream link, no other row."""
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "production.md").read_text()
    section = page.split("## nats-server releases with known exactly-once bugs", 1)[1]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "](" in line]
    assert len(rows) == len(SERVER_BUGS)
    for bug in SERVER_BUGS:
        (row,) = [r for r in rows if f"]({bug.reference})" in r]
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        releases, fixed = cells[0], cells[3]
        for first, last in bug.affected:
            shown = format_version(first) + ("" if first == last else f" - {format_version(last)}")
            assert shown in releases, (bug.key, releases)
        assert fixed == ", ".join(format_version(v) for v in sorted(bug.fixed)), bug.key
        assert ("nothing" in cells[2]) == (bug.severity == "none"), bug.key
