"""A ledger's own thread: calls in order, a cancelled caller waits, no close under a call."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from oncestream.ledger import Ledger, LedgerTx


class _Connection:
    def __init__(self, ledger: _Probe) -> None:
        self.ledger = ledger

    def close(self) -> None:
        ledger = self.ledger
        ledger.closed_while_running = ledger.closed_while_running or ledger.running > 0
        ledger.events.append("close")


class _Probe(Ledger):
    """A ledger without a database: records what ran where, and every close."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.running = 0
        self.interrupted = threading.Event()
        self.closed_while_running = False

    def open(self) -> None:
        self._con = _Connection(self)

    def interrupt(self) -> None:
        self.interrupted.set()

    def begin(self) -> LedgerTx:
        raise NotImplementedError

    def _fetchone(self, sql: str, params: Sequence[Any]) -> Any:
        raise NotImplementedError

    def prune(self, stream: str, up_to_seq: int, limit: int = 10_000, **kw: Any) -> int:
        return 0

    def work(self, name: str, until: Callable[[], bool] = lambda: True) -> str:
        self.running += 1
        try:
            deadline = time.monotonic() + 5
            while not until() and time.monotonic() < deadline:
                time.sleep(0.001)  # a statement the interrupt ends
            self.events.append(name)
            return threading.current_thread().name
        finally:
            self.running -= 1


async def test_calls_run_in_order_on_one_thread_of_the_ledger() -> None:
    ledger = _Probe()
    names = await asyncio.gather(*(ledger.call(ledger.work, f"c{i}") for i in range(5)))
    assert ledger.events == [f"c{i}" for i in range(5)]
    assert len(set(names)) == 1 and names[0] != threading.current_thread().name
    ledger.close()


async def test_a_cancelled_caller_interrupts_its_call_and_waits_for_it_before_going_on() -> None:
    ledger = _Probe()
    ledger.open()
    started = asyncio.Event()
    loop = asyncio.get_running_loop()

    def until() -> bool:
        loop.call_soon_threadsafe(started.set)
        return ledger.interrupted.is_set()

    task = asyncio.create_task(ledger.call(ledger.work, "long", until))
    await started.wait()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    # The call was interrupted and had returned before the cancellation went on.
    assert ledger.events == ["long"] and ledger.running == 0
    await ledger.call(ledger.close)
    assert not ledger.closed_while_running


async def test_undo_runs_when_a_cancelled_call_had_succeeded() -> None:
    ledger = _Probe()
    started = asyncio.Event()
    loop = asyncio.get_running_loop()

    def until() -> bool:
        loop.call_soon_threadsafe(started.set)
        return ledger.interrupted.is_set()

    task = asyncio.create_task(
        ledger.call(ledger.work, "begin", until, undo=lambda _: ledger.events.append("undo"))
    )
    await started.wait()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert ledger.events == ["begin", "undo"]
    ledger.close()


async def test_close_from_another_thread_waits_for_the_calls_handed_over_before() -> None:
    ledger = _Probe()
    ledger.open()
    release = threading.Event()
    task = asyncio.create_task(ledger.call(ledger.work, "slow", release.is_set))
    await asyncio.sleep(0)  # the call is handed to the ledger's thread
    closer = threading.Thread(target=ledger.close)
    closer.start()
    release.set()
    await task
    closer.join(10)
    assert ledger.events == ["slow", "close"] and not ledger.closed_while_running
    # A call after close() runs on a new thread.
    await ledger.call(ledger.work, "after")
    ledger.close()
