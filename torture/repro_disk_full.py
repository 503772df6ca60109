"""Minimal reproduction: after ENOSPC, nats-server keeps failing a stream's writes.

Found by the fault campaign (issue 11, docs/guarantees.md). nats-server v2.15.1,
single server, file storage, ``sync_interval: always``, store on a 48 MB tmpfs:
once the disk is full, publishes get no PubAck (the server logs "JetStream failed
to store a msg ... no space left on device"); after the space is freed they still
get none, until the server restarts. Nothing acknowledged is lost.

Run as root: ``.venv/bin/python -m torture.repro_disk_full``. Expected output::

    before ([(0, 1), (1, 2)], 2)
    full   ([(2, 'PublishFailed: no PubAck ...'), ...], 2)
    freed  ([(12, 'PublishFailed: no PubAck ...'), ...], 2)
    restarted ([(15, 3), (16, 4), (17, 5)], 5)
"""

import asyncio
import subprocess
from collections.abc import Iterable
from pathlib import Path

from oncestream import ConnectOptions, OncestreamError, connect
from oncestream.publish import Publisher, PublisherOptions
from oncestream.server import JetStreamConfig, NatsServer, ServerConfig
from oncestream.streams import StreamSpec, ensure_stream

M = Path("/tmp/oncestream-repro-disk/store")


async def publish(
    srv: NatsServer, ids: Iterable[int], create: bool = False
) -> tuple[list[tuple[int, int | str]], int]:
    out: list[tuple[int, int | str]] = []
    async with await connect(ConnectOptions(servers=(srv.url,))) as conn:
        if create:
            # The ack path: the repro records each message's stream sequence.
            await ensure_stream(conn, StreamSpec(name="T", subjects=("t.>",), allow_batched=False))
        pub = Publisher(conn, PublisherOptions(stream="T", ack_timeout=1, max_attempts=2))
        await pub.start()
        for i in ids:
            try:
                out.append((i, (await (await pub.publish("t.x", b"x" * 4000, msg_id=f"m{i}"))).seq))
            except OncestreamError as e:
                out.append((i, type(e).__name__ + ": " + str(e)[:80]))
        n = (await conn.stream_info("T"))["state"]["messages"]
        await pub.close()
    return out, n


def fill() -> str:
    try:
        with open(M / "filler", "wb") as f:
            while True:
                f.write(b"\0" * (1 << 20))
                f.flush()
    except OSError as e:
        return str(e)
    return "no error"  # unreachable: the loop ends with ENOSPC


M.mkdir(parents=True, exist_ok=True)
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(M)], check=True)
try:
    srv = NatsServer(
        ServerConfig(jetstream=JetStreamConfig(store_dir=M / "js", sync_interval="always")),
        work_dir="/tmp/oncestream-repro-disk/w",
    ).start()
    print("before", asyncio.run(publish(srv, range(0, 2), create=True)))
    print("fill", fill())
    print("full", asyncio.run(publish(srv, range(2, 12))))
    (M / "filler").unlink()
    print("freed", asyncio.run(publish(srv, range(12, 15))))
    srv.restart()
    print("restarted", asyncio.run(publish(srv, range(15, 18))))
    srv.stop()
    print(
        srv.binary, subprocess.run([srv.binary, "--version"], capture_output=True, text=True).stdout
    )
finally:
    subprocess.run(["umount", "-l", str(M)])
