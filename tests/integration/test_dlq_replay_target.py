"""`dlq replay` into the right stream only (Nats-Expected-Stream), and scheduled replays
(`--at` / `--in`, nats-server message schedules) against a real nats-server."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from oncestream import Connection, StreamMismatch
from oncestream.process._replay import _publish, _republish, list_dead_letters
from oncestream.process._replayed import life_token
from tests.integration._cli import cli, cli_json, publish, with_conn


def _dead_letter(url: str, dlq: str, stream: str, subject: str, data: bytes = b"payload") -> None:
    """A dead letter as a Processor writes it (original stream, sequence, subject...):
    consumer c's own (its msg id names c). Consumer c is created on ``stream`` when it
    exists (a replay keeps a letter whose consumer is gone)."""
    if cli(url, "stream", "info", stream).exit_code == 0:
        cli_json(url, "consumer", "add", stream, "c")
    publish(url, f"{dlq}.{stream}", [data], **{
        "Oncestream-Stream": stream, "Oncestream-Sequence": "1", "Oncestream-Subject": subject,
        "Oncestream-Consumer": "c", "Oncestream-Attempts": "5", "Oncestream-Error": "boom",
        "Oncestream-Msg-Id": "order-1", "Nats-Msg-Id": f"dlq:{stream}:c:1",
    })  # fmt: skip


def _messages(url: str, stream: str) -> int:
    return int(cli_json(url, "stream", "info", stream)["state"]["messages"])


def test_replay_refuses_a_subject_that_moved_to_another_stream(nats_server) -> None:  # type: ignore[no-untyped-def]
    url = nats_server.url
    cli_json(url, "stream", "add", "A", "--subjects", "x.>")
    cli_json(url, "stream", "add", "A_DLQ", "--subjects", "A_DLQ.>")
    publish(url, "x.a", [b"payload"])
    _dead_letter(url, "A_DLQ", "A", "x.a")
    assert cli(url, "stream", "rm", "A", "--force").exit_code == 0
    cli_json(url, "stream", "add", "B", "--subjects", "x.>")

    refused = cli(url, "dlq", "replay", "A_DLQ", "--all", "--force")
    assert refused.exit_code == 1, refused.stdout + refused.stderr
    for part in ("subject 'x.a'", "original stream 'A'", "stream 'B' holds it now"):
        assert part in refused.stderr, (part, refused.stderr)
    assert "replayed" not in refused.stdout
    assert _messages(url, "B") == 0
    assert len(cli_json(url, "dlq", "ls", "A_DLQ")) == 1  # still there, no marker either
    assert _messages(url, "A_DLQ") == 1

    # The original stream still exists but no longer captures the subject.
    cli_json(url, "stream", "edit", "B", "--subjects", "y.>")
    cli_json(url, "stream", "add", "A", "--subjects", "z.>")
    gone = cli(url, "dlq", "replay", "A_DLQ", "--all", "--force")
    assert gone.exit_code == 1 and "no stream captures it now" in gone.stderr
    cli_json(url, "stream", "edit", "A", "--subjects", "z.>,x.>")
    cli_json(url, "consumer", "add", "A", "c")  # the letter's consumer, on the new stream A
    assert cli_json(url, "dlq", "replay", "A_DLQ", "--all", "--force")["replayed"] == [1]
    assert cli_json(url, "stream", "get", "A", "--last-for", "x.a")["data"] == "payload"


def test_the_republish_itself_carries_expected_stream(nats_server) -> None:  # type: ignore[no-untyped-def]
    """The subject moves between the check and the publish: the server refuses it."""
    url = nats_server.url
    cli_json(url, "stream", "add", "A_DLQ", "--subjects", "A_DLQ.>")
    _dead_letter(url, "A_DLQ", "A", "x.a")
    cli_json(url, "stream", "add", "B", "--subjects", "x.>")

    async def republish(conn: Connection) -> None:
        (letter,) = await list_dead_letters(conn, "A_DLQ")
        await _republish(conn, letter, None)

    with pytest.raises(StreamMismatch, match=r"stream 'B' holds it now"):
        with_conn(url, republish)
    assert _messages(url, "B") == 0


def _await_message(url: str, stream: str, subject: str, timeout: float = 30.0) -> dict[str, Any]:
    """Bounded wait for the server to store a message on ``subject`` (fresh CLI each time)."""
    deadline = time.monotonic() + timeout
    while True:
        found = cli(url, "stream", "get", stream, "--last-for", subject, "--json")
        if found.exit_code == 0:
            return json.loads(found.stdout)  # type: ignore[no-any-return]
        assert found.exit_code == 1, found.stderr
        assert time.monotonic() < deadline, f"nothing on {subject} after {timeout}s"
        time.sleep(0.2)  # polling the server's state: no event to await


def test_scheduled_replay_fires_on_the_server_once(nats_server) -> None:  # type: ignore[no-untyped-def]
    url = nats_server.url
    cli_json(url, "stream", "add", "S", "--subjects", "s.>,oncestream.schedule.S.>",
             "--allow-msg-schedules")  # fmt: skip
    cli_json(url, "stream", "add", "S_DLQ", "--subjects", "S_DLQ.>")
    _dead_letter(url, "S_DLQ", "S", "s.x")

    report = cli_json(url, "dlq", "replay", "S_DLQ", "--all", "--force", "--in", "4s")
    assert report["replayed"] == [1] and report["selected"] == 1
    when = datetime.fromisoformat(report["scheduled_at"].replace("Z", "+00:00"))
    assert cli_json(url, "dlq", "ls", "S_DLQ") == []  # handed to the server
    schedule = cli_json(url, "stream", "get", "S", "--last-for", "oncestream.schedule.S.>")
    assert schedule["subject"] == "oncestream.schedule.S.S_DLQ.1"
    assert schedule["headers"]["Nats-Schedule-Target"] == ["s.x"]
    if datetime.now(UTC) < when:
        assert cli(url, "stream", "get", "S", "--last-for", "s.x").exit_code == 1  # not yet

    nats_server.restart()  # no client and not even the same server process: it still fires

    fired = _await_message(url, "S", "s.x")
    assert fired["data"] == "payload"
    headers = fired["headers"]
    assert headers["Oncestream-Replay-Of"] == ["S_DLQ:1"]
    assert headers["Oncestream-Msg-Id"] == ["order-1"]
    assert headers["Oncestream-Replay-For"] == ["c"]  # applied by consumer c only
    assert headers["Nats-Scheduler"] == ["oncestream.schedule.S.S_DLQ.1"]
    assert "Nats-Msg-Id" not in headers  # the server drops it from what it publishes
    stamp = datetime.fromisoformat(fired["time"][:26] + "+00:00")
    assert stamp >= when.replace(tzinfo=UTC)
    # The schedule purged itself as it fired; a re-run adds nothing.
    assert cli(url, "stream", "get", "S", "--last-for", "oncestream.schedule.S.>").exit_code == 1
    again = cli_json(url, "dlq", "replay", "S_DLQ", "--all", "--force", "--in", "2s")
    assert again == {
        "selected": 0, "replayed": [], "already_replayed": [], "deleted_by_another": [], "kept": {}
    }  # fmt: skip
    assert _messages(url, "S") == 1


def test_scheduled_replay_after_a_crash_schedules_once(nats_server) -> None:  # type: ignore[no-untyped-def]
    """A crash between storing the schedule and deleting the dead letter: the re-run
    finds the pending schedule and only cleans up."""
    url = nats_server.url
    cli_json(url, "stream", "add", "S", "--subjects", "s.>,oncestream.schedule.S.>",
             "--allow-msg-schedules", "--dupe-window", "500ms")  # fmt: skip
    cli_json(url, "stream", "add", "S_DLQ", "--subjects", "S_DLQ.>")
    _dead_letter(url, "S_DLQ", "S", "s.x")

    async def crash_after_schedule(conn: Connection) -> None:
        (letter,) = await list_dead_letters(conn, "S_DLQ")
        marker = {"Oncestream-Replay-Marker": "1", "Oncestream-Replay-After": "0",
                  "Nats-Msg-Id": "replay-marker:S_DLQ:1"}  # fmt: skip
        await _publish(conn, letter.dlq_subject, b"", marker)
        await _republish(conn, letter, datetime.fromtimestamp(time.time() + 3, UTC))

    with_conn(url, crash_after_schedule)
    report = cli_json(url, "dlq", "replay", "S_DLQ", "--all", "--force", "--in", "1s")
    assert report["replayed"] == [] and report["already_replayed"] == [1]
    assert _messages(url, "S_DLQ") == 0
    fired = _await_message(url, "S", "s.x")
    assert fired["headers"]["Oncestream-Replay-Of"] == ["S_DLQ:1"]
    assert _messages(url, "S") == 1  # one copy: the schedule purged itself as it fired


def test_scheduled_replay_refused_without_schedules(nats_server) -> None:  # type: ignore[no-untyped-def]
    url = nats_server.url
    cli_json(url, "stream", "add", "T", "--subjects", "t.>")
    cli_json(url, "stream", "add", "T_DLQ", "--subjects", "T_DLQ.>")
    _dead_letter(url, "T_DLQ", "T", "t.x")

    refused = cli(url, "dlq", "replay", "T_DLQ", "--all", "--force", "--in", "1m")
    assert refused.exit_code == 2
    assert "does not allow message schedules (allow_msg_schedules)" in refused.stderr
    assert "oncestream stream edit T --allow-msg-schedules --subjects" in refused.stderr
    cli_json(url, "stream", "edit", "T", "--allow-msg-schedules")
    uncaptured = cli(url, "dlq", "replay", "T_DLQ", "--all", "--force", "--in", "1m")
    assert uncaptured.exit_code == 2
    assert "does not capture 'oncestream.schedule.T.>'" in uncaptured.stderr
    assert _messages(url, "T") == 0 and len(cli_json(url, "dlq", "ls", "T_DLQ")) == 1

    for args, said in (
        (["--in", "1m", "--at", "2999-01-01T00:00:00Z"], "give --at or --in, not both"),
        (["--at", "2001-01-01T00:00:00Z"], "is not in the future"),
        (["--at", "10m"], "--at must be an ISO 8601 time"),
        (["--in", "soon"], "--in must be a duration"),
    ):
        result = cli(url, "dlq", "replay", "T_DLQ", "--all", "--force", *args)
        assert result.exit_code == 2 and said in result.stderr, (args, result.stderr)


def test_a_second_letter_of_a_message_whose_replay_is_scheduled_is_not_replayed(
    nats_server,
) -> None:  # type: ignore[no-untyped-def]
    """docs/processing.md ("A dead-lettered message delivered again"): a scheduled replay
    not yet fired is a copy still to come; a second letter of the message (the first's
    bytes, past the window) is deleted as already replayed, no second schedule stored."""
    url = nats_server.url
    cli_json(url, "stream", "add", "S", "--subjects", "s.>,oncestream.schedule.S.>",
             "--allow-msg-schedules")  # fmt: skip
    cli_json(url, "stream", "add", "S_DLQ", "--subjects", "S_DLQ.>", "--dupe-window", "100ms")
    cli_json(url, "consumer", "add", "S", "c")
    publish(url, "s.x", [b"payload"])
    created = cli_json(url, "stream", "info", "S")["created"]
    letter = {
        "Oncestream-Stream": "S", "Oncestream-Sequence": "1", "Oncestream-Subject": "s.x",
        "Oncestream-Consumer": "c", "Oncestream-Attempts": "5", "Oncestream-Error": "boom",
        "Oncestream-Stream-Created": created, "Nats-Msg-Id": f"dlq:S:c:1:{life_token(created)}",
    }  # fmt: skip

    async def write_letter(conn: Connection) -> None:
        for _ in range(100):  # bounded: the 100 ms window passes (a time, not an event)
            if not (await _publish(conn, "S_DLQ.S", b"payload", letter)).get("duplicate"):
                return
            await asyncio.sleep(0.05)

    with_conn(url, write_letter)
    assert cli_json(url, "dlq", "replay", "S_DLQ", "--all", "--force", "--in", "1h")[
        "replayed"
    ] == [1]
    with_conn(url, write_letter)
    (second,) = cli_json(url, "dlq", "ls", "S_DLQ")
    report = cli_json(url, "dlq", "replay", "S_DLQ", "--all", "--force", "--in", "1h")
    assert (report["replayed"], report["already_replayed"]) == ([], [second["seq"]]), report
    assert _messages(url, "S") == 2  # the original and the one schedule
