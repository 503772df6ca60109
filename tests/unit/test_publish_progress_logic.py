"""The bookkeeping behind `oncestream publish` re-runs: confirmed lines and scan floors."""

from __future__ import annotations

import asyncio

import pytest

from oncestream import ConfigError
from oncestream.load._input import Record, RecordError, SubjectTemplate, record_id
from oncestream.load._progress import PublishProgress, progress_key
from oncestream.load._run import Confirmed
from oncestream.publish import PubAck


def _done(loop: asyncio.AbstractEventLoop, seq: int | None) -> asyncio.Future[PubAck]:
    future: asyncio.Future[PubAck] = loop.create_future()
    if seq is not None:
        future.set_result(PubAck("T", seq))
    return future


async def test_confirmed_advances_only_over_contiguous_acks() -> None:
    loop = asyncio.get_running_loop()
    confirmed = Confirmed(0, 100, 0, 0)
    first, second, third = _done(loop, 101), _done(loop, None), _done(loop, 103)
    confirmed.add(1, first, 100)
    confirmed.add(2, second, 100)
    confirmed.skip(3)  # a malformed line, skipped
    confirmed.add(4, third, 101)
    confirmed.advance(103)
    assert confirmed.line == 1 and confirmed.first_unconfirmed == 2
    assert confirmed.scan_from == 100  # line 2 was sent when 100 was the highest ack
    second.set_exception(RuntimeError("no ack"))
    confirmed.advance(103)
    assert confirmed.line == 1, "a failed line stays unconfirmed"


async def test_lines_an_earlier_run_may_have_sent_keep_its_floor() -> None:
    loop = asyncio.get_running_loop()
    # Resumed after line 10; the earlier run reserved up to line 50 with floor 40.
    confirmed = Confirmed(10, 500, 50, 40)
    assert confirmed.scan_from == 40
    confirmed.add(11, _done(loop, 501), 500)
    confirmed.advance(501)
    assert confirmed.line == 11 and confirmed.scan_from == 40
    confirmed.add(12, _done(loop, None), 501)
    assert confirmed.scan_from == 40
    beyond = Confirmed(60, 500, 50, 40)
    assert beyond.scan_from == 500


def test_subject_template_filter_and_errors() -> None:
    assert SubjectTemplate("orders.{region}").filter == "orders.*"
    assert SubjectTemplate("o.eu{n}.x").filter == "o.*.x"
    assert SubjectTemplate("plain.x").filter == "plain.x"
    for bad in ("t2.{region", "t2.}", "", "t2..x", "t2.", "t2.{a.b}", "t2.{}", "t2.{a!r}"):
        with pytest.raises(ConfigError, match="--subject"):
            SubjectTemplate(bad, "--subject")
        with pytest.raises(ConfigError, match=r"LoadOptions\.subject"):
            SubjectTemplate(bad)


def test_record_ids() -> None:
    assert record_id(Record(1, {"id": 17}, b""), "id") == "17"
    assert record_id(Record(1, {"id": "a"}, b""), "id") == "a"
    for value in (None, "", " ", True, 1.5, {"a": 1}, [1], "a\nb"):
        with pytest.raises(RecordError):
            record_id(Record(3, {"id": value}, b""), "id")
    assert len(record_id(Record(1, {"x": 1}, b""), None)) == 64


def test_progress_record_round_trip_and_key() -> None:
    record = PublishProgress(
        stream="T", stream_created="c", file="/f", sha256="h", size=1, subject="t.x",
        ids="content", line=3, scan_from=9, reserved=20, done=False, run="r",
    )  # fmt: skip
    assert PublishProgress.from_json(record.to_json()) == record
    assert progress_key("T", "/f") != progress_key("T", "/g") != progress_key("U", "/f")
    assert len(progress_key("T", "/f")) == 32


class _HeldLog:
    """A progress subject whose last record is at ``seq``: every append is refused
    (10164: another write to the subject in flight), and the subject stays there."""

    def __init__(self, seq: int, moved_to: int | None = None) -> None:
        self.last_seq = self.refused_expected = seq
        self.moved_to = moved_to

    async def append(self, data: bytes, *, msg_id: str) -> None:
        from oncestream import WrongLastSequence

        self.refused_expected = self.last_seq
        if self.moved_to is not None:
            self.last_seq = self.moved_to
        raise WrongLastSequence("wrong last sequence", code=400, err_code=10071)


def _progress(run: str) -> PublishProgress:
    return PublishProgress(
        stream="ORDERS", stream_created="2026-01-01T00:00:00Z", file="/data/orders.jsonl",
        sha256="0" * 64, size=100, subject="orders.x", ids="field:id", line=3, scan_from=3,
        reserved=13, done=False, run=run,
    )  # fmt: skip


async def test_a_progress_write_held_in_flight_is_a_failure_to_retry_not_a_rival() -> None:
    """Seed 52, trial 95: the run's own progress write sat uncommitted (the progress
    stream without a quorum) and every re-send was refused while the subject still
    ended at the record the run had read; it exited 2, "another publish ... wrote
    progress", with no other publish running."""
    from types import SimpleNamespace

    from oncestream import OncestreamError
    from oncestream.load._progress import ConcurrentRun, ProgressStore

    store = ProgressStore(SimpleNamespace(prefix="$JS.API", nc=None), "P", "k")  # type: ignore[arg-type]
    store._log = _HeldLog(7)  # type: ignore[assignment]
    with pytest.raises(OncestreamError, match="not confirmed: the server still holds") as held:
        await store.write(_progress("b"))
    assert not isinstance(held.value, (ConcurrentRun, ConfigError))  # exit 1, not 2

    async def rival() -> PublishProgress:
        return _progress("a")

    store._log = _HeldLog(7, moved_to=8)  # type: ignore[assignment]
    store.last = rival  # type: ignore[method-assign]
    with pytest.raises(ConcurrentRun, match="another publish"):
        await store.write(_progress("b"))
