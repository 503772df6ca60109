"""`oncestream publish` across re-runs, outages and Ctrl-C: every record stored exactly once.

The CLI runs as a subprocess (so it can be interrupted and outlive a server
crash); streams use a short duplicate window so the tests wait past it in
seconds.
"""

from __future__ import annotations

import asyncio
import collections
import re
import shutil
import signal
import sys
import time
from asyncio.subprocess import Process
from pathlib import Path

import orjson

from oncestream import ConnectOptions, connect
from oncestream.server import NatsServer
from oncestream.streams import StreamSpec, ensure_stream
from tests.integration.test_publisher import read_back

WINDOW = 1.5
# Retry horizon 3 x 200ms + 50ms + 250ms = 0.9s fits the window; the connect timeout is 5s.
FAST = ["--ack-timeout", "200ms", "--max-attempts", "3"]
GIVE_UP_BOUND = 0.9 + 5 + 4  # horizon + connect timeout + slack for a loaded machine


def _cli() -> list[str]:
    found = shutil.which("oncestream", path=str(Path(sys.executable).parent))
    return [found] if found else [sys.executable, "-m", "oncestream.cli"]


def _write(path: Path, count: int, start: int = 0) -> str:
    with path.open("w") as out:
        for i in range(start, start + count):
            out.write(orjson.dumps({"id": f"r{i}", "n": i, "pad": "x" * 40}).decode() + "\n")
    return str(path)


def _args(url: str, file: str, *extra: str) -> list[str]:
    return [
        *_cli(),
        "publish",
        file,
        "--stream",
        "T",
        "--subject",
        "t.x",
        "--id-field",
        "id",
        "-s",
        url,
        "--no-progress",
        *FAST,
        *extra,
    ]


async def _stream(url: str) -> None:
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        spec = StreamSpec(name="T", subjects=("t.>",), duplicate_window=WINDOW)
        await ensure_stream(conn, spec)


async def _count(url: str) -> int:
    try:
        async with await connect(ConnectOptions(servers=(url,), connect_timeout=1)) as conn:
            info = await conn.stream_info("T")
            return int(info["state"]["messages"])
    except Exception:
        return -1


async def _wait_stored(url: str, at_least: int, proc: Process) -> int:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.returncode is None:
        count = await _count(url)
        if count >= at_least:
            return count
        await asyncio.sleep(0.02)
    raise AssertionError(f"the publish did not reach {at_least} records (exit {proc.returncode})")


async def _ids(url: str) -> collections.Counter[str]:
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        return collections.Counter(m.msg_id or "" for m in await read_back(conn, "T"))


async def _start(args: list[str]) -> Process:
    return await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )


async def _finish(proc: Process, timeout: float = 60) -> tuple[int, str]:
    try:
        _, err = await asyncio.wait_for(proc.communicate(), timeout)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, err.decode()


async def _run(args: list[str], timeout: float = 120) -> tuple[int, str]:
    return await _finish(await _start(args), timeout)


async def test_rerun_after_crash_and_window_stores_each_record_once(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    url = nats_server.url
    await _stream(url)
    total = 30_000
    file = _write(tmp_path / "big.jsonl", total)
    args = _args(url, file, "--max-inflight", "100")
    proc = await _start(args)
    try:
        await _wait_stored(url, 3000, proc)
    finally:
        nats_server.kill()
    killed = time.monotonic()
    code, err = await _finish(proc)
    assert time.monotonic() - killed < GIVE_UP_BOUND, err
    assert code == 1, err
    assert "first unconfirmed line" in err and "re-run the same command" in err, err
    # Stay down past the duplicate window: msg ids alone no longer protect a re-run.
    await asyncio.sleep(WINDOW + 0.5)
    nats_server.start()
    again, again_err = await _run(args)
    assert again == 0, again_err
    assert "resuming" in again_err
    ids = await _ids(url)
    assert len(ids) == total and set(ids.values()) == {1}


async def test_paced_run_killed_mid_way_resumes_and_stores_each_record_once(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """``--rate``: the run keeps the pace, records progress while it waits, and a
    SIGKILL mid-way followed by a re-run past the window stores every record once."""
    url = nats_server.url
    await _stream(url)
    total, rate = 300, 100
    file = _write(tmp_path / "paced.jsonl", total)
    args = _args(url, file, "--rate", str(rate))
    proc = await _start(args)
    try:
        # The counts as seen, not the thresholds: each look connects anew and may see
        # more than it waited for (0.87 s for "100" once, on a fast machine: fewer).
        first = await _wait_stored(url, 10, proc)
        began = time.monotonic()
        last = await _wait_stored(url, first + 100, proc)
        took = time.monotonic() - began
    finally:
        proc.kill()
    await _finish(proc)
    # Each look's count is of some moment within it (a few records at this pace).
    assert last - first <= rate * took + 10, (
        f"{last - first} records at --rate {rate} in {took:.2f}s"
    )
    await asyncio.sleep(WINDOW + 0.5)  # past the window: only the progress record protects
    began = time.monotonic()
    again, again_err = await _run(args)
    took = time.monotonic() - began
    assert again == 0, again_err
    assert "resuming" in again_err, again_err
    ids = await _ids(url)
    assert len(ids) == total and set(ids.values()) == {1}
    # The re-run paces the lines it publishes, not those the killed run confirmed.
    found = re.search(r"resuming .* after line ([\d,]+)", again_err)
    assert found is not None, again_err
    confirmed = int(found.group(1).replace(",", ""))
    assert 10 <= confirmed < total, again_err
    assert took >= (total - confirmed - 5) / rate * 0.9, (took, again_err)


async def test_plain_rerun_after_window_adds_nothing_and_changed_file_is_refused(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    url = nats_server.url
    await _stream(url)
    path = tmp_path / "small.jsonl"
    file = _write(path, 50)
    first, first_err = await _run(_args(url, file))
    assert first == 0, first_err
    await asyncio.sleep(WINDOW + 0.5)  # past the duplicate window
    again, again_err = await _run(_args(url, file))
    assert again == 0, again_err
    assert "nothing to publish" in again_err
    # Lines appended after the published part: only they are published.
    with path.open("a") as out:
        out.write(orjson.dumps({"id": "extra", "n": -1}).decode() + "\n")
    grown, err = await _run(_args(url, file))
    assert grown == 0 and "changed after line 50" in err, err
    # A change to what was already published is refused.
    text = path.read_text().replace('"id":"r3"', '"id":"r3-edited"')
    path.write_text(text)
    changed, err = await _run(_args(url, file))
    assert changed == 2, err
    assert "changed since an earlier publish" in err and "lines 1..51" in err
    assert "--fresh" in err and "Traceback" not in err
    ids = await _ids(url)
    assert len(ids) == 51 and set(ids.values()) == {1}


async def test_fixed_malformed_line_resumes_without_republishing(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    url = nats_server.url
    await _stream(url)
    path = tmp_path / "fix.jsonl"
    good = [orjson.dumps({"id": f"r{i}"}).decode() for i in range(10)]
    path.write_text("\n".join([*good[:5], "{broken", *good[5:]]) + "\n")
    stopped, err = await _run(_args(url, str(path)))
    assert stopped == 1 and "line 6: invalid JSON" in err, err
    await asyncio.sleep(WINDOW + 0.5)  # past the window: msg ids no longer protect lines 1-5
    path.write_text(
        "\n".join([*good[:5], orjson.dumps({"id": "r-fixed"}).decode(), *good[5:]]) + "\n"
    )
    fixed, err = await _run(_args(url, str(path)))
    assert fixed == 0 and "changed after line 5" in err, err
    ids = await _ids(url)
    assert len(ids) == 11 and set(ids.values()) == {1}


async def test_server_gone_for_good_gives_up_with_summary(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    url = nats_server.url
    await _stream(url)
    file = _write(tmp_path / "big.jsonl", 30_000)
    proc = await _start(_args(url, file, "--max-inflight", "100"))
    try:
        await _wait_stored(url, 2000, proc)
    finally:
        nats_server.kill()
    killed = time.monotonic()
    code, err = await _finish(proc)
    assert time.monotonic() - killed < GIVE_UP_BOUND, err
    assert code == 1, err
    assert "big.jsonl': stored" in err
    assert "stored" in err and "failed" in err and "lines not read" in err
    assert "first unconfirmed line" in err and "re-run the same command" in err
    assert "Traceback" not in err


async def test_ctrl_c_prints_summary_exits_130_and_rerun_completes(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    url = nats_server.url
    await _stream(url)
    total = 30_000
    file = _write(tmp_path / "big.jsonl", total)
    args = _args(url, file, "--max-inflight", "50")
    proc = await _start(args)
    try:
        await _wait_stored(url, 2000, proc)
    finally:
        proc.send_signal(signal.SIGINT)
    code, err = await _finish(proc)
    assert code == 130, err
    assert "interrupted" in err and "first unconfirmed line" in err
    assert "re-run the same command" in err and "Traceback" not in err
    await asyncio.sleep(WINDOW + 0.5)  # past the window: only the progress record protects
    again, again_err = await _run(args)
    assert again == 0, again_err
    ids = await _ids(url)
    assert len(ids) == total and set(ids.values()) == {1}


async def test_progress_stream_that_cannot_be_created_is_a_clear_error(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    url = nats_server.url
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        # A stream that captures the progress subjects: the progress stream would overlap it.
        await ensure_stream(conn, StreamSpec(name="ALL", subjects=("t.>", "oncestream.>")))
    file = _write(tmp_path / "few.jsonl", 20)
    args = [*_args(url, file)]
    args[args.index("T")] = "ALL"
    refused, err = await _run(args)
    assert refused == 2, err
    assert "cannot create the progress stream 'ONCESTREAM_PUBLISH_PROGRESS'" in err
    assert "--progress-stream" in err and "--no-resume" in err and "Traceback" not in err
    # The stream that captures the progress subjects can hold the records itself.
    ok, err = await _run([*args, "--progress-stream", "ALL"])
    assert ok == 0, err
    again, err = await _run([*args, "--progress-stream", "ALL"])
    assert again == 0 and "nothing to publish" in err, err


async def test_progress_records_ride_out_an_outage_the_publishes_ride_out(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """Found by the seed-7 campaign (issue 20, trials 36 and 72): the progress records
    had their own 3 x 2 s retry horizon, so a server paused for longer stopped the run
    (exit 1, "no PubAck ... on 'oncestream.publish.progress...'") although its data
    publishes (--ack-timeout x --max-attempts) would have ridden it out."""
    url = nats_server.url
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        await ensure_stream(conn, StreamSpec(name="T", subjects=("t.>",), duplicate_window=60))
    total = 12_000  # a progress record reserves the next 10,000 lines at line 10,001
    file = _write(tmp_path / "paced.jsonl", total)
    patient = ["--ack-timeout", "1s", "--max-attempts", "15", "--rate", "2000"]
    proc = await _start(_args(url, file, *patient))
    try:
        await _wait_stored(url, 9_700, proc)  # the pause begins just before line 10,001
    finally:
        nats_server.pause()
    try:
        await asyncio.sleep(7.5)  # the outage itself: longer than the old 6 s horizon
    finally:
        nats_server.resume()
    code, err = await _finish(proc, timeout=90)
    assert code == 0, err
    ids = await _ids(url)
    assert len(ids) == total and set(ids.values()) == {1}
