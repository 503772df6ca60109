"""Cancelling an oncestream coroutine always cancels it.

On Python 3.11 ``asyncio.wait_for`` swallows a cancellation that arrives in the
same loop iteration as the awaited future's result (CPython gh-86296, fixed in
3.12): the caller's ``task.cancel()`` is lost and the task runs on. Found when a
cancelled ``ProducerSession.run`` (atomic batches) kept publishing to the end of
its input. oncestream therefore uses ``asyncio.timeout`` everywhere.
"""

from __future__ import annotations

import ast
import asyncio
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "oncestream"


def _wait_for_calls() -> list[str]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "wait_for"
                and isinstance(node.value, ast.Name)
                and node.value.id == "asyncio"
            ):
                found.append(f"{path.relative_to(SRC)}:{node.lineno}")
    return found


def test_no_module_uses_asyncio_wait_for() -> None:
    assert _wait_for_calls() == []


async def _race(use_wait_for: bool) -> bool:
    """True when a cancel racing with the result's arrival cancelled the waiter."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[int] = loop.create_future()

    async def waiter() -> int:
        if use_wait_for:
            return await asyncio.wait_for(future, 5.0)
        async with asyncio.timeout(5.0):
            return await future

    task = asyncio.create_task(waiter())
    await asyncio.sleep(0)  # the waiter now awaits the future
    future.set_result(1)  # the ack arrives ...
    task.cancel()  # ... in the same iteration as the caller's cancel
    try:
        await task
    except asyncio.CancelledError:
        return True
    return False


async def test_timeout_pattern_keeps_a_racing_cancellation() -> None:
    assert await _race(use_wait_for=False)


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="the race is fixed in 3.12's wait_for")
async def test_wait_for_loses_it_on_this_python() -> None:
    # Why the rule above exists; if this ever passes as "cancelled", the rule can go.
    assert not await _race(use_wait_for=True)
