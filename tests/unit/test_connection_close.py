"""``Connection.close`` on a client whose socket is already going away."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from oncestream import Connection, ConnectOptions


class _Client:
    """Stands in for nats-py's client: ``close`` fails the way a killed server makes it."""

    def __init__(self, error: BaseException | None, wait: asyncio.Event | None = None) -> None:
        self.error, self.wait = error, wait
        self.is_closed = False
        self.closed = 0
        self.closing = asyncio.Event()

    async def flush(self, timeout: float) -> None:
        return None

    async def close(self) -> None:
        self.closed += 1
        self.closing.set()
        if self.wait is not None:
            await self.wait.wait()
        if self.error is not None:
            raise self.error


def _connection(client: _Client) -> Connection:
    return Connection(client, ConnectOptions())  # type: ignore[arg-type]


@pytest.mark.parametrize("error", [asyncio.CancelledError(), ConnectionResetError("reset")])
async def test_a_close_the_dying_socket_ends_badly_still_closes(error: BaseException) -> None:
    client = _Client(error)
    await _connection(client).close()
    assert client.closed == 1


async def test_a_real_cancellation_of_the_closing_task_propagates() -> None:
    client = _Client(None, wait=asyncio.Event())
    task: asyncio.Task[Any] = asyncio.create_task(_connection(client).close())
    await client.closing.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
