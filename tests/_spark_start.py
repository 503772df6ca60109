"""Spark's fixed 10 s for a driver-side Python process to connect back, met in tests.

Spark starts two driver-side Python processes per streaming query from scratch, not
through its forking daemon (``PythonWorkerFactory.createSimpleWorker``): the runner
of a Python streaming source (classic and Connect) and Connect's foreachBatch worker.
Each gets a constant 10 s to start Python, import PySpark and connect back, which no
setting changes (Spark 4.0-4.3). On CI's two cores, with two test lanes of two
workers, each with a JVM, the import has taken longer: the query then fails before
it reads anything, with "Python worker failed to connect back", in INITIALIZING for
the source runner and in ``start()`` for foreachBatch (four times in the two full
``make test`` runs of 2026-11-29, one of them on CI).

Nothing was read, written or committed by then, so starting the query again from
its checkpoint is what a user does and what our restart tests show to be exactly
once. :func:`install` makes ``DataStreamWriter.start`` and ``toTable`` (classic and
Connect) do that, up to :data:`ATTEMPTS` times, for this failure only and only while
the query is initializing; every other failure reaches the test unchanged, and the
tests' assertions (each id once, the error raised) are not touched. Each retry is
logged on stderr. The pytest session installs it (tests/conftest.py); a job that
runs its own driver calls :func:`install` first.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["ATTEMPTS", "install", "is_connect_back"]

#: Query starts per call before the failure reaches the test.
ATTEMPTS = 3

#: Seconds a start waits for its query to finish initializing (the source runner's
#: start is inside it); a query still initializing then is returned as it is.
INITIALIZING_DEADLINE = 120.0

_MARKERS = (
    "Python worker failed to connect back",
    "Timed out while waiting for the Python worker to connect back",
)
_INITIALIZING = "Initializing sources"


def is_connect_back(exc: BaseException | None) -> bool:
    """Whether ``exc`` is Spark's connect-back timeout for a driver-side Python process."""
    return exc is not None and any(marker in str(exc) for marker in _MARKERS)


def _initialization_failure(query: Any) -> BaseException | None:
    """The exception ``query`` ended with while initializing; None once past it."""
    deadline = time.monotonic() + INITIALIZING_DEADLINE
    while time.monotonic() < deadline:
        try:
            if query.awaitTermination(0.1):
                ended: BaseException | None = query.exception()
                return ended
        except Exception as exc:  # awaitTermination raises the failure the query ended with
            return exc
        if query.status.get("message") != _INITIALIZING:
            return None
    return None


def _retrying(start: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(start)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        for attempt in range(1, ATTEMPTS + 1):
            try:
                query = start(self, *args, **kwargs)
            except Exception as exc:
                if attempt == ATTEMPTS or not is_connect_back(exc):
                    raise
                _log(attempt, exc)
                continue
            failure = _initialization_failure(query)
            if attempt == ATTEMPTS or not is_connect_back(failure):
                return query
            _log(attempt, failure)
        raise AssertionError("unreachable: the last attempt returns or raises")

    wrapper.__dict__["_connect_back_retry"] = True
    return wrapper


def _log(attempt: int, exc: BaseException | None) -> None:
    first = str(exc).splitlines()[0] if exc is not None else ""
    print(
        f"[tests] query start {attempt}/{ATTEMPTS} failed on Spark's 10 s connect-back"
        f" ({first[:160]}); starting it again",
        file=sys.stderr,
        flush=True,
    )


def _patch(writer: type) -> None:
    for name in ("start", "toTable"):
        method = getattr(writer, name)
        if not getattr(method, "_connect_back_retry", False):
            setattr(writer, name, _retrying(method))


def install() -> None:
    """Retry query starts that meet Spark's connect-back timeout (classic and Connect)."""
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    _patch(DataStreamWriter)
    try:
        from pyspark.sql.connect.streaming.readwriter import DataStreamWriter as Remote
    except ImportError:  # a venv without Connect's dependencies has no Connect writer
        return
    except SystemExit:
        # pyspark-client 4.2 imported in a process whose __main__ has neither __file__
        # nor __spec__ (an xdist worker) runs its doctest set-up and exits looking for a
        # SPARK_HOME (tests/thin_client/_versions.py): there the Connect sessions run in
        # job processes, which install this themselves.
        return
    _patch(Remote)
