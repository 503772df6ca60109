"""A test that outlives its timeout by a minute ends its worker: the run then fails, named.

pytest-timeout runs with the ``signal`` method (pyproject.toml): at the timeout a
SIGALRM handler fails the test and the run goes on. A handler runs only when the
main thread gets back to Python, though: a call that never returns (a C library
that blocks with signals masked, a thread holding the GIL) would hold the worker,
and with it the whole run, for ever. faulthandler's watchdog is a C thread that
needs no GIL: ``BACKSTOP_GRACE`` seconds after a phase's timeout it prints every
thread's stack and ends the worker (``exit=True``). pytest-xdist, with
``--max-worker-restart=0``, then ends the run, failed, naming the test.

Re-armed for each phase (setup, call, teardown): pytest's faulthandler plugin
cancels the timer when a phase fails (``pytest_exception_interact``).
"""

from __future__ import annotations

import faulthandler
import os
import sys
from collections.abc import Generator

import pytest

__all__ = [
    "pytest_configure",
    "pytest_runtest_call",
    "pytest_runtest_setup",
    "pytest_runtest_teardown",
    "pytest_unconfigure",
]

#: Seconds past a test's timeout before its worker is ended (the environment may
#: lower it: the test of this backstop does).
BACKSTOP_GRACE = float(os.environ.get("ONCESTREAM_TEST_BACKSTOP_GRACE", "60"))


def _timeout(item: pytest.Item) -> float:
    """The test's pytest-timeout budget in seconds (0: none)."""
    marker = item.get_closest_marker("timeout")
    if marker is not None:
        value = marker.args[0] if marker.args else marker.kwargs.get("timeout")
        if value is not None:
            return float(value)
    given = item.config.getoption("timeout", None)
    return float(given if given is not None else item.config.getini("timeout") or 0)


#: stderr as it was at start-up: during a test fd 2 is captured, and what faulthandler
#: wrote there would go with the worker (as pytest's own faulthandler plugin does).
_STDERR = pytest.StashKey[int]()


def pytest_configure(config: pytest.Config) -> None:
    assert sys.__stderr__ is not None
    config.stash[_STDERR] = os.dup(sys.__stderr__.fileno())


def pytest_unconfigure(config: pytest.Config) -> None:
    if _STDERR in config.stash:
        os.close(config.stash[_STDERR])
        del config.stash[_STDERR]


def _guard(item: pytest.Item) -> Generator[None, object, object]:
    budget = _timeout(item)
    if budget <= 0 or _STDERR not in item.config.stash:
        return (yield)
    stderr = item.config.stash[_STDERR]
    faulthandler.dump_traceback_later(budget + BACKSTOP_GRACE, exit=True, file=stderr)
    try:
        return (yield)
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _guard(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _guard(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _guard(item))
