"""The checks of `oncestream doctor` on stream and consumer infos as the server reports them.

Server releases are faked here (the suite runs one nats-server release): an old patch
release must be flagged by the known-bug table, by patch level.
"""

from __future__ import annotations

from typing import Any

import pytest

from oncestream import ConfigError
from oncestream.doctor import DoctorOptions, DoctorReport, Finding, Target
from oncestream.doctor._checks import (
    check_consumer,
    check_server,
    check_stream,
    check_sync_unknown,
    duration,
)
from oncestream.doctor._internal import SPARK_TASK_MAX_FAILURES, parse_target
from oncestream.doctor._monitor import ServerSync
from oncestream.publish import PublisherOptions
from oncestream.spark._sink_options import SinkOptions

OPTS = DoctorOptions()
NEW = (2, 15, 1)


def stream(name: str = "ORDERS", **config: Any) -> dict[str, Any]:
    """A stream info; its ``cluster`` names servers n0 (the leader), n1... (its replicas)."""
    base = {
        "name": name,
        "subjects": [f"{name.lower()}.>"],
        "storage": "file",
        "num_replicas": 1,
        "duplicate_window": 120 * 10**9,
        "allow_batched": True,
    }
    merged = {**base, **config}
    peers = [{"name": f"n{i}", "current": True} for i in range(1, merged["num_replicas"])]
    cluster = {"leader": "n0", **({"replicas": peers} if peers else {})}
    return {"config": merged, "state": {}, "cluster": cluster}


def policy(server: str, *, always: bool, interval: float = 120.0) -> ServerSync:
    port = 8222 + int(server.lstrip("n") or 0)
    return ServerSync(
        url=f"http://127.0.0.1:{port}",
        server=server,
        cluster=None,
        sync_always=always,
        sync_interval=interval,
    )


def read(*servers: str, always: bool = True, interval: float = 120.0) -> dict[str, ServerSync]:
    """The policies ``--monitor`` read, by server name (every one ``always`` or not)."""
    return {s: policy(s, always=always, interval=interval) for s in servers}


def consumer(name: str = "billing", **config: Any) -> dict[str, Any]:
    base = {
        "durable_name": name,
        "ack_policy": "explicit",
        "ack_wait": 30 * 10**9,
        "max_deliver": -1,
    }
    return {"name": name, "config": {**base, **config}}


def by_check(findings: list[Finding]) -> dict[str, Finding]:
    return {f.check: f for f in findings}


def stream_findings(info: dict[str, Any], **kw: Any) -> dict[str, Finding]:
    args = {"options": OPTS, "version": NEW, "cluster": None, "sync": None, **kw}
    return by_check(check_stream(info, **args))


# -- the server's release ------------------------------------------------------------------


def test_an_old_patch_release_is_flagged_by_the_table() -> None:
    found = by_check(check_server((2, 14, 4), cluster="east", replicas=1))
    bug = found["known-bug:idempotent-create-created"]
    assert bug.severity == "breaks"
    assert "R1 stream hosted there loses every message" in bug.message
    assert bug.fix == "upgrade to nats-server 2.14.5 or newer (2.12.15 on 2.12)"
    assert bug.reference == "https://github.com/nats-io/nats-server/pull/8449"
    report = DoctorReport(server={}, findings=tuple(found.values()))
    assert report.exit_code == 1


def test_the_same_release_outside_a_cluster_is_not_flagged() -> None:
    """Outside a cluster only the row that touches nothing (#8491) applies to 2.14.4: a note."""
    (found,) = check_server((2, 14, 4), cluster=None, replicas=1)
    assert found.check == "known-bug:rejected-consumer-create-deletes-state"
    assert found.severity == "note" and "It concerns nothing:" in found.message
    assert [f.check for f in check_server((2, 15, 1), cluster=None, replicas=1)] == ["known-bugs"]
    assert [f.severity for f in check_server((2, 15, 1), cluster="east", replicas=3)] == ["ok"]


def test_a_replicated_streams_bug_by_what_was_checked() -> None:
    # 2.14.0: the dedupe race needs replicas > 1; the eob refusal touches nothing of ours.
    r3 = by_check(check_server((2, 14, 0), cluster="east", replicas=3))
    assert r3["known-bug:dedupe-leader-change"].severity == "warning"
    assert "PublishFailed" in r3["known-bug:dedupe-leader-change"].message
    assert r3["known-bug:atomic-eob-max-size"].severity == "note"
    unknown = by_check(check_server((2, 14, 0), cluster="east", replicas=None))
    assert "applies to streams with replicas > 1" in (
        unknown["known-bug:dedupe-leader-change"].message
    )
    r1 = by_check(check_server((2, 14, 0), cluster="east", replicas=1))
    assert "known-bug:dedupe-leader-change" not in r1


def test_a_release_older_than_oncestreams_minimum() -> None:
    found = by_check(check_server((2, 11, 5), cluster=None, replicas=None))
    assert found["server-version"].severity == "warning"
    assert "older than 2.12" in found["server-version"].message
    assert check_server(None, cluster=None)[0].severity == "note"


# -- a stream's duplicate window -------------------------------------------------------------


@pytest.mark.parametrize(
    ("window", "severity"),
    [(10, "breaks"), (27, "breaks"), (27.3, "warning"), (60, "warning"), (110, "ok"), (600, "ok")],
)
def test_the_window_against_the_retry_horizons(window: float, severity: str) -> None:
    # Default Publisher: 5 x 5s + 0.05+0.25+1+1 = 27.3s; a Spark task 4 x that = 109.2s.
    found = stream_findings(stream(duplicate_window=int(window * 1e9)))["duplicate-window"]
    assert found.severity == severity
    if severity != "ok":
        assert found.fix == "oncestream stream edit ORDERS --dupe-window 2m"


def test_the_break_is_exactly_where_the_publisher_refuses_to_start() -> None:
    pub = PublisherOptions()
    for window in (pub.retry_horizon - 0.01, pub.retry_horizon, pub.retry_horizon + 0.01):
        verdict = stream_findings(stream(duplicate_window=int(window * 1e9)))
        try:
            pub.check_window_fits("ORDERS", int(window * 1e9) / 1e9)
            refused = False
        except ConfigError:
            refused = True
        assert (verdict["duplicate-window"].severity == "breaks") is refused, window


def test_the_suggested_window_covers_the_horizons_given() -> None:
    slow = DoctorOptions(publisher=PublisherOptions(ack_timeout=30.0), task_max_failures=4)
    # 5 x 30 + 2.3 = 152.3s; x4 = 609.2s: 11 minutes.
    found = by_check(check_stream(stream(), options=slow, version=NEW, cluster=None, sync=None))[
        "duplicate-window"
    ]
    assert found.severity == "breaks"  # 2m < 152.3s
    assert found.fix == "oncestream stream edit ORDERS --dupe-window 11m"
    assert "152.3s" in found.message and "609.2s" in found.message


def test_a_mirror_takes_no_publishes() -> None:
    mirror = stream(duplicate_window=10**9, allow_batched=False, mirror={"name": "ORDERS"})
    assert set(stream_findings(mirror)) == set()  # durability only: nothing to say at R1/unknown


# -- durability ------------------------------------------------------------------------------


def test_memory_storage() -> None:
    r1 = stream_findings(stream(storage="memory"))["storage"]
    assert r1.severity == "breaks" and "a restart of its server loses every message" in r1.message
    assert stream_findings(stream(storage="memory", num_replicas=3))["storage"].severity == (
        "warning"
    )


def test_replicas_and_the_fsync_policy() -> None:
    assert stream_findings(stream(num_replicas=3))["storage"].severity == "ok"
    in_cluster = stream_findings(stream(), cluster="east")["replicas"]
    assert in_cluster.severity == "warning"
    assert in_cluster.fix == "oncestream stream edit ORDERS --replicas 3"
    always = stream_findings(stream(), sync=read("n0"))["sync-interval"]
    assert always.severity == "ok"
    assert always.message.endswith(
        "fsynced before each acknowledgement: sync_interval: always on server 'n0' "
        "(http://127.0.0.1:8222/varz)"
    )
    lazy = stream_findings(stream(), sync=read("n0", always=False))["sync-interval"]
    assert lazy.severity == "warning"
    assert "1 replica and sync_interval 2m on server 'n0' (http://127.0.0.1:8222/varz)" in (
        lazy.message
    )
    assert "up to the last 2m of acknowledged messages" in lazy.message
    assert "sync_interval: always" in lazy.fix
    assert "sync-interval" not in stream_findings(stream(), sync=None)  # one server note instead
    note = check_sync_unknown(["A", "B"])[0]
    assert note.severity == "note" and "A, B have 1 replica" in note.message
    assert "--monitor" in note.fix
    assert check_sync_unknown([]) == []


def test_the_one_replica_fix_does_not_lead_to_the_replicated_warning() -> None:
    """R1 with the default sync: more replicas alone only move the warning to R3 (each
    replica acknowledges what it has not fsynced), so the fix offers `sync_interval:
    always` only, and says that replicas do not replace it."""
    lazy = stream_findings(stream(), sync=read("n0", always=False))["sync-interval"]
    assert "--replicas" not in lazy.fix and "cluster" not in lazy.fix, lazy.fix
    assert lazy.fix == (
        "set `sync_interval: always` in the jetstream block of the server holding it (n0): "
        "an fsync before each acknowledgement (more replicas do not replace it: each replica "
        "needs it)"
    )
    r3 = stream_findings(stream(num_replicas=3), sync=read("n0", "n1", "n2", always=False))
    assert r3["sync-interval"].severity == "warning"  # what "--replicas 3" alone would give


def test_a_replicated_stream_with_the_default_sync_is_warned_as_one_replica_is() -> None:
    """Any replica count above 1 with the default fsync policy: the fault campaign's
    power-loss faults lost acknowledged writes there (docs/guarantees.md), so doctor
    warns as it does for R1."""
    for replicas in (2, 3, 5):
        servers = [f"n{i}" for i in range(replicas)]
        lazy = stream_findings(stream(num_replicas=replicas), sync=read(*servers, always=False))
        assert lazy["storage"].severity == "ok"
        assert lazy["sync-interval"].severity == "warning"
        message = lazy["sync-interval"].message
        assert f"{replicas} replicas and sync_interval 2m on servers 'n0' (" in message
        assert "docs/guarantees.md#durability-per-setting" in message
        assert "sync_interval: always" in lazy["sync-interval"].fix
        assert ", ".join(servers) in lazy["sync-interval"].fix
        always = stream_findings(stream(num_replicas=replicas), sync=read(*servers))
        assert always["sync-interval"].severity == "ok"
        assert f"{replicas} replicas, each fsyncing" in always["sync-interval"].message
    assert "sync-interval" not in stream_findings(stream(num_replicas=3), sync=None)
    note = check_sync_unknown([], ["R"])[0]
    assert note.severity == "note" and "R is replicated" in note.message
    assert "1 replica" not in note.message


def test_one_servers_policy_does_not_speak_for_the_other_replicas() -> None:
    """Each /varz tells its own server's policy: `always` read on the leader only is a
    note naming the replicas not read (not an ok claiming every replica fsyncs), and
    one replica read without `always` is a warning whatever the others do."""
    r3 = stream(num_replicas=3)
    leader_only = stream_findings(r3, sync=read("n0"))["sync-interval"]
    assert leader_only.severity == "note"
    assert "sync_interval: always on server 'n0' (http://127.0.0.1:8222/varz), but the " in (
        leader_only.message
    )
    assert "fsync policy of 'n1', 'n2' is unknown" in leader_only.message
    assert "'n1', 'n2'" in leader_only.fix and "repeat" in leader_only.fix
    mixed = stream_findings(r3, sync={**read("n0", "n2"), **read("n1", always=False)})
    assert mixed["sync-interval"].severity == "warning"
    assert "3 replicas and sync_interval 2m on server 'n1' (" in mixed["sync-interval"].message
    unrelated = stream_findings(r3, sync=read("n7"))["sync-interval"]
    assert unrelated.severity == "note"
    assert "fsync policy of 'n0', 'n1', 'n2' is unknown" in unrelated.message
    leaderless = {**r3, "cluster": {"replicas": [{"name": "n1"}, {"name": "n2"}]}}
    found = stream_findings(leaderless, sync=read("n1", "n2"))["sync-interval"]
    assert found.severity == "note", found
    assert "1 replica its info does not name is unknown" in found.message
    r1 = stream_findings(stream(), sync=read("n5"))["sync-interval"]
    assert r1.severity == "note"
    assert r1.message.startswith("1 replica, on 'n0', whose fsync policy is unknown"), r1
    assert "'n0'" in r1.fix
    r1_leaderless = stream_findings({**stream(), "cluster": {}}, sync=read("n0"))
    assert "on a server its info does not name" in r1_leaderless["sync-interval"].message


def test_the_longest_interval_read_is_the_one_shown() -> None:
    r2 = stream(num_replicas=2)
    found = stream_findings(
        r2, sync={**read("n0", always=False), **read("n1", always=False, interval=600.0)}
    )
    assert "sync_interval 10m on servers 'n0'" in found["sync-interval"].message


# -- fast ingest -----------------------------------------------------------------------------


def test_fast_ingest_where_the_server_supports_it() -> None:
    off = stream_findings(stream(allow_batched=False))["fast-ingest"]
    assert off.severity == "note" and off.fix == "oncestream stream edit ORDERS --allow-batched"
    assert stream_findings(stream())["fast-ingest"].severity == "ok"
    old = stream_findings(stream(allow_batched=False), version=(2, 12, 15))
    assert "fast-ingest" not in old  # 2.12 has no fast-ingest batches


# -- consumers -------------------------------------------------------------------------------


def consumer_findings(info: dict[str, Any]) -> dict[str, Finding]:
    return by_check(check_consumer("ORDERS", info, options=OPTS))


def test_a_healthy_consumer() -> None:
    assert [f.severity for f in check_consumer("ORDERS", consumer(), options=OPTS)] == ["ok"]


def test_a_delivery_limit_loses_a_failing_message() -> None:
    found = consumer_findings(consumer(max_deliver=5))["max-deliver"]
    assert found.severity == "breaks"
    assert "never applied and never dead-lettered" in found.message
    assert found.fix == "oncestream consumer edit ORDERS billing --max-deliver -1"


@pytest.mark.parametrize(
    ("limit", "options", "severity"),
    [
        (1, DoctorOptions(dead_letter_stream="DLQ"), "breaks"),  # no spare delivery at all
        (5, DoctorOptions(dead_letter_stream="DLQ"), "breaks"),  # not above --max-deliver 5
        (6, DoctorOptions(dead_letter_stream="DLQ"), "note"),  # what the Processor accepts
        (6, DoctorOptions(), "warning"),  # accepted only with a dead-letter stream
        (5, DoctorOptions(max_deliver=3, dead_letter_stream="DLQ"), "note"),
        (3, DoctorOptions(max_deliver=3, dead_letter_stream="DLQ"), "breaks"),
    ],
    ids=["1-dlq", "5-dlq", "6-dlq", "6-dlq-unknown", "5-dlq-md3", "3-dlq-md3"],
)
def test_max_deliver_by_the_processors_own_rule(
    limit: int, options: DoctorOptions, severity: str
) -> None:
    """doctor says BREAKS exactly where the Processor refuses the consumer (issue 48: a
    max_deliver of 6 that a Processor with a dead-letter stream ran healthily on was
    BREAKS, exit 1, and turned the whole-server doctor to exit 1)."""
    from oncestream import ProcessorOptions
    from oncestream.process._internal import max_deliver_refusal

    info = consumer(max_deliver=limit)
    found = by_check(check_consumer("ORDERS", info, options=options))["max-deliver"]
    assert found.severity == severity, found

    def refused(dlq: str | None) -> bool:
        processor = ProcessorOptions(max_deliver=options.max_deliver, dead_letter_stream=dlq)
        return max_deliver_refusal(info["config"], "ORDERS", "billing", processor) is not None

    # BREAKS where the Processor with a dead-letter stream refuses; a warning where
    # only the one without refuses (doctor was not told which runs).
    assert refused(options.dead_letter_stream or "DLQ") == (severity == "breaks"), found
    assert refused(None)  # without a dead-letter stream any limit is refused
    report = DoctorReport(server={}, findings=(found,))
    assert report.exit_code == (1 if severity == "breaks" else 0)
    if severity != "breaks":
        attempts = min(options.max_deliver, limit - 1)
        assert f"dead-letters a message that keeps failing after {attempts} attempts" in (
            found.message
        )
    if severity == "warning":
        assert "without a dead-letter stream the Processor refuses to start" in found.message


def test_doctor_assumes_the_processors_default_max_deliver() -> None:
    from oncestream import ProcessorOptions

    assert DoctorOptions().max_deliver == ProcessorOptions().max_deliver


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"max_deliver": 0}, "max_deliver must be an integer > 0, got 0"),
        ({"dead_letter_stream": "a.b"}, "'a.b' is not a valid stream name"),
    ],
)
def test_doctor_processor_options_are_checked(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        DoctorOptions(**kw)


def test_ack_policy_none_loses_what_a_worker_did_not_apply() -> None:
    found = consumer_findings(consumer(ack_policy="none"))["ack-policy"]
    assert found.severity == "breaks"
    assert "oncestream consumer rm ORDERS billing --force" in found.fix


def test_ack_policy_all_is_for_one_processor_with_ack_policy_all() -> None:
    found = consumer_findings(consumer(ack_policy="all"))["ack-policy"]
    assert found.severity == "note"
    assert "--ack-policy all" in (found.fix or "")


def test_a_short_ack_wait_redelivers_under_a_slow_ledger() -> None:
    found = consumer_findings(consumer(ack_wait=2 * 10**9))["ack-wait"]
    assert found.severity == "warning" and "a stall of 1s" in found.message
    assert found.fix == "oncestream consumer edit ORDERS billing --ack-wait 30s"
    backoff = consumer_findings(consumer(ack_wait=10**9, backoff=[10**9, 5 * 10**9]))
    assert backoff["ack-wait"].fix == (
        "oncestream consumer edit ORDERS billing --backoff none --ack-wait 30s"
    )
    assert "ack-wait" not in consumer_findings(consumer(ack_wait=10 * 10**9))


def test_a_running_range_read_is_not_a_broken_consumer() -> None:
    """A Spark read in progress owns ack-none consumers named oncestream_read_*: by design."""
    reader = consumer("oncestream_read_abf905b430734da0", ack_policy="none")
    reader["config"].pop("durable_name")
    found = check_consumer("ORDERS", reader, options=OPTS)
    assert [(f.severity, f.check) for f in found] == [("ok", "consumer")]
    assert "range reader" in found[0].message
    # A durable a user named like that is still checked.
    durable = consumer("oncestream_read_mine", ack_policy="none")
    assert consumer_findings(durable)["ack-policy"].severity == "breaks"


def test_a_push_consumer() -> None:
    assert consumer_findings(consumer(deliver_subject="out.x"))["pull"].severity == "warning"


# -- report, options, targets --------------------------------------------------------------


def test_the_report_exit_code_and_summary() -> None:
    warn = Finding(severity="warning", target="server", check="x", message="m")
    ok = Finding(severity="ok", target="server", check="y", message="m")
    healthy = DoctorReport(server={}, findings=(warn, ok))
    assert healthy.exit_code == 0 and healthy.healthy
    assert healthy.summary() == "nothing breaks an exactly-once guarantee, 1 warning, 0 notes, 1 ok"
    broken = DoctorReport(
        server={}, findings=(warn, Finding(**{**warn.__dict__, "severity": "breaks"}))
    )
    assert broken.exit_code == 1
    assert broken.to_json()["summary"] == {"breaks": 1, "warning": 1, "note": 0, "ok": 0}
    assert broken.summary().startswith("1 finding breaks an exactly-once guarantee")


def test_targets() -> None:
    assert parse_target("ORDERS") == Target("ORDERS")
    assert parse_target("ORDERS/billing") == Target("ORDERS", "billing")
    cases = [
        ("A/B/C", "one '/' at most"),
        ("A.B", "not a valid stream name"),
        ("A/", "not a valid consumer name"),
        ("/b", "not a valid stream"),
    ]
    for bad, fragment in cases:
        with pytest.raises(ConfigError, match=fragment):
            parse_target(bad)


def test_the_monitor_url() -> None:
    assert DoctorOptions(monitor="http://127.0.0.1:8222/").monitors == ("http://127.0.0.1:8222",)
    assert DoctorOptions(monitor="https://nats.example").monitors == ("https://nats.example",)
    several = DoctorOptions(monitor=("http://a:8222", "http://b:8222/", "http://a:8222/"))
    assert several.monitors == ("http://a:8222", "http://b:8222")  # one read per server URL
    assert DoctorOptions().monitors == () and DoctorOptions(monitor=()).monitor is None
    with pytest.raises(ConfigError, match="--monitor must be the server's monitoring URL"):
        DoctorOptions(monitor=("http://a:8222", "a:8222"))
    for bad in ("ftp://x:1", "127.0.0.1:8222", "http://", "http://h:1/varz", "http://h:99999"):
        with pytest.raises(ConfigError, match="--monitor must be"):
            DoctorOptions(monitor=bad)
    with pytest.raises(ConfigError) as caught:
        DoctorOptions(monitor="http://admin:s3cret@h:8222")
    assert "s3cret" not in str(caught.value)
    with pytest.raises(ConfigError, match="task_max_failures"):
        DoctorOptions(task_max_failures=0)


def test_the_spark_default_is_the_sinks() -> None:
    assert SinkOptions.__dataclass_fields__["task_max_failures"].default == SPARK_TASK_MAX_FAILURES


def test_durations_read_like_the_cli_takes_them() -> None:
    assert [duration(s) for s in (0.25, 10, 90, 120, 660, 7200)] == [
        "250ms", "10s", "90s", "2m", "11m", "2h"
    ]  # fmt: skip
