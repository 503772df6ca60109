"""Run `oncestream` in-process with typer's CliRunner (sync tests, a real nats-server)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from typer.testing import CliRunner, Result

from harness import publish_n
from oncestream import Connection, ConnectOptions, connect
from oncestream.cli import app

T = TypeVar("T")


def cli(url: str, *args: str, stdin: str | None = None) -> Result:
    """``oncestream ARGS --server URL`` in-process (stdin is never a terminal here)."""
    runner = CliRunner()
    return runner.invoke(
        app, [*args, "--server", url], input=stdin, env={"COLUMNS": "200"}, catch_exceptions=False
    )


def cli_json(url: str, *args: str) -> Any:
    result = cli(url, *args, "--json")
    assert result.exit_code == 0, result.output + result.stderr
    return json.loads(result.stdout)


def with_conn(url: str, func: Callable[[Connection], Awaitable[T]]) -> T:
    """Run ``func(conn)`` on a fresh connection (setup and checks in sync tests)."""

    async def main() -> T:
        async with await connect(ConnectOptions(servers=(url,))) as conn:
            return await func(conn)

    return asyncio.run(main())


def publish(url: str, subject: str, payloads: list[bytes], **headers: str) -> None:
    async def go(conn: Connection) -> None:
        await publish_n(
            conn, subject, len(payloads), data=payloads.__getitem__, headers=lambda _: headers
        )

    with_conn(url, go)
