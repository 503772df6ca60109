"""The tests' restart of a query that met Spark's connect-back timeout, and nothing else."""

from __future__ import annotations

from typing import Any

import pytest

from tests import _spark_start

CONNECT_BACK = "[STREAM_FAILED] terminated with exception: Python worker failed to connect back."


class FakeQuery:
    """A started query: initializing until it ends with ``failure`` or moves on."""

    def __init__(self, failure: Exception | None, *, initializing: bool = False) -> None:
        self.failure = failure
        self.message = "Initializing sources" if initializing else "Waiting for data to arrive"

    def awaitTermination(self, timeout: float) -> bool:
        if self.failure is not None:
            raise self.failure
        return False

    def exception(self) -> Exception | None:
        return self.failure

    @property
    def status(self) -> dict[str, Any]:
        return {"message": self.message}


class FakeWriter:
    """A writer whose starts go, in order, as ``outcomes`` say."""

    def __init__(self, outcomes: list[Exception | FakeQuery]) -> None:
        self.outcomes = outcomes
        self.starts = 0

    def start(self, *args: Any, **kwargs: Any) -> FakeQuery:
        self.starts += 1
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    toTable = start


@pytest.fixture
def writer_type() -> type[FakeWriter]:
    class Writer(FakeWriter):
        pass

    _spark_start._patch(Writer)
    return Writer


def test_a_start_refused_on_connect_back_is_started_again(writer_type: type[FakeWriter]) -> None:
    ok = FakeQuery(None)
    writer = writer_type([RuntimeError(CONNECT_BACK), ok])
    assert writer.start() is ok
    assert writer.starts == 2


def test_a_query_that_failed_initializing_on_connect_back_is_started_again(
    writer_type: type[FakeWriter],
) -> None:
    ok = FakeQuery(None)
    writer = writer_type([FakeQuery(RuntimeError(CONNECT_BACK), initializing=True), ok])
    assert writer.toTable("t") is ok
    assert writer.starts == 2


def test_other_failures_reach_the_test_unchanged(writer_type: type[FakeWriter]) -> None:
    refused = ValueError("bad option 'maxMessagesPerTrigger'")
    writer = writer_type([refused])
    with pytest.raises(ValueError, match="maxMessagesPerTrigger"):
        writer.start()
    failed = FakeQuery(RuntimeError("StreamNotFound"), initializing=True)
    writer = writer_type([failed])
    assert writer.start() is failed
    assert writer.starts == 1


def test_the_last_attempt_s_failure_reaches_the_test(writer_type: type[FakeWriter]) -> None:
    writer = writer_type([RuntimeError(CONNECT_BACK)] * _spark_start.ATTEMPTS)
    with pytest.raises(RuntimeError, match="connect back"):
        writer.start()
    assert writer.starts == _spark_start.ATTEMPTS


def test_installing_twice_wraps_once(writer_type: type[FakeWriter]) -> None:
    wrapped = writer_type.start
    _spark_start._patch(writer_type)
    assert writer_type.start is wrapped
