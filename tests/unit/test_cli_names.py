"""Every CLI flag taking a stream, consumer or subject name refuses a bad one at once (exit 2).

The server URL points at a closed port: a name that reached the server would
fail with a connection error (exit 1) after a timeout instead.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from oncestream.cli import app

DEAD = ["--server", "nats://127.0.0.1:1"]
LEDGER = ["--ledger", "sqlite:///x.db"]
PROCESS = ["process", "--handler", "tests.handlers:record", *LEDGER, *DEAD]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ([*PROCESS, "--stream", "a.b", "--consumer", "c"], "--stream: 'a.b' is not a valid stream"),
        ([*PROCESS, "--stream", "bad name", "--consumer", "c"], "'bad name' is not a valid"),
        ([*PROCESS, "--stream", "S", "--consumer", "c.d"], "--consumer: 'c.d' is not a valid"),
        (
            [*PROCESS, "--stream", "S", "--consumer", "c", "--dead-letter-stream", "D*"],
            "--dead-letter-stream: 'D*'",
        ),
        (
            [*PROCESS, "--stream", "S", "--consumer", "c", "--filter-subject", "a..b"],
            "--filter-subject: 'a..b' is not a valid subject",
        ),
        (["status", "a.b", *DEAD], "STREAM: 'a.b' is not a valid stream name"),
        (["status", "S", "bad name", *DEAD], "CONSUMER: 'bad name' is not a valid consumer"),
        (["audit", "--input", "a.b", "--output", "stream:OUT", *DEAD], "--input: 'a.b'"),
        (["audit", "--input", "IN", "--output", "stream:O/UT", *DEAD], "output stream: 'O/UT'"),
        (["audit", "--input", "IN", "--output", "sql:mysql://u:pw@h/d#t", *DEAD], "'mysql'"),
        (["audit", "--input", "IN", "--output", "sql:sqlite://x.db#t", *DEAD], "host part"),
        ([*PROCESS, "--stream", "S", "--consumer", "c", "--ledger", "sqlite://x.db"], "host part"),
    ],
)
def test_bad_names_exit_2_at_once(
    args: list[str], fragment: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    started = time.monotonic()
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert fragment in " ".join(result.output.split())
    assert "Traceback" not in result.output and "pw@" not in result.output
    assert time.monotonic() - started < 2.0
    assert not (tmp_path / "x.db").exists()  # nothing created for a refused command


@pytest.mark.parametrize(
    ("subject", "fragment"),
    [
        ("t2.{region", "placeholders look like"),
        ("t2.}", "placeholders look like"),
        ("", "not a valid subject to publish to"),
        ("t2..x", "not a valid subject to publish to"),
        ("t2.*", "not a valid subject to publish to"),
        ("t2 x", "not a valid subject to publish to"),
    ],
)
def test_publish_subject_templates_are_checked_before_reading(
    subject: str, fragment: str, tmp_path: Path
) -> None:
    data = tmp_path / "in.jsonl"
    data.write_text('{"id": 1, "region": "eu"}\n')
    args = ["publish", str(data), "--stream", "S", "--subject", subject, "--id-field", "id"]
    result = CliRunner().invoke(app, [*args, *DEAD])
    assert result.exit_code == 2, result.output
    assert fragment in " ".join(result.output.split()) and "Traceback" not in result.output


def test_publish_stream_name_is_checked(tmp_path: Path) -> None:
    data = tmp_path / "in.jsonl"
    data.write_text('{"id": 1}\n')
    args = ["publish", str(data), "--stream", "a.b", "--subject", "s", "--id-field", "id"]
    result = CliRunner().invoke(app, [*args, *DEAD])
    assert result.exit_code == 2 and "--stream: 'a.b'" in result.output


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["tail", "a.b"], "'a.b' is not a valid stream name"),
        (["tail", "S", "--subject", "a..b"], "'a..b' is not a valid subject"),
        (["stream", "info", "bad name"], "'bad name' is not a valid stream name"),
        (["stream", "purge", "S", "--subject", "a b"], "'a b' is not a valid subject"),
        (["consumer", "info", "S", "c.d"], "'c.d' is not a valid consumer name"),
        (["consumer", "add", "S", "c", "--filter", "x..y"], "'x..y' is not a valid subject"),
        (["dlq", "ls", "D*"], "'D*' is not a valid stream name"),
    ],
)
def test_admin_verbs_check_names_while_parsing(args: list[str], fragment: str) -> None:
    result = CliRunner().invoke(app, [*args, *DEAD])
    assert result.exit_code == 2, result.output
    assert fragment in " ".join(result.output.replace("│", " ").split())
