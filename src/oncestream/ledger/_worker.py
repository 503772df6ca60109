"""The one thread a ledger's blocking calls run on, so that closing the ledger waits for them.

An ``asyncio.to_thread`` await that is cancelled does not stop its thread: the
thread goes on inside sqlite3 or psycopg while the caller, told it was cancelled,
goes on to close the connection under it (a segmentation fault in the SQLite
library, seen when a Processor stopped while a background ledger call ran). So
every call of a ledger that runs off the event loop goes through the ledger's own
worker: one thread, calls one at a time in the order given, and

- a caller cancelled while its call runs asks the database to interrupt it
  (:meth:`Ledger.interrupt`: sqlite3's ``interrupt()``, a PostgreSQL cancel
  request) and then waits for the thread to return before the cancellation goes
  on (:meth:`Ledger.call`);
- :meth:`Ledger.close` closes the connection only after every call handed to
  the worker before it has returned (on the worker, or after draining it).
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["LedgerWorker"]


class LedgerWorker:
    """A single thread running a ledger's calls in order (started on first use).

    Example::

        worker = LedgerWorker()
        token = object()
        future = worker.submit(token, ledger.prune, "ORDERS", 100)
        future.result()
        worker.stop(wait=True)
    """

    def __init__(self) -> None:
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="oncestream-ledger"
        )
        #: Held while the running call changes and while one is interrupted: an
        #: interrupt reaches the call it was meant for, never the next one.
        self._guard = threading.Lock()
        self._running: object | None = None
        self._thread_id = 0

    def submit(
        self, token: object, func: Callable[..., Any], *args: Any
    ) -> concurrent.futures.Future[Any]:
        """Queue ``func(*args)``; ``token`` names the call for :meth:`interrupt`.

        Raises:
            RuntimeError: the worker was stopped.
        """
        return self._executor.submit(self._run, token, func, args)

    def _run(self, token: object, func: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        with self._guard:
            self._running = token
            self._thread_id = threading.get_ident()
        try:
            return func(*args)
        finally:
            with self._guard:
                self._running = None

    def interrupt(self, token: object, how: Callable[[], None]) -> bool:
        """Call ``how()`` if the call named ``token`` is running now; True if it was."""
        with self._guard:
            if self._running is not token:
                return False
            how()
            return True

    def on_worker_thread(self) -> bool:
        """True when called by the worker's own thread (from inside one of its calls)."""
        return self._thread_id == threading.get_ident()

    def stop(self, *, wait: bool) -> None:
        """Run what is queued, then end the thread; ``wait``: until it has ended."""
        self._executor.shutdown(wait=wait)
