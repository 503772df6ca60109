"""StopSignals: SIGTERM / SIGINT are a stop request, before, during and after the event loop."""

from __future__ import annotations

import asyncio
import os
import signal

from oncestream.cli._stopsignals import StopSignals


def test_a_signal_before_the_loop_is_honoured_once_it_runs() -> None:
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    called: list[str] = []

    async def main(stop: StopSignals) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # asyncio.run's own handler would cancel us
        await asyncio.sleep(0)
        stop.attach()
        try:
            await asyncio.wait_for(stop.wait(), 5)
            stop.on_stop(lambda: called.append("stop"))  # asked for already: called at once
            assert await stop.unless_stopped(asyncio.sleep(3600), close=_never) is None
        finally:
            stop.detach()
        os.kill(os.getpid(), signal.SIGINT)  # after the loop's handlers: still recorded

    with StopSignals() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.received == [signal.SIGTERM]
        asyncio.run(main(stop))
        os.kill(os.getpid(), signal.SIGTERM)  # after asyncio.run: recorded, not a kill
    assert stop.received == [signal.SIGTERM, signal.SIGINT, signal.SIGINT, signal.SIGTERM]
    assert called == ["stop"]
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_a_signal_stops_a_step_that_swallows_its_cancellation() -> None:
    closed: list[str] = []

    async def connect_like() -> str:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            pass  # what Python 3.11's asyncio.wait_for does when the result came meanwhile
        await asyncio.sleep(0)
        return "connection"

    async def close(value: str) -> None:
        closed.append(value)

    async def main(stop: StopSignals) -> str | None:
        stop.attach()
        try:
            asyncio.get_running_loop().call_later(0.05, os.kill, os.getpid(), signal.SIGINT)
            return await asyncio.wait_for(stop.unless_stopped(connect_like(), close=close), 5)
        finally:
            stop.detach()

    with StopSignals() as stop:
        assert asyncio.run(main(stop)) is None
    assert stop.received == [signal.SIGINT] and closed == ["connection"]


def test_a_second_signal_while_stopping_calls_back_once() -> None:
    calls: list[int] = []

    async def main(stop: StopSignals) -> None:
        stop.attach()
        try:
            stop.on_stop(lambda: calls.append(1))
            for _ in range(3):
                os.kill(os.getpid(), signal.SIGTERM)
                await asyncio.sleep(0.01)
            await asyncio.wait_for(stop.wait(), 5)
        finally:
            stop.detach()

    with StopSignals() as stop:
        asyncio.run(main(stop))
    assert calls == [1] and stop.received == [signal.SIGTERM] * 3


async def _never(value: object) -> None:
    raise AssertionError(f"nothing to close, got {value!r}")
