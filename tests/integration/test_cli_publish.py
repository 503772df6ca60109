"""`oncestream publish` against a real server: exit codes and what the stream holds."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import orjson
from typer.testing import CliRunner, Result

from oncestream import Connection
from oncestream.cli import app
from oncestream.server import NatsServer
from tests.integration.test_publisher import read_back

ORDERS = [
    {"id": "o1", "region": "eu", "amount": 10},
    {"id": "o2", "region": "us", "amount": 20},
    {"id": "o3", "region": "eu", "amount": 30},
    {"id": "o4", "region": "ap", "amount": 40},
    {"id": "o5", "region": "us", "amount": 50},
]


async def invoke(args: list[str], stdin: str | None = None) -> Result:
    """Run the CLI in a worker thread (it runs its own event loop)."""
    runner = CliRunner()
    return await asyncio.to_thread(runner.invoke, app, args, input=stdin)


def summary(result: Result) -> dict[str, int]:
    """The numbers of the summary table row: sent, stored, duplicates, failed, retried, ..."""
    rows = [line for line in result.stdout.splitlines() if re.search(r"\d", line)]
    numbers = [int(n.replace(",", "")) for n in re.findall(r"[\d,]+", rows[-1])]
    names = ("sent", "stored", "duplicates", "failed", "retried", "malformed")
    return dict(zip(names, numbers, strict=False))


def jsonl(path: Path, lines: list[str]) -> str:
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def base_args(server: NatsServer, file: str, *extra: str) -> list[str]:
    return ["publish", file, "--stream", "ORDERS", "-s", server.url, "--no-progress", *extra]


async def test_publish_jsonl_then_rerun_is_all_duplicates(
    nats_server: NatsServer, conn: Connection, make_stream, tmp_path: Path
) -> None:
    await make_stream("ORDERS", ("orders.>",))
    file = jsonl(tmp_path / "orders.jsonl", [orjson.dumps(o).decode() for o in ORDERS])
    args = base_args(nats_server, file, "--subject", "orders.{region}", "--id-field", "id")
    first = await invoke(args)
    assert first.exit_code == 0, first.output
    assert summary(first) | {} == {
        "sent": 5,
        "stored": 5,
        "duplicates": 0,
        "failed": 0,
        "retried": 0,
        "malformed": 0,
    }
    stored = await read_back(conn, "ORDERS")
    assert [(m.subject, m.msg_id) for m in stored] == [
        (f"orders.{o['region']}", o["id"]) for o in ORDERS
    ]
    assert orjson.loads(stored[0].data) == ORDERS[0]

    again = await invoke(args)
    assert again.exit_code == 0, again.output
    assert "nothing to publish" in again.stderr and "already in stream 'ORDERS'" in again.stderr
    # --fresh ignores the progress record: inside the window every record is a duplicate.
    fresh = await invoke([*args, "--fresh"])
    assert fresh.exit_code == 0, fresh.output
    assert summary(fresh)["stored"] == 0 and summary(fresh)["duplicates"] == 5
    assert len(await read_back(conn, "ORDERS")) == 5


async def test_malformed_lines_stop_or_skip(
    nats_server: NatsServer, conn: Connection, make_stream, tmp_path: Path
) -> None:
    await make_stream("ORDERS", ("orders.>",))
    lines = [
        orjson.dumps(ORDERS[0]).decode(),
        "{not json",
        orjson.dumps({"id": "o9", "amount": 1}).decode(),
        "[1, 2]",
        orjson.dumps(ORDERS[1]).decode(),
    ]
    file = jsonl(tmp_path / "mixed.jsonl", lines)
    common = ("--subject", "orders.{region}", "--id-field", "id")
    stop = await invoke(base_args(nats_server, file, *common))
    assert stop.exit_code == 1
    assert "line 2: invalid JSON" in stop.stderr
    assert [m.msg_id for m in await read_back(conn, "ORDERS")] == ["o1"]

    skip = await invoke(base_args(nats_server, file, *common, "--on-error", "skip"))
    assert skip.exit_code == 0, skip.output
    assert "line 3: field 'region' (used by --subject) is missing" in skip.stderr
    assert "line 4: expected a JSON object" in skip.stderr
    assert summary(skip)["malformed"] == 3
    assert [m.msg_id for m in await read_back(conn, "ORDERS")] == ["o1", "o2"]


async def test_csv_from_stdin_with_content_ids(
    nats_server: NatsServer, conn: Connection, make_stream
) -> None:
    await make_stream("ORDERS", ("orders.>",))
    text = "region,amount\neu,1\nus,2\neu,1\n"
    args = base_args(nats_server, "-", "--subject", "orders.{region}", "--id-from-content")
    result = await invoke(args, stdin=text)
    assert result.exit_code == 0, result.output
    # Rows 2 and 4 are identical: same content id, stored once.
    assert summary(result)["stored"] == 2 and summary(result)["duplicates"] == 1
    stored = await read_back(conn, "ORDERS")
    assert [orjson.loads(m.data) for m in stored] == [
        {"region": "eu", "amount": "1"},
        {"region": "us", "amount": "2"},
    ]
    assert all(m.msg_id and len(m.msg_id) == 64 for m in stored)


async def test_option_and_stream_errors_exit_non_zero(
    nats_server: NatsServer, conn: Connection, make_stream, tmp_path: Path
) -> None:
    file = jsonl(tmp_path / "o.jsonl", [orjson.dumps(ORDERS[0]).decode()])
    neither = await invoke(base_args(nats_server, file, "--subject", "orders.x"))
    assert neither.exit_code == 2 and "exactly one of --id-field" in neither.stderr
    both = await invoke(
        base_args(nats_server, file, "--subject", "o.x", "--id-field", "id", "--id-from-content")
    )
    assert both.exit_code == 2
    missing = await invoke(
        base_args(nats_server, file, "--subject", "orders.x", "--id-field", "id")
    )
    assert missing.exit_code == 2 and "stream 'ORDERS' (--stream) not found" in missing.stderr

    for bad in ("0", "-5", "nan", "inf", "1e-9", "2e9"):  # 1e-9: one record every 31 years
        paced = await invoke(
            base_args(nats_server, file, "--subject", "orders.x", "--id-field", "id", "--rate", bad)
        )
        assert paced.exit_code == 2, paced.output
        # nan/inf are refused by the check every float option of the CLI has (a finite number).
        assert "--rate must be a" in paced.stderr
        assert repr(float(bad)).lower() in paced.stderr.lower()

    await make_stream("ORDERS", ("orders.>",), duplicate_window=1.0)
    guard = await invoke(base_args(nats_server, file, "--subject", "orders.x", "--id-field", "id"))
    assert guard.exit_code == 2 and "duplicate_window 1s" in guard.stderr
    info = await conn.stream_info("ORDERS")
    assert info["state"]["messages"] == 0


async def test_subject_no_stream_captures_is_refused_up_front(
    nats_server: NatsServer, conn: Connection, make_stream, tmp_path: Path
) -> None:
    await make_stream("ORDERS", ("orders.>",))
    file = jsonl(tmp_path / "o.jsonl", [orjson.dumps(o).decode() for o in ORDERS[:3]])
    # The stream exists, but nothing captures this subject: refused before publishing.
    result = await invoke(
        base_args(nats_server, file, "--subject", "elsewhere.x", "--id-field", "id")
    )
    assert result.exit_code == 2, result.output
    assert "no stream captures --subject 'elsewhere.x'" in result.stderr
    assert "'orders.>'" in result.stderr
    assert (await conn.stream_info("ORDERS"))["state"]["messages"] == 0
