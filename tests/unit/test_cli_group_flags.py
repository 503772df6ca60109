"""Flags of a group member given where they would be ignored are refused at once (exit 2).

The server URL points at a closed port: a command that got past validation would
fail with a connection error (exit 1) after a timeout instead.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from oncestream.cli import app

DEAD = ["--server", "nats://127.0.0.1:1"]
PROCESS = [
    "process", "--handler", "tests.handlers:record", "--stream", "S", "--consumer", "c", *DEAD,
]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (
            [*PROCESS, "--ledger", "sqlite:///x.db", "--member-ttl", "5s"],
            "--member-ttl 5s applies only with --member",
        ),
        (
            [*PROCESS, "--ledger", "sqlite:///x.db", "--static-member", "0/2", "--member-ttl", "5"],
            "--member-ttl 5 applies only with --member",
        ),
        (
            [*PROCESS, "--ledger", "sqlite:///x-{partition}.db"],
            "{partition} is replaced by each partition's number only with --member",
        ),
        (
            [*PROCESS, "--ledger", "postgresql://u:hunter2@127.0.0.1:1/d{partition}"],
            "--ledger postgresql://u:***@127.0.0.1:1/d{partition}: {partition}",
        ),
        (
            ["stream", "add", "S", "--subjects", "s.*", "--partitions", "0", *DEAD],
            "--partitions must be a whole number from 1 to 1024, got 0",
        ),
    ],
)
def test_flags_that_would_be_ignored_exit_2_at_once(
    args: list[str], fragment: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    started = time.monotonic()
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert fragment in " ".join(result.output.split())
    assert "Traceback" not in result.output and "hunter2" not in result.output
    assert time.monotonic() - started < 2.0
    assert list(tmp_path.iterdir()) == []  # nothing created for a refused command
