"""`oncestream stream ...` and `oncestream consumer ...` against a real nats-server."""

from __future__ import annotations

from tests.integration._cli import cli, cli_json, publish


def test_stream_lifecycle(nats_server) -> None:  # type: ignore[no-untyped-def]
    url = nats_server.url
    info = cli_json(
        url, "stream", "add", "ORDERS", "--subjects", "orders.>", "--dupe-window", "5m",
        "--storage", "memory", "--max-msgs", "1000", "--retention", "limits", "--no-allow-direct",
    )  # fmt: skip
    config = info["config"]
    assert config["subjects"] == ["orders.>"] and config["storage"] == "memory"
    assert config["duplicate_window"] == 300 * 10**9 and config["max_msgs"] == 1000
    assert config["allow_direct"] is False
    publish(url, "orders.eu", [b"%d" % i for i in range(5)])

    rows = cli_json(url, "stream", "ls")
    assert [(r["stream"], r["messages"], r["consumers"]) for r in rows] == [("ORDERS", 5, 0)]
    table = cli(url, "stream", "ls")
    assert table.exit_code == 0 and "consumers" in table.stdout and "…" not in table.stdout

    edited = cli_json(url, "stream", "edit", "ORDERS", "--max-age", "1h", "--allow-direct")
    assert edited["config"]["max_age"] == 3600 * 10**9 and edited["config"]["allow_direct"]
    assert edited["config"]["max_msgs"] == 1000  # untouched settings stay
    shown = cli(url, "stream", "info", "ORDERS")
    assert shown.exit_code == 0 and "duplicate window" in shown.stdout and "300s" in shown.stdout
    # The command ingest='fast' names when a stream refuses batches (Publisher.start).
    batched = cli_json(url, "stream", "edit", "ORDERS", "--allow-batched")
    assert batched["config"]["allow_batched"] is True
    assert "allow batched" in cli(url, "stream", "info", "ORDERS").stdout
    # The command the sink's ingest=atomic names when a stream refuses atomic batches.
    atomic = cli_json(url, "stream", "edit", "ORDERS", "--allow-atomic")
    assert atomic["config"]["allow_atomic"] is True and atomic["config"]["allow_batched"]
    assert "allow atomic" in cli(url, "stream", "info", "ORDERS").stdout
    added = cli_json(url, "stream", "add", "ATOMIC", "--subjects", "atomic.>", "--allow-atomic")
    assert added["config"]["allow_atomic"] is True
    assert cli_json(url, "stream", "rm", "ATOMIC", "--force")["deleted"] == "ATOMIC"

    refused = cli(url, "stream", "purge", "ORDERS")
    assert refused.exit_code == 2 and "--force" in refused.stderr
    purged = cli_json(url, "stream", "purge", "ORDERS", "--keep", "2", "--force")
    assert purged["purged"] == 3
    assert (
        cli(url, "stream", "purge", "ORDERS", "--subject", "orders.eu", stdin="y\n").exit_code == 2
    )

    assert cli(url, "stream", "rm", "ORDERS").exit_code == 2
    gone = cli_json(url, "stream", "rm", "ORDERS", "--force")
    assert gone == {"deleted": "ORDERS", "messages": 2}
    assert cli_json(url, "stream", "ls") == []
    assert "none defined" in cli(url, "stream", "ls").stdout


def test_stream_errors(nats_server) -> None:  # type: ignore[no-untyped-def]
    url = nats_server.url
    for verb in (["info", "NOPE"], ["rm", "NOPE", "--force"], ["purge", "NOPE", "--force"],
                 ["edit", "NOPE", "--max-msgs", "3"]):  # fmt: skip
        result = cli(url, "stream", *verb)
        assert result.exit_code == 2, (verb, result.stderr)
        assert "stream 'NOPE' not found" in result.stderr, (verb, result.stderr)
    usage = [
        ["add", "X"],  # no subjects
        ["add", "X", "--subjects", "x", "--storage", "tape"],
        ["add", "X", "--subjects", "x", "--retention", "forever"],
        ["add", "X", "--subjects", "x", "--dupe-window", "soon"],
        ["add", "X", "--subjects", "x", "--replicas", "7"],
        ["add", "bad.name", "--subjects", "x"],
        ["edit", "X"],  # nothing to change
        ["purge", "X", "--keep", "1", "--seq", "3", "--force"],
        ["info"],
    ]
    for args in usage:
        result = cli(url, "stream", *args)
        assert result.exit_code == 2, (args, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr


def test_consumer_lifecycle_and_errors(nats_server) -> None:  # type: ignore[no-untyped-def]
    url = nats_server.url
    cli_json(url, "stream", "add", "ORDERS", "--subjects", "orders.>")
    assert "consumers of ORDERS: none" in cli(url, "consumer", "ls", "ORDERS").stdout
    publish(url, "orders.eu", [b"a", b"b", b"c"])
    info = cli_json(
        url, "consumer", "add", "ORDERS", "billing", "--filter", "orders.eu", "--deliver", "2",
        "--ack-wait", "10s", "--max-deliver", "4",
    )  # fmt: skip
    assert info["config"]["deliver_policy"] == "by_start_sequence"
    assert info["config"]["opt_start_seq"] == 2 and info["num_pending"] == 2
    assert info["config"]["ack_wait"] == 10 * 10**9 and info["config"]["max_deliver"] == 4
    new = cli_json(url, "consumer", "add", "ORDERS", "late", "--deliver", "new")
    assert new["config"]["deliver_policy"] == "new" and new["num_pending"] == 0
    since = cli_json(url, "consumer", "add", "ORDERS", "recent", "--deliver", "1h")
    assert since["config"]["deliver_policy"] == "by_start_time" and since["num_pending"] == 3
    rows = cli_json(url, "consumer", "ls", "ORDERS")
    assert [r["consumer"] for r in rows] == ["billing", "late", "recent"]
    table = cli(url, "consumer", "ls", "ORDERS")
    assert "num_pending" in table.stdout and "ack_pending" in table.stdout
    shown = cli(url, "consumer", "info", "ORDERS", "billing")
    assert shown.exit_code == 0 and "by_start_sequence" in shown.stdout

    assert cli(url, "consumer", "rm", "ORDERS", "late").exit_code == 2  # not a terminal
    assert cli_json(url, "consumer", "rm", "ORDERS", "late", "--force") == {
        "deleted": "late",
        "stream": "ORDERS",
    }
    waited = cli(url, "consumer", "wait", "ORDERS", "billing", "--timeout", "200ms")
    assert waited.exit_code == 1 and "ORDERS/billing still has 2 pending" in waited.stderr
    assert [r["consumer"] for r in cli_json(url, "consumer", "ls", "ORDERS")] == [
        "billing",
        "recent",
    ]

    missing = cli(url, "consumer", "info", "ORDERS", "nobody")
    assert missing.exit_code == 2 and "consumer 'nobody' not found on stream 'ORDERS'" in (
        missing.stderr
    )
    for args in (["info", "NOPE", "x"], ["ls", "NOPE"], ["add", "NOPE", "x"], ["rm", "NOPE", "x"]):
        result = cli(url, "consumer", *args)
        assert result.exit_code == 2 and "stream 'NOPE' not found" in result.stderr, args
    for args in (
        ["add", "ORDERS", "c", "--ack", "maybe"],
        ["add", "ORDERS", "c", "--deliver", "yesterday"],
        ["add", "ORDERS", "c", "--max-deliver", "0"],
        ["add", "ORDERS", "c.d"],
        ["add", "ORDERS"],
    ):
        result = cli(url, "consumer", *args)
        assert result.exit_code == 2, (args, result.stderr)


def test_status_watch_and_tables(nats_server) -> None:  # type: ignore[no-untyped-def]
    url = nats_server.url
    cli_json(url, "stream", "add", "W", "--subjects", "w.>")
    lonely = cli(url, "status", "W")
    assert lonely.exit_code == 0 and "consumers of W: none" in lonely.stdout
    publish(url, "w.x", [b"1", b"2"])
    cli_json(url, "consumer", "add", "W", "a-consumer-with-a-long-name")
    watched = cli(url, "status", "W", "--watch", "--interval", "0.1", "--count", "3")
    assert watched.exit_code == 0, watched.stderr
    assert watched.stdout.count("oncestream status W") == 3
    assert "in/s" in watched.stdout and "acked/s" in watched.stdout
    assert "a-consumer-with-a-long-name" in watched.stdout and "…" not in watched.stdout
    everything = cli(url, "status", "--watch", "--interval", "0.1", "--count", "1")
    assert everything.exit_code == 0 and "(all streams)" in everything.stdout
    for bad in (["--interval", "0"], ["--count", "0"]):
        assert cli(url, "status", "W", "--watch", *bad).exit_code == 2, bad
    missing = cli(url, "status", "NOPE", "--watch", "--count", "1")
    assert missing.exit_code == 2 and "NOPE" in missing.stderr


def test_invalid_names_exit_2(nats_server) -> None:  # type: ignore[no-untyped-def]
    url = nats_server.url
    for args in (
        ["stream", "info", "a.b"],
        ["consumer", "info", "S", "c*"],
        ["consumer", "ls", "a b"],
        ["tail", "x>"],
        ["dlq", "ls", "a.b"],
    ):
        result = cli(url, *args)
        assert result.exit_code == 2 and "not a valid" in result.stderr, (args, result.stderr)
