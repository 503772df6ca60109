"""Fixtures of the chaos tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.chaos.test_group_chaos import Member
from tests.chaos.test_standby_takeover import Worker


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    """The standby tests' worker processes: each one started is stopped at the end (SIGTERM),
    and must then exit 0 (-9 if the test SIGKILLed it), never crash."""
    started: list[Worker] = []
    yield started
    for worker in started:
        worker.stop()
    problems = [p for p in (w.exit_problem() for w in started) if p]
    assert not problems, problems


@pytest.fixture
def members() -> Iterator[list[Member]]:
    """The group tests' member processes: each one started is stopped at the end."""
    started: list[Member] = []
    yield started
    for member in started:
        member.stop()
