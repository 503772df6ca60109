"""FastBatch's runs of frames (publish_columns): confirmed as counts, taken one by one as Pendings.

Pure logic; the same paths against a real server are in
tests/integration/test_publish_columns.py and tests/chaos/test_publish_faults.py.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from oncestream.publish._columns import check_columns, frames
from oncestream.publish._fast_ingest import FastBatch, fast_template, op_of
from oncestream.publish._frames import AckTally, Pending, id_only_frame


def _frame(seq: int, msg_id: str, subject: str = "s.x") -> bytes:
    template = fast_template(id_only_frame("S")[0])
    id_bytes = msg_id.encode()
    hdr = id_only_frame("S")[1] + len(id_bytes)
    return template % (subject.encode(), b"P.", seq, op_of(seq), hdr, hdr + 1, id_bytes, b"d")


def _batch() -> tuple[FastBatch, AckTally, AckTally, Pending, Pending]:
    """Pending at 1, run A at 2..5, Pending at 6, run B at 7..9."""
    batch = FastBatch(b"_INBOX.x.")
    a, b = AckTally(), AckTally()
    one = Pending(_frame(1, "p1"), a, "p1", "s.x", 10.0)
    six = Pending(_frame(6, "p6"), a, "p6", "s.x", 11.0)
    batch.entries[1] = one
    batch.add_frames(2, [_frame(s, f"a{s}") for s in range(2, 6)], a, 20.0)
    batch.entries[6] = six
    batch.add_frames(7, [_frame(s, f"b{s}", "t.y") for s in range(7, 10)], b, 30.0)
    return batch, a, b, one, six


def test_confirmed_runs_are_counted_and_pendings_returned() -> None:
    batch, a, b, one, six = _batch()
    taken = batch.take(3)  # a single message of run A went elsewhere (a gap, an error)
    assert taken is not None and (taken.msg_id, taken.subject) == ("a3", "s.x")
    assert taken.future is a and taken.deadline == 20.0 and taken.cmd == _frame(3, "a3")
    pendings, counted = batch.take_upto(8)
    assert pendings == [one, six]
    assert counted == [(a, 3, 20.0), (b, 2, 30.0)]  # seqs 2, 4, 5 and 7, 8
    assert list(batch.entries) == [9] and batch.oldest_deadline() == 30.0
    assert batch.take_upto(8) == ([], [])  # nothing twice
    pendings, counted = batch.take_upto(9)
    assert (pendings, counted) == ([], [(b, 1, 30.0)])
    assert not batch.entries and not batch.runs and batch.oldest_deadline() is None


def test_taken_one_by_one_every_entry_becomes_a_pending_in_send_order() -> None:
    batch, _a, b, one, _six = _batch()
    lost = batch.take_range(4, 8)
    assert [p.msg_id for p in lost] == ["a4", "a5", "p6", "b7"]
    refused = batch.take_subject("t.y")
    assert [p.msg_id for p in refused] == ["b8", "b9"] and refused[0].future is b
    rest = batch.take_all()
    assert [p.msg_id for p in rest] == ["p1", "a2", "a3"] and rest[0] is one
    assert not batch.entries and not batch.runs


def test_a_partly_confirmed_run_keeps_the_rest() -> None:
    batch, a, _b, _one, _six = _batch()
    assert batch.take_upto(3) == ([_one], [(a, 2, 20.0)])
    assert sorted(batch.entries) == [4, 5, 6, 7, 8, 9]
    pending = batch.take(5)
    assert pending is not None and pending.future is a and pending.deadline == 20.0


@pytest.mark.parametrize("stream", ["S", "100%done", "S%d%b%%"])
def test_arrow_frames_are_the_bytes_the_python_loop_formats(stream: str) -> None:
    """Also for a stream name with percent signs (escaped in the frame template)."""
    full, bare, shrink = (
        fast_template(id_only_frame(stream)[0]),
        fast_template(id_only_frame(None)[0]),
        id_only_frame(stream)[1] - id_only_frame(None)[1],
    )
    fixed = id_only_frame(stream)[1]
    ids = ["a", "b%d", "é-long-id-3", "x" * 40]
    datas = [b"", b"%b%%", b"d" * 300, b"\r\n"]
    columns = check_columns(
        pa.array(datas), pa.array(ids), fixed=fixed, max_payload=1 << 20, subject="s.x"
    )
    for template, cut in ((full, 0), (bare, shrink)):
        for first in (1, 41):  # 1: the batch's start message goes first
            got = frames(
                template,
                cut,
                subject=b"s.x",
                prefix=b"_INBOX.x.F.id.500.ok.",
                first_seq=first,
                columns=columns,
                start=1,
                count=3,
            )
            want = []
            for i, seq in zip(range(1, 4), range(first, first + 3), strict=True):
                id_bytes = ids[i].encode()
                hdr = fixed + len(id_bytes) - cut
                want.append(
                    template
                    % (
                        b"s.x",
                        b"_INBOX.x.F.id.500.ok.",
                        seq,
                        op_of(seq),
                        hdr,
                        hdr + len(datas[i]),
                        id_bytes,
                        datas[i],
                    )
                )
            assert got == want
