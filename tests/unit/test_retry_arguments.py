"""retrying's new arguments (issue 39, item 2) refuse values that make no retry loop.

``attempts`` counts calls of the operation and ``budget`` seconds of retrying: an
``attempts`` below 1 allows no call at all, and a budget that is not a number
(NaN) bounds nothing. Both are caller bugs and should be refused up front
instead of calling the operation anyway or spinning.
"""

from __future__ import annotations

import logging

import pytest

from oncestream import ConnectOptions
from oncestream._errors import ConfigError, OperationTimeout
from oncestream._retry import retrying
from oncestream.publish import SubjectLog
from oncestream.read import RangeReader


class Spun(Exception):
    """The test's own bound: the loop went on far past any sane budget."""


@pytest.mark.parametrize("attempts", [0, -1])
async def test_attempts_below_one_are_refused_without_calling(attempts: int) -> None:
    calls = 0

    async def op() -> str:
        nonlocal calls
        calls += 1
        return "sent"

    with pytest.raises(ValueError, match="attempts"):
        await retrying(op, budget=None, what="op", attempts=attempts)
    assert calls == 0


async def test_a_nan_budget_is_refused() -> None:
    calls = 0

    async def op() -> None:
        nonlocal calls
        calls += 1
        if calls > 50:
            raise Spun(f"{calls} calls with a NaN budget")
        raise TimeoutError("transient")

    with pytest.raises(ValueError, match="budget"):
        await retrying(op, budget=float("nan"), what="op", delay=lambda _n: 0.0)
    assert calls <= 1


async def test_no_budget_is_not_logged_as_infinite_seconds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls = 0

    async def op() -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise TimeoutError("transient")

    with caplog.at_level(logging.INFO, logger="oncestream._retry"):
        await retrying(op, budget=None, what="op", attempts=2, delay=lambda _n: 0.0)
    assert [r.getMessage() for r in caplog.records if "inf" in r.getMessage()] == []


class _TimesOut:
    """A connection whose every request times out (a stream without a leader, for ever)."""

    def __init__(self) -> None:
        self.calls = 0
        self.options = ConnectOptions()

    async def request(self, *_args: object, **_kwargs: object) -> None:
        self.calls += 1
        if self.calls > 5:
            raise Spun(f"{self.calls} requests and still retrying")
        raise OperationTimeout("request timed out")

    api = request


@pytest.mark.parametrize("budget", [None, float("nan"), -1.0])
def test_subject_log_refuses_a_retry_budget_that_is_not_seconds(budget: float | None) -> None:
    """Before issue 39 ``retry_budget=None`` failed at first use with a TypeError; now
    ``retrying`` reads None as "no time limit" and ``last()`` retries a timeout for ever
    (a NaN budget spins with no delay). The public option should be checked up front."""
    with pytest.raises(ConfigError, match="retry_budget"):
        SubjectLog(_TimesOut(), "S", "s.a", retry_budget=budget)  # type: ignore[arg-type]


async def test_subject_log_with_no_budget_does_not_retry_for_ever() -> None:
    conn = _TimesOut()
    try:
        log = SubjectLog(conn, "S", "s.a", retry_budget=None)  # type: ignore[arg-type]
    except ConfigError:
        return  # refused up front: what the test above asks for
    with pytest.raises((OperationTimeout, TypeError, ConfigError)):
        await log.last()
    assert conn.calls <= 1


@pytest.mark.parametrize("budget", [None, float("nan"), -1.0])
def test_range_reader_refuses_a_retry_timeout_that_is_not_seconds(budget: float | None) -> None:
    with pytest.raises(ConfigError, match="retry_timeout"):
        RangeReader(_TimesOut(), "S", 1, 10, direct=False, retry_timeout=budget)  # type: ignore[arg-type]
