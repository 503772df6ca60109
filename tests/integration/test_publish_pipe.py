"""`oncestream publish -` from a pipe that stays open: records are stored while it is idle."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


async def test_an_idle_open_pipe_does_not_hold_back_what_was_read(
    nats_server, conn, make_stream
) -> None:  # type: ignore[no-untyped-def]
    await make_stream("LOGS", ("logs.>",))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "from oncestream.cli import main; main()",
        "publish", "-", "--stream", "LOGS", "--subject", "logs.x", "--id-field", "id",
        "--no-progress", "--server", nats_server.url,
        cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdin is not None
    try:
        proc.stdin.write(b"".join(b'{"id": "l-%d"}\n' % n for n in range(200)))
        await proc.stdin.drain()  # ... and the pipe stays open, with nothing more to read
        stored = 0
        for _ in range(200):  # bounded: up to ~20 s
            stored = (await conn.stream_info("LOGS"))["state"]["messages"]
            if stored == 200:
                break
            await asyncio.sleep(0.1)
        assert stored == 200, f"only {stored} of 200 stored while the pipe was idle"
        proc.stdin.close()
        _out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
