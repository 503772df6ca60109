"""A thin synchronous runner over the async code, for Spark executors and the CLI.

Spark calls data-source methods synchronously from worker threads; rather
than a second, blocking client, every sync entry point submits the same
coroutine to one private event loop running in a daemon thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["SyncRunner", "run_sync", "submit_sync"]

T = TypeVar("T")


class SyncRunner:
    """An event loop in a daemon thread that runs coroutines for sync callers.

    Example::

        runner = SyncRunner()
        info = runner.run(conn.stream_info("ORDERS"))
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="oncestream-loop", daemon=True
        )
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and return its result (exceptions propagate).

        Raises:
            TimeoutError: if ``timeout`` seconds pass first (the coroutine is cancelled).
        """
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start ``coro`` on the loop and return at once (``.result()`` waits for it)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self) -> None:
        """Stop the loop and join its thread."""
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=5)
        if not self.loop.is_running():
            self.loop.close()


_lock = threading.Lock()
_runner: SyncRunner | None = None
_runner_pid = 0


def default_runner() -> SyncRunner:
    """The process-wide runner (re-created after a fork, as in Spark's Python workers)."""
    global _runner, _runner_pid
    with _lock:
        if _runner is None or _runner_pid != os.getpid():
            _runner = SyncRunner()
            _runner_pid = os.getpid()
        return _runner


def run_sync(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run ``coro`` on the process-wide runner and return its result."""
    return default_runner().run(coro, timeout)


def submit_sync(coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Start ``coro`` on the process-wide runner; the caller goes on at once."""
    return default_runner().submit(coro)
