"""`oncestream doctor` against a real nats-server, and the start-up checks of the known-bug table.

The findings, their fixes (run here, after which doctor passes) and the exit codes:
0 healthy (warnings allowed), 1 a finding breaks a guarantee, 2 bad usage (the
bad-input rows are in tests/integration/test_bad_input.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import free_port
from oncestream import ConfigError, Connection, ConnectOptions, connect
from oncestream.publish import Publisher, PublisherOptions
from oncestream.server import Cluster, NatsServer
from oncestream.streams import StreamSpec, add_stream, ensure_stream
from oncestream.streams import _version as version_module
from tests import server_configs
from tests.integration._cli import cli, with_conn


def _stream(url: str, name: str, **spec: Any) -> None:
    async def make(conn: Connection) -> None:
        await ensure_stream(conn, StreamSpec(name=name, subjects=(f"{name.lower()}.>",), **spec))

    with_conn(url, make)


def _doctor(url: str, *args: str) -> tuple[int, dict[str, Any]]:
    result = cli(url, "doctor", *args, "--json")
    return result.exit_code, json.loads(result.stdout)


def _checks(report: dict[str, Any], target: str) -> dict[str, str]:
    return {f["check"]: f["severity"] for f in report["findings"] if f["target"] == target}


def test_a_window_shorter_than_the_retry_horizon_breaks_and_its_fix_heals_it(
    nats_server: NatsServer,
) -> None:
    url = nats_server.url
    # A stream from before fast-ingest was the default (allow_batched off).
    _stream(url, "DR_SHORT", duplicate_window=10.0, allow_batched=False)
    shown = cli(url, "doctor", "DR_SHORT")
    assert shown.exit_code == 1, shown.output
    out = " ".join(shown.stdout.split())
    assert (
        "BREAKS stream DR_SHORT: duplicate window 10s is shorter than the Publisher's retry "
        "horizon 27.3s" in out
    )
    assert "fix: oncestream stream edit DR_SHORT --dupe-window 2m" in out
    assert "fix: oncestream stream edit DR_SHORT --allow-batched" in out  # a note
    assert out.endswith("1 finding breaks an exactly-once guarantee, 0 warnings, 2 notes, 1 ok"), (
        out
    )
    # What doctor calls broken, the Publisher refuses.
    with pytest.raises(ConfigError, match="shorter than the retry horizon"):
        with_conn(url, lambda conn: Publisher(conn, PublisherOptions(stream="DR_SHORT")).start())

    fixed = cli(url, "stream", "edit", "DR_SHORT", "--dupe-window", "2m")
    assert fixed.exit_code == 0, fixed.output
    code, report = _doctor(url, "DR_SHORT")
    assert code == 0 and report["healthy"] is True
    assert _checks(report, "stream DR_SHORT")["duplicate-window"] == "ok"
    assert _checks(report, "stream DR_SHORT")["fast-ingest"] == "note"
    # The one-line edit doctor prints for fast-ingest, run as printed (issue 40).
    batched = cli(url, "stream", "edit", "DR_SHORT", "--allow-batched")
    assert batched.exit_code == 0, batched.output
    assert _checks(_doctor(url, "DR_SHORT")[1], "stream DR_SHORT")["fast-ingest"] == "ok"


def test_a_healthy_setup_passes(server_factory: Any, tmp_path: Path) -> None:
    http = free_port()
    server = server_factory(
        server_configs.monitored(tmp_path / "mon", http_port=http, sync_interval="always")
    )
    url = server.url
    _stream(url, "DR_OK", allow_batched=True)
    assert cli(url, "consumer", "add", "DR_OK", "billing").exit_code == 0
    _stream(url, "ONCESTREAM_DR_BOOK", duplicate_window=1.0)  # bookkeeping: left out by default

    code, report = _doctor(url, "--monitor", f"http://127.0.0.1:{http}")
    assert code == 0, report
    monitor = f"http://127.0.0.1:{http}"
    assert report["server"] == {
        "version": report["server"]["version"],
        "cluster": None,
        "sync_always": True,
        "sync_interval": report["server"]["sync_interval"],
        "monitored": [
            {
                "url": monitor,
                "server": "monitored",
                "cluster": None,
                "sync_always": True,
                "sync_interval": report["server"]["sync_interval"],
            }
        ],
    }
    assert report["summary"] == {"breaks": 0, "warning": 0, "note": 0, "ok": 5}, report
    assert {f["target"] for f in report["findings"]} == {
        "server",
        "stream DR_OK",
        "consumer DR_OK/billing",
    }
    assert _checks(report, "stream DR_OK") == {
        "duplicate-window": "ok",
        "sync-interval": "ok",
        "fast-ingest": "ok",
    }
    assert cli(url, "doctor", "--all").exit_code == 1  # the 1s bookkeeping window breaks


def test_the_default_fsync_policy_is_a_warning_not_a_failure(
    server_factory: Any, tmp_path: Path
) -> None:
    http = free_port()
    server = server_factory(server_configs.monitored(tmp_path / "mon", http_port=http))
    _stream(server.url, "DR_LAZY")
    code, report = _doctor(server.url, "DR_LAZY", "--monitor", f"http://127.0.0.1:{http}")
    assert code == 0
    assert report["server"]["sync_always"] is False and report["server"]["sync_interval"] == 120
    assert _checks(report, "stream DR_LAZY")["sync-interval"] == "warning"


@pytest.fixture
def mixed_cluster(tmp_path: Path) -> Iterator[Cluster]:
    """3 nodes on the default fsync policy but the first (`sync_interval: always`)."""
    with server_configs.mixed_sync_cluster(tmp_path / "cluster") as cluster:
        yield cluster


def _sync_finding(report: dict[str, Any], stream: str) -> dict[str, str]:
    found = [
        f
        for f in report["findings"]
        if f["target"] == f"stream {stream}" and f["check"] == "sync-interval"
    ]
    assert len(found) == 1, report
    return found[0]


def test_an_r3_stream_is_judged_by_the_policy_of_each_server_holding_it(
    mixed_cluster: Cluster, server_factory: Any, tmp_path: Path
) -> None:
    """In a real 3-node cluster: the R3 warning with the default policy; one node's
    `always` does not speak for its replicas (a note, exit 0, never an ok); a monitor of
    a server outside the cluster is refused (exit 2)."""
    always, *lazy = mixed_cluster.node_names
    mon = {n: f"http://127.0.0.1:{mixed_cluster.http_ports[n]}" for n in mixed_cluster.node_names}
    url = mixed_cluster.url(lazy[0])
    _stream(url, "DR_R3", replicas=3, allow_batched=True)

    every = [arg for node in mixed_cluster.node_names for arg in ("--monitor", mon[node])]
    code, report = _doctor(url, "DR_R3", *every)
    assert code == 0, report
    warned = _sync_finding(report, "DR_R3")
    assert warned["severity"] == "warning", warned
    assert warned["message"].startswith("3 replicas and sync_interval 2m on servers "), warned
    for node in lazy:
        assert f"{node!r} ({mon[node]}/varz)" in warned["message"]
    assert repr(always) not in warned["message"].split(":")[0]
    assert all(node in warned["fix"] for node in mixed_cluster.node_names), warned
    assert [m["server"] for m in report["server"]["monitored"]] == mixed_cluster.node_names
    assert report["server"]["sync_always"] is False

    code, report = _doctor(url, "DR_R3", "--monitor", mon[always])
    assert code == 0, report
    noted = _sync_finding(report, "DR_R3")
    assert noted["severity"] == "note", noted
    assert (
        f"sync_interval: always on server {always!r} ({mon[always]}/varz), but"
        in (noted["message"])
    )
    assert all(repr(node) in noted["message"].split("but")[1] for node in lazy), noted

    shown = cli(url, "doctor", "DR_R3", "--monitor", mon[lazy[1]])
    assert shown.exit_code == 0, shown.output
    out = " ".join(shown.stdout.split())
    assert f"warning stream DR_R3: 3 replicas and sync_interval 2m on server {lazy[1]!r}" in out

    http = free_port()
    server_factory(
        server_configs.monitored(tmp_path / "other", http_port=http, sync_interval="always")
    )
    other = f"http://127.0.0.1:{http}"
    refused = cli(url, "doctor", "DR_R3", "--monitor", mon[always], "--monitor", other)
    assert refused.exit_code == 2, refused.output
    assert (
        f"--monitor {other} is the monitoring endpoint of server 'monitored' (outside any "
        "cluster), not of a server of cluster 'oncestream'" in " ".join(refused.output.split())
    )


def test_consumers_that_lose_or_redeliver_messages_and_their_fixes(
    nats_server: NatsServer,
) -> None:
    url = nats_server.url
    _stream(url, "DR_C", allow_batched=True)
    args = ["consumer", "add", "DR_C", "limited", "--max-deliver", "5", "--ack-wait", "2s"]
    assert cli(url, *args).exit_code == 0
    assert cli(url, "consumer", "add", "DR_C", "fine").exit_code == 0

    code, report = _doctor(url, "DR_C/limited")
    assert code == 1
    assert _checks(report, "consumer DR_C/limited") == {
        "max-deliver": "breaks",
        "ack-wait": "warning",
    }
    assert "consumer DR_C/fine" not in {f["target"] for f in report["findings"]}
    fixes = [f["fix"] for f in report["findings"] if f["target"] == "consumer DR_C/limited"]
    for fix in fixes:  # the commands doctor prints, run as printed
        words = fix.split()
        assert words[0] == "oncestream", fix
        assert cli(url, *words[1:]).exit_code == 0, fix
    code, report = _doctor(url, "DR_C")
    assert code == 0, report
    assert _checks(report, "consumer DR_C/limited") == {"consumer": "ok"}
    assert _checks(report, "consumer DR_C/fine") == {"consumer": "ok"}


def test_max_deliver_is_judged_by_the_processors_rule(nats_server: NatsServer) -> None:
    """A consumer max_deliver of 6, which a Processor with a dead-letter stream accepts
    (it dead-letters after 5 attempts), is not BREAKS (issue 48): a warning when doctor
    does not know the dead-letter stream, a note when told; BREAKS where the Processor
    refuses it (its --max-deliver not below 6)."""
    url = nats_server.url
    _stream(url, "DR_MD", allow_batched=True)
    assert cli(url, "consumer", "add", "DR_MD", "six", "--max-deliver", "6").exit_code == 0
    target = "consumer DR_MD/six"
    code, report = _doctor(url, "DR_MD")
    assert (code, _checks(report, target)) == (0, {"max-deliver": "warning"}), report
    code, report = _doctor(url, "DR_MD", "--dead-letter-stream", "DLQ")
    assert (code, _checks(report, target)) == (0, {"max-deliver": "note"}), report
    code, report = _doctor(url, "DR_MD", "--dead-letter-stream", "DLQ", "--max-deliver", "6")
    assert (code, _checks(report, target)) == (1, {"max-deliver": "breaks"}), report
    code, report = _doctor(url)  # the whole server: healthy with it
    assert code == 0, report


def test_status_points_to_doctor(nats_server: NatsServer) -> None:
    _stream(nats_server.url, "DR_ST")
    shown = cli(nats_server.url, "status", "DR_ST")
    assert shown.exit_code == 0
    assert "hint: `oncestream doctor DR_ST` checks these settings" in shown.stdout
    assert "hint" not in cli(nats_server.url, "status", "DR_ST", "--json").stdout


# -- the start-up checks of the known-bug table (a faked release on a real server) ------------


@pytest.fixture
def old_release(monkeypatch: pytest.MonkeyPatch) -> None:
    """The connected server reports 2.14.4 in cluster ``east`` (the suite runs one release)."""
    monkeypatch.setattr(version_module, "server_version", lambda conn: (2, 14, 4))
    monkeypatch.setattr(version_module, "server_cluster", lambda conn: "east")
    monkeypatch.setattr(version_module, "_warned", set())


async def _start_publisher_and_create(url: str) -> None:
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        await add_stream(conn, StreamSpec(name="DR_BUG", subjects=("dr.bug.>",)).to_api())
        async with Publisher(conn, PublisherOptions(stream="DR_BUG")) as pub:
            await pub.publish("dr.bug.1", b"x", msg_id="1")


def test_publisher_and_stream_create_warn_on_a_release_with_a_known_bug(
    nats_server: NatsServer, old_release: None, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="oncestream.streams"):
        asyncio.run(_start_publisher_and_create(nats_server.url))
    warned = [r.getMessage() for r in caplog.records if r.name == "oncestream.streams._version"]
    assert len(warned) == 1, warned  # once per process: the create, then the Publisher
    assert warned[0].startswith("nats-server 2.14.4 has a known bug (idempotent-create-created")
    assert "Fixed in nats-server 2.14.5 or newer (2.12.15 on 2.12)" in warned[0]


def test_the_shipped_release_starts_without_a_warning(
    nats_server: NatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="oncestream.streams"):
        asyncio.run(_start_publisher_and_create(nats_server.url))
    assert [r for r in caplog.records if r.name == "oncestream.streams._version"] == []


def test_the_operations_page_shows_what_doctor_prints(nats_server: NatsServer) -> None:
    """docs/operations.md's `doctor` output lines (each up to its ``(...)``) are printed."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    block = page.split("The first `doctor` prints, among its lines:", 1)[1]
    shown = block.split("```text\n", 1)[1].split("```", 1)[0].splitlines()
    assert len(shown) == 4
    url = nats_server.url
    added = cli(url, "stream", "add", "ORDERS", "--subjects", "orders.>", "--dupe-window", "10s")
    assert added.exit_code == 0
    assert cli(url, "consumer", "add", "ORDERS", "billing", "--max-deliver", "5").exit_code == 0
    result = cli(url, "doctor", "ORDERS")
    assert result.exit_code == 1
    printed = [" ".join(line.split()) for line in result.stdout.splitlines()]
    for line in shown:
        start = " ".join(line.split(" (...)")[0].split())
        assert any(p.startswith(start) for p in printed), (start, result.stdout)
