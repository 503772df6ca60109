"""retrying's new arguments (issue 39, item 2) refuse values that make no retry loop.

``attempts`` counts calls of the operation and ``budget`` seconds of retrying: an
``attempts`` below 1 allows no call at all, and a budget that is not a number
(NaN) bounds nothing. Both are caller bugs and should be refused up front
instead of calling the operation anyway or spinning.
"""

from __future__ import annotations

import logging

import pytest

from oncestream._retry import retrying


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

    with caplog.at_level(logging.INFO, logger="oncestream.retry"):
        await retrying(op, budget=None, what="op", attempts=2, delay=lambda _n: 0.0)
    assert [r.getMessage() for r in caplog.records if "inf" in r.getMessage()] == []
