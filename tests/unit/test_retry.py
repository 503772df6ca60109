"""The retry policy's pure logic: what is transient, backoff, budget, attempts, on_retry."""

from __future__ import annotations

import time

import pytest

from oncestream._errors import (
    ConfigError,
    ConnectError,
    JetStreamError,
    NoResponders,
    OperationTimeout,
    PermissionDenied,
    StreamNotFound,
    jetstream_error,
)
from oncestream._retry import Unavailable, backoff, is_transient, retrying
from oncestream.spark._source_options import SourceOptions


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        (OperationTimeout("x"), True),
        (TimeoutError(), True),
        (Unavailable("no leader"), True),
        (NoResponders("503 while a consumer moves", transient=True), True),
        (NoResponders("no JetStream API answers"), False),
        (jetstream_error({"code": 503, "err_code": 10008, "description": "unavailable"}), True),
        (jetstream_error({"code": 500, "err_code": 10009, "description": "not leader"}), True),
        (jetstream_error({"code": 500, "err_code": 10118, "description": "offline"}), True),
        (jetstream_error({"code": 500, "err_code": 10119, "description": "offline"}), True),
        (jetstream_error({"code": 404, "err_code": 10059, "description": "not found"}), False),
        (jetstream_error({"code": 400, "err_code": 10003, "description": "bad request"}), False),
        (JetStreamError("no JetStream API answers", code=503), False),
        (StreamNotFound("gone", code=404, err_code=10059), False),
        (PermissionDenied("denied"), False),
        (ConnectError("down"), False),
        (ConfigError("bad"), False),
    ],
)
def test_is_transient(exc: BaseException, transient: bool) -> None:
    assert is_transient(exc) is transient


def test_backoff_grows_and_is_capped() -> None:
    delays = [backoff(i) for i in range(8)]
    assert delays[:4] == [0.1, 0.2, 0.4, 0.8]
    assert delays == sorted(delays) and max(delays) == 2.0
    assert backoff(10_000) == 2.0


async def test_transient_errors_are_retried_until_success() -> None:
    calls: list[int] = []
    seen: list[BaseException] = []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise OperationTimeout("timed out")
        return "ok"

    async def on_retry(exc: BaseException) -> None:
        seen.append(exc)

    assert await retrying(flaky, budget=5, what="op", on_retry=on_retry) == "ok"
    assert len(calls) == 3 and len(seen) == 2


async def test_permanent_errors_propagate_at_once() -> None:
    calls: list[int] = []

    async def missing() -> None:
        calls.append(1)
        raise StreamNotFound("stream not found", code=404, err_code=10059)

    with pytest.raises(StreamNotFound):
        await retrying(missing, budget=30, what="op")
    assert len(calls) == 1


async def test_spent_budget_raises_the_last_error_with_a_note() -> None:
    calls: list[int] = []

    async def down() -> None:
        calls.append(1)
        raise OperationTimeout(f"attempt {len(calls)} timed out")

    start = time.monotonic()
    with pytest.raises(OperationTimeout, match=r"attempt \d+ timed out") as caught:
        await retrying(down, budget=0.5, what="reading 'S'", budget_source="option 'retryTimeout'")
    assert 0.5 <= time.monotonic() - start < 1.5
    assert len(calls) >= 3
    assert any("retryTimeout" in note for note in caught.value.__notes__)
    # A zero budget means one attempt.
    calls.clear()
    with pytest.raises(OperationTimeout):
        await retrying(down, budget=0, what="op")
    assert len(calls) == 1


async def test_on_retry_may_turn_a_transient_error_permanent() -> None:
    async def no_responders() -> None:
        raise NoResponders("503", transient=True)

    async def probe(exc: BaseException) -> None:
        raise StreamNotFound("stream not found", code=404, err_code=10059) from exc

    with pytest.raises(StreamNotFound):
        await retrying(no_responders, budget=30, what="op", on_retry=probe)


async def test_attempts_predicate_and_delays_are_the_callers() -> None:
    """The form the Processor's loops use: no time budget, a count, its own errors and delays."""
    calls: list[int] = []
    waits: list[int] = []

    async def busy() -> None:
        calls.append(1)
        raise ValueError(f"busy {len(calls)}")

    def delay(attempt: int) -> float:
        waits.append(attempt)
        return 0.0

    with pytest.raises(ValueError, match="busy 3") as caught:
        await retrying(
            busy,
            budget=None,
            what="op",
            attempts=3,
            retry_if=lambda exc: isinstance(exc, ValueError),
            delay=delay,
        )
    assert len(calls) == 3 and waits == [0, 1]  # no wait after the last attempt
    assert not getattr(caught.value, "__notes__", [])  # a count, not a spent budget
    calls.clear()
    with pytest.raises(ValueError, match="busy 1"):  # the predicate says no: one attempt
        await retrying(busy, budget=None, what="op", retry_if=lambda exc: False)
    assert len(calls) == 1


def test_retry_timeout_option() -> None:
    base = {"servers": "nats://127.0.0.1:4222", "stream": "A"}
    assert SourceOptions.from_spark_options(base).retry_timeout == 30.0
    assert SourceOptions.from_spark_options({**base, "retryTimeout": "2m"}).retry_timeout == 120
    assert SourceOptions.from_spark_options({**base, "RETRYTIMEOUT": "0s"}).retry_timeout == 0
    with pytest.raises(ConfigError, match=r"retryTimeout.*duration.*'soon'"):
        SourceOptions.from_spark_options({**base, "retryTimeout": "soon"})
    with pytest.raises(ConfigError, match=r"retryTimeout.*0s.*1h.*7200"):
        SourceOptions.from_spark_options({**base, "retryTimeout": "2h"})
