"""A ProducerSession whose appends are refused while its subject still ends where it
expects: a write to the subject in flight (its leader without quorum), likely the
session's own earlier attempt. The campaign's finding 30 reported that as "another
producer with the same id is writing"; it is a failed publish (retry after
``start()``), not another writer. The wait itself against a real cluster:
tests/chaos/test_cluster.py ``test_exclusive_append_waits_out_a_write_in_flight``.
A single server never refuses so, so the refusal is injected at the send.
"""

from __future__ import annotations

from typing import Any

import pytest

from oncestream import Connection, PublishFailed, WrongLastSequence
from oncestream.publish import ProducerSession, PublisherOptions


def _refused() -> WrongLastSequence:
    return WrongLastSequence("wrong last sequence (err_code=10164)", code=400, err_code=10164)


@pytest.mark.parametrize("batch_size", [1, 10], ids=["single", "atomic-batch"])
async def test_a_write_in_flight_past_the_patience_fails_the_publish_not_as_a_rival(
    conn: Connection, make_stream, monkeypatch: pytest.MonkeyPatch, batch_size: int
) -> None:
    await make_stream("S", ("s.>",), allow_atomic=True)
    options = PublisherOptions(ack_timeout=0.1, max_attempts=1)
    session = ProducerSession(
        conn, stream="S", subject_prefix="s.src", producer_id="p", options=options,
        batch_size=batch_size,
    )  # fmt: skip
    await session.start()
    refusals = 0

    async def refuse(*_: Any, **__: Any) -> Any:
        nonlocal refusals
        refusals += 1
        session._log.refused_in_flight = True  # as SubjectLog.append sets it
        raise _refused()

    if batch_size == 1:
        monkeypatch.setattr(session._log, "append", refuse)
    else:
        monkeypatch.setattr(session._batcher, "send", refuse)
    with pytest.raises(PublishFailed, match="still ended where this session expected"):
        await session.run([(1, b"one")])
    assert refusals == 1
    await session.close()
