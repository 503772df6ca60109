"""SIGTERM and Ctrl-C as a stop request for a long-running command, from its first moment.

``oncestream process`` used to install its handlers only once it had connected. Before
that a signal did what the process had inherited, and both ways lost or mishandled it:

- SIGINT ignored (a background job of a non-interactive shell or script: the shell sets
  SIGINT to ignored, and that survives exec): the signal was discarded, the process ran
  on with its own handler installed a moment later, and nothing stopped it.
- SIGINT as usual: ``asyncio.run`` turned it into a cancellation of the main task, and
  that cancellation could be lost on the way: Python 3.11's ``asyncio.wait_for`` returns
  the result instead of raising when what it waited for finished in the same loop turn
  (oncestream's TLS-guard probe on the first connect does every time), and nats-py's
  flush swallows ``CancelledError``; otherwise it ended as a ``KeyboardInterrupt`` (130).
- SIGTERM killed the process (-15) instead of stopping it.

:class:`StopSignals` never cancels anything. From the moment the command's function
runs (before ``asyncio.run``) until it returns, SIGTERM and SIGINT only record that a
stop was asked for (an inherited "ignore SIGINT" is overridden, as the command's later
handlers always did); the command checks :attr:`requested` between its start-up steps,
races the steps that wait (connecting) against :meth:`wait`, and hands the request to
its worker once that exists (:meth:`on_stop`). A second signal while stopping is
absorbed: the stop in progress finishes and the command exits as documented. Before the
command runs (Python importing oncestream) nothing of it can see a signal.

Example::

    with StopSignals() as stop:
        asyncio.run(main(stop))   # main calls stop.attach() first
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable, Coroutine
from types import FrameType, TracebackType
from typing import Any, TypeVar

__all__ = ["StopSignals"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The signals that ask a command to stop.
SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: Seconds before a start-up step that ignored its cancellation is cancelled again.
RECANCEL_EVERY = 0.2


class StopSignals:
    """Records SIGTERM / SIGINT as a stop request while the ``with`` block runs.

    Outside the event loop a plain handler records the signal; inside it
    (:meth:`attach` to :meth:`detach`) the loop's own handlers do, so that a
    signal wakes the loop at once. Not in the main thread (an in-process test
    runner), signals are left alone and only :meth:`request` stops.
    """

    def __init__(self) -> None:
        #: The signals received so far, in order.
        self.received: list[int] = []
        self._previous: dict[int, Any] = {}
        self._callbacks: list[Callable[[], None]] = []
        self._event: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def requested(self) -> bool:
        """Whether a stop was asked for (a signal, or :meth:`request`)."""
        return bool(self.received)

    def __enter__(self) -> StopSignals:
        for sig in SIGNALS:
            try:
                self._previous[sig] = signal.signal(sig, self._record)
            except ValueError:  # not the main thread: the caller's signals stay its own
                break
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, signal.SIG_DFL if previous is None else previous)
        self._previous.clear()

    def _record(self, signum: int, _frame: FrameType | None) -> None:
        # Outside the loop: only note it (a handler runs between any two bytecodes of
        # the main thread; it must not take a lock or touch the loop).
        self.received.append(signum)

    def attach(self) -> None:
        """Hand the signals to the running loop (call first in the command's coroutine)."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._event = asyncio.Event()
        if self._previous:
            for sig in SIGNALS:
                loop.add_signal_handler(sig, self.request, sig)
        if self.received:
            self._fire()

    def detach(self) -> None:
        """Back to recording outside the loop (call last in the command's coroutine).

        Whatever runs after the coroutine (``asyncio.run`` closing the loop, the
        exit) still treats a signal as a stop already under way.
        """
        loop, self._loop = self._loop, None
        if loop is None or not self._previous:
            return
        for sig in SIGNALS:
            loop.remove_signal_handler(sig)
            signal.signal(sig, self._record)

    def request(self, signum: int = 0) -> None:
        """Ask for a stop (what a signal does; ``signum`` 0: asked for by code)."""
        first = not self.received
        self.received.append(signum)
        if first:
            self._fire()
        elif signum:
            log.info(
                "%s again: already stopping (the in-flight batch is finished and acked first)",
                signal.Signals(signum).name,
            )

    def on_stop(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` on a stop request, at once if one was made already."""
        self._callbacks.append(callback)
        if self.requested:
            callback()

    async def wait(self) -> None:
        """Return once a stop was asked for."""
        assert self._event is not None, "attach() first"
        await self._event.wait()

    async def unless_stopped(
        self, step: Coroutine[Any, Any, T], *, close: Callable[[T], Awaitable[object]]
    ) -> T | None:
        """``await step``, or None as soon as a stop is asked for (then ``step`` is cancelled).

        A step that finishes anyway after its cancellation (nats-py's connect may
        swallow one) is waited for and its result handed to ``close``. Asked for
        already: ``step`` is not started.
        """
        if self.requested:
            step.close()
            return None
        task = asyncio.ensure_future(step)
        stopped = asyncio.ensure_future(self.wait())
        try:
            await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            task.cancel()
            raise
        finally:
            stopped.cancel()
        if task.done():
            return task.result()
        # Cancelled again until it ends: a step may swallow one cancellation (see above).
        while not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=RECANCEL_EVERY)
        if not task.cancelled() and task.exception() is None:
            await close(task.result())
        return None

    def _fire(self) -> None:
        if self._event is not None:
            self._event.set()
        for callback in self._callbacks:
            callback()
