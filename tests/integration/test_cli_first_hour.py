"""What a newcomer meets first in the CLI (issue 22): version, help, one-line errors,
idempotent `add`, conflicts that name the differing fields, hidden bookkeeping streams."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import typer.main
from typer.testing import CliRunner

import oncestream
from oncestream.cli import app
from oncestream.server import NatsServer
from oncestream.streams import StreamSpec, add_stream
from tests.integration._cli import cli, with_conn

CLI = str(Path(sys.executable).parent / "oncestream")


def _run(*args: str, columns: str | None = None) -> subprocess.CompletedProcess[str]:
    """``oncestream ARGS`` as a script runs it: no terminal on stdin, stdout or stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COLUMNS", "NATS_"))}
    if columns is not None:
        env["COLUMNS"] = columns
    return subprocess.run(
        [CLI, *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def test_version_names_the_package_version() -> None:
    result = _run("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"oncestream {oncestream.__version__} (nats-py ")
    assert "nats-server" in result.stdout and len(result.stdout.splitlines()) == 1


def _commands(group: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = [prefix]
    for name, command in dict(group.commands).items():
        if getattr(command, "commands", None):
            out.extend(_commands(command, (*prefix, name)))
        else:
            out.append((*prefix, name))
    return out


def test_help_at_80_columns_is_whole_and_names_values() -> None:
    """No option name or default cut with an ellipsis, no Python type as a metavar."""
    runner = CliRunner()
    commands = _commands(typer.main.get_command(app))
    assert len(commands) > 25
    python_types = re.compile(r"<(?:bool|int|float|str|path|list\[\w+\]|text|integer)>", re.I)
    for command in commands:
        result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "80"})
        text = result.output
        where = f"oncestream {' '.join(command)} --help"
        assert result.exit_code == 0, f"{where}: {text}"
        assert "…" not in text, f"{where} truncates:\n{text}"
        assert not python_types.search(text), f"{where} shows a Python type:\n{text}"
        assert max(len(line) for line in text.splitlines()) <= 80, f"{where}:\n{text}"


def test_errors_are_one_line_when_not_a_terminal(nats_server: NatsServer) -> None:
    name = "ORDERS_ENRICHED_WITH_A_NAME_LONG_ENOUGH_TO_WRAP_AT_EIGHTY_COLUMNS"
    with_conn(
        nats_server.url,
        lambda conn: add_stream(conn, StreamSpec(name=name, subjects=("e.>",)).to_api()),
    )
    for columns in (None, "80"):
        result = _run("stream", "rm", name, "--server", nats_server.url, columns=columns)
        assert result.returncode == 2, result.stderr
        lines = result.stderr.splitlines()
        assert len(lines) == 1, result.stderr
        assert name in lines[0] and "stdin is not a terminal" in lines[0]


def _ok(result: Any) -> str:
    assert result.exit_code == 0, result.output + result.stderr
    return str(result.stdout)


def test_stream_add_again_says_it_exists_and_a_conflict_names_the_fields(
    nats_server: NatsServer,
) -> None:
    url = nats_server.url
    assert "created stream SHOP" in _ok(cli(url, "stream", "add", "SHOP", "--subjects", "shop.>"))
    again = _ok(cli(url, "stream", "add", "SHOP", "--subjects", "shop.>"))
    assert "stream already exists with this configuration: SHOP" in again
    assert "created stream" not in again

    conflict = cli(url, "stream", "add", "SHOP", "--subjects", "store.>")
    assert conflict.exit_code == 2, conflict.output
    message = conflict.stderr.strip()
    assert len(message.splitlines()) == 1
    assert "subjects: ['shop.>'] here, ['store.>'] asked" in message
    assert "oncestream stream edit SHOP" in message
    assert "err_code" not in message


def test_consumer_add_again_says_it_exists_and_a_conflict_names_the_fields(
    nats_server: NatsServer,
) -> None:
    url = nats_server.url
    _ok(cli(url, "stream", "add", "SHOP", "--subjects", "shop.>"))
    first = _ok(cli(url, "consumer", "add", "SHOP", "billing"))
    assert "created consumer SHOP/billing" in first
    again = _ok(cli(url, "consumer", "add", "SHOP", "billing"))
    assert "consumer already exists with this configuration: SHOP/billing" in again

    conflict = cli(url, "consumer", "add", "SHOP", "billing", "--max-deliver", "3")
    assert conflict.exit_code == 2, conflict.output
    message = conflict.stderr.strip()
    assert len(message.splitlines()) == 1
    assert "max_deliver" in message and "3 asked" in message
    assert "oncestream consumer rm SHOP billing" in message


def test_bookkeeping_streams_are_hidden_unless_asked_for(nats_server: NatsServer) -> None:
    url = nats_server.url
    _ok(cli(url, "stream", "add", "SHOP", "--subjects", "shop.>"))
    with_conn(
        url,
        lambda conn: add_stream(
            conn, StreamSpec(name="ONCESTREAM_PUBLISH_PROGRESS", subjects=("_os.p.>",)).to_api()
        ),
    )
    for verb in (("stream", "ls"), ("status",)):
        shown = _ok(cli(url, *verb))
        assert "SHOP" in shown, verb
        assert "ONCESTREAM_PUBLISH_PROGRESS" not in shown, verb
        assert "(1 oncestream bookkeeping stream not shown; --all shows them)" in shown, verb
        everything = _ok(cli(url, *verb, "--all"))
        assert "ONCESTREAM_PUBLISH_PROGRESS" in everything and "SHOP" in everything, verb
        assert "not shown" not in everything, verb


def test_topology_hint_is_not_wrapped(tmp_path: Path) -> None:
    """Machine-readable output never wraps: the `topology up` hint keeps URL and flags on a line."""
    up = _run("topology", "up", "hub-leaf", "--no-streams", "--dir", str(tmp_path))
    try:
        assert up.returncode == 0, up.stderr
        hint = [line for line in up.stdout.splitlines() if "--server" in line]
        assert hint and all("nats://127.0.0.1:" in line for line in hint), up.stdout
    finally:
        down = _run("topology", "down", "--dir", str(tmp_path))
    assert down.returncode == 0, down.stderr


def test_stream_wait_returns_when_the_stream_holds_enough_and_exits_1_on_timeout(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    url = nats_server.url
    _ok(cli(url, "stream", "add", "SHOP", "--subjects", "shop.>"))
    data = tmp_path / "shop.jsonl"
    data.write_text("".join(f'{{"id": {i}}}\n' for i in range(3)))
    _ok(cli(url, "publish", str(data), "--stream", "SHOP", "--subject", "shop.eu",
            "--id-field", "id", "--no-progress"))  # fmt: skip
    assert "stream SHOP holds 3 messages" in _ok(
        cli(url, "stream", "wait", "SHOP", "--messages", "3")
    )
    late = cli(url, "stream", "wait", "SHOP", "--messages", "4", "--timeout", "0.5s")
    assert late.exit_code == 1, late.output
    assert "stream SHOP holds 3 messages after 0.5s, not 4" in late.stderr
