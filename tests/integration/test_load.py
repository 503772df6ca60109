"""`oncestream.load.load`, the Python entry of the file loader, on a real server.

A file is loaded exactly once by one call, and a re-run adds nothing, also after
the stream's duplicate window (only the progress records protect then); an
interrupted load resumes with every record once; an iterable (or async
iterable) of records is loaded once and a re-run inside the window adds
nothing; a malformed record stops the load with a typed error carrying the
counts, or is skipped on request.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest

from oncestream import ConfigError, Connection, OncestreamError
from oncestream.load import LoadIncomplete, LoadObserver, LoadOptions, LoadStart, load
from oncestream.publish import PublisherOptions
from oncestream.read import read_stream

WINDOW = 1.5
#: Retry horizon 3 x 200 ms + 50 ms + 250 ms = 0.9 s: fits the short window.
FAST = PublisherOptions(ack_timeout=0.2, max_attempts=3)


def _write(path: Path, count: int, start: int = 0) -> Path:
    with path.open("a") as out:
        for i in range(start, start + count):
            record = {"id": f"r{i}", "region": ("eu", "us")[i % 2], "n": i}
            out.write(orjson.dumps(record).decode() + "\n")
    return path


async def _ids(conn: Connection, stream: str) -> Counter[str | None]:
    counts: Counter[str | None] = Counter()
    async for chunk in read_stream(conn, stream):
        counts.update(record.msg_id for record in chunk)
    return counts


def _once(counts: Counter[str | None], expected: list[str]) -> None:
    twice = {k: n for k, n in counts.items() if n > 1}
    assert not twice, f"stored more than once: {sorted(map(str, twice))[:5]}"
    assert set(counts) == set(expected)


async def test_a_file_loads_exactly_once_and_a_late_rerun_adds_nothing(
    conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    await make_stream("ORDERS", ("orders.>",), duplicate_window=WINDOW)
    path = _write(tmp_path / "orders.jsonl", 3000)
    options = LoadOptions(stream="ORDERS", subject="orders.{region}", id_field="id", publisher=FAST)

    first = await load(conn, str(path), options)

    assert (first.stored, first.duplicates, first.skipped) == (3000, 0, 0)
    assert first.complete and first.resumable and first.lines == 3000
    await asyncio.sleep(WINDOW + 0.5)  # past the window: only the progress record protects
    again = await load(conn, path, options)
    assert again.up_to_date and (again.stored, again.sent) == (0, 0)
    _write(path, 500, start=3000)  # appended: only the new lines are loaded
    more = await load(conn, path, options)
    assert (more.stored, more.duplicates, more.start_line) == (500, 0, 3000)
    _once(await _ids(conn, "ORDERS"), [f"r{i}" for i in range(3500)])


async def test_an_interrupted_load_resumes_with_every_record_once(
    conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    await make_stream("T", ("t.>",), duplicate_window=WINDOW)
    path = _write(tmp_path / "t.jsonl", 20_000)
    options = LoadOptions(stream="T", subject="t.x", id_field="id", publisher=FAST)
    stop = asyncio.Event()

    class StopEarly(LoadObserver):
        def line(self, line: int) -> None:
            if line >= 2048:
                stop.set()

    with pytest.raises(LoadIncomplete, match="stopped on request") as stopped:
        await load(conn, path, options, stop=stop, observer=StopEarly())
    first = stopped.value.result
    assert first.interrupted and not first.complete and first.resumable
    assert 0 < first.stored < 20_000
    await asyncio.sleep(WINDOW + 0.5)  # past the window: only the progress record protects
    rest = await load(conn, path, options)
    assert rest.complete and rest.resumed
    assert first.stored + rest.stored + rest.skipped == 20_000
    _once(await _ids(conn, "T"), [f"r{i}" for i in range(20_000)])


async def test_an_iterable_of_records_loads_once_and_a_rerun_adds_nothing(
    conn: Connection, make_stream
) -> None:  # type: ignore[no-untyped-def]
    await make_stream("REC", ("rec.>",))
    records = [{"id": f"k{i}", "region": ("eu", "us")[i % 2]} for i in range(1000)]
    options = LoadOptions(stream="REC", subject="rec.{region}", id_field="id")
    seen: list[LoadStart] = []

    class Watch(LoadObserver):
        def publishing(self, start: LoadStart) -> None:
            seen.append(start)

    first = await load(conn, records, options, observer=Watch())

    assert (first.stored, first.duplicates) == (1000, 0)
    assert first.complete and not first.resumable and first.lines is None
    assert seen and seen[0].lines is None and seen[0].start_line == 0

    async def again() -> AsyncIterator[dict[str, str]]:
        for record in records:
            yield record

    rerun = await load(conn, again(), options)  # inside the duplicate window
    assert (rerun.stored, rerun.duplicates) == (0, 1000)
    _once(await _ids(conn, "REC"), [r["id"] for r in records])


async def test_a_malformed_record_stops_with_the_counts_or_is_skipped(
    conn: Connection, make_stream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    await make_stream("BAD", ("bad.>",))
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "a"}\n{bad\n{"id": "c"}\n')
    seen: list[str] = []

    class Collect(LoadObserver):
        def malformed(self, text: str) -> None:
            seen.append(text)

    stop_at_it = LoadOptions(stream="BAD", subject="bad.x", id_field="id", resume=False)
    with pytest.raises(LoadIncomplete) as stopped:
        await load(conn, path, stop_at_it, observer=Collect())
    assert isinstance(stopped.value, OncestreamError)
    result = stopped.value.result
    assert (result.stored, result.malformed, result.stopped) == (1, 1, True)
    assert seen and seen[0].startswith("line 2: invalid JSON")

    skip_it = LoadOptions(stream="BAD", subject="bad.x", id_field="id", on_error="skip")
    skipped = await load(conn, path, skip_it)
    assert skipped.complete and skipped.malformed == 1
    assert (skipped.stored, skipped.duplicates) == (1, 1)  # "c" new, "a" de-duplicated
    assert set(await _ids(conn, "BAD")) == {"a", "c"}

    with pytest.raises(ConfigError, match=r"LoadOptions\.stream"):
        await load(conn, path, LoadOptions(stream="NOPE", subject="bad.x", id_field="id"))


async def test_a_nan_or_infinity_is_a_malformed_record_not_a_null(
    conn: Connection, make_stream
) -> None:  # type: ignore[no-untyped-def]
    """JSON has no NaN or infinities: orjson would store null, and content ids would collide."""
    await make_stream("NF", ("nf.>",))
    records = [
        {"id": "a", "t": 1.5},
        {"id": "b", "t": float("nan")},
        {"id": "c", "deep": {"xs": [1.0, float("inf")]}},
        {"id": "d", "t": None},
    ]
    skip = LoadOptions(stream="NF", subject="nf.x", id_from_content=True, on_error="skip")
    result = await load(conn, records, skip)
    assert (result.stored, result.malformed, result.duplicates) == (2, 2, 0)
    stored = [orjson.loads(m.data) for chunk in [c async for c in read_stream(conn, "NF")]
              for m in chunk]  # fmt: skip
    assert sorted(r["id"] for r in stored) == ["a", "d"]
    with pytest.raises(LoadIncomplete) as stopped:
        await load(conn, records[1:2], LoadOptions(stream="NF", subject="nf.x", id_field="id"))
    assert stopped.value.result.malformed == 1


@pytest.mark.parametrize(
    ("width", "new_lines"),
    [(64, 100), (100, 100), (64, 24_000)],
    ids=["cut-at-a-line-end", "cut-mid-line", "longer-lines-aligned"],
)
async def test_a_file_rewritten_in_place_while_loaded_names_the_rewrite(
    conn: Connection, make_stream, tmp_path: Path, width: int, new_lines: int
) -> None:  # type: ignore[no-untyped-def]
    """Issue 48: a file rewritten in place while it is read (truncated, then a shorter
    version written, as `generate > orders.jsonl` does) ended with "fix line 19,995":
    the line read across the rewrite was torn, not malformed in the file. Now the
    error names the rewrite, and a cut that lands on a line's end (64-byte lines: the
    reads are 8 KiB) is not reported complete (before: complete, with lines missing).
    Nothing is stored twice. A longer new version whose lines line up with the old
    ones reads cleanly (no torn line) but mixes both versions: it was reported
    complete; now it fails too, naming the rewrite."""
    await make_stream("RW", ("rw.>",))
    path = tmp_path / "orders.jsonl"
    count = 20_000

    def line(i: int, version: int) -> str:
        text = orjson.dumps({"id": f"r{i}", "v": version}).decode()
        return text + " " * (width - 1 - len(text)) + "\n"

    path.write_text("".join(line(i, 1) for i in range(count)))

    class Rewrite(LoadObserver):
        done = False

        def line(self, number: int) -> None:
            if number >= 2048 and not self.done:  # well past the first reads
                self.done = True
                with path.open("r+") as out:
                    out.truncate(0)
                    out.write("".join(line(i, 2) for i in range(new_lines)))

    options = LoadOptions(stream="RW", subject="rw.x", id_field="id")
    with pytest.raises(LoadIncomplete) as stopped:
        await load(conn, str(path), options, observer=Rewrite())
    result = stopped.value.result
    assert result.rewritten is not None and not result.complete, result
    assert f"{count * width:,} bytes at the start" in result.rewritten, result.rewritten
    assert "the file was rewritten while it was read" in str(stopped.value)
    if result.malformed:
        assert "torn by the rewrite" in str(stopped.value)
    else:
        assert "read partly from each version" in str(stopped.value)
    counts = await _ids(conn, "RW")
    _once(counts, [f"r{i}" for i in range(result.confirmed)])
    # The rewritten file is not what was published: a re-run is refused, naming --fresh
    # (before: its progress recorded the new file's lines as the ones published).
    with pytest.raises(ConfigError, match="changed since an earlier publish"):
        await load(conn, str(path), options)
