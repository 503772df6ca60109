"""Reproduction: a cut between the meta leader and one other node, then its heal.

Seed 41, trial 19 (``cluster-sync``) ended with every server answering the
independent reader 10008 (no metadata leader) after a 5.5 s partition between the
two stream followers healed. This cuts the meta leader of a fresh 3-node cluster
(R3 stream ``T``, ``sync_interval: always``, each node in its own namespace) from
one other node for 5.5 s, heals, and prints a timeline until the independent
reader (:mod:`torture.rawread`) reads the stream again: each node's meta leader per
``/jsz``, what a raw read through each node got, and what the project's reader
(``read_stream``) got. It answers whether the cluster recovers, and how soon.

Run as root, under the heavy lock: ``.venv/bin/python -m torture.repro_meta_leader``.
Three runs on nats-server v2.15.1 (the first, abridged; the raw reads are one round,
the project's reader goes through any node with direct gets)::

    meta leader c1; cutting c1|c2 for 5.5 s
     10.30 healed
     15.33 meta {'c1': '', 'c2': 'c2', 'c3': 'c2'} raw [c1:10008 c2:10008 c3:10008] project ...
     15.60 meta {'c1': 'c3', 'c2': 'c3', 'c3': 'c3'} raw [c1:10008 c2:10008 c3:10008] project ok(50)
     18.64 meta {'c1': 'c3', 'c2': 'c3', 'c3': 'c3'} raw [c1:ok(50) c2:ok(50) c3:ok(50)] ...
    read again 8.35 s after the heal

and 0.03 s and 0.04 s after the heal in the other two (the meta leader moved all the
same). The cluster recovers; a reader must wait for it, not count rounds.
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
import time
from pathlib import Path

from oncestream import connect
from oncestream.publish import Publisher, PublisherOptions
from oncestream.read import read_stream

from .netns import Net
from .rawread import _read
from .topology import STREAM, SUBJECT, Topology

CUT_S, LIMIT_S, TICK_S = 5.5, 90.0, 0.25


async def _look(topo: Topology) -> str:
    metas = await asyncio.to_thread(topo.meta_leaders)
    raw = []
    for node in topo.servers:
        try:
            got = await asyncio.wait_for(_read(topo.url(node), STREAM, None), 5)
            raw.append(f"{node}:ok({got.messages})")
        except Exception as exc:
            text = str(exc)
            raw.append(f"{node}:" + ("10008" if "10008" in text else text[:40]))
    try:
        async with asyncio.timeout(5):
            async with await connect(topo.connect_options(topo.producer_target())) as conn:
                n = sum([len(chunk) async for chunk in read_stream(conn, STREAM)])
        project = f"ok({n})"
    except Exception as exc:
        project = f"{type(exc).__name__}: {str(exc)[:60]}"
    return f"meta {metas} raw [{' '.join(raw)}] project {project}"


async def main() -> None:
    run_id = "rm" + secrets.token_hex(2)
    work = Path(f"/tmp/oncestream-repro-meta-{run_id}")
    with Net(run_id) as net:
        topo = Topology("cluster-sync", net, work)
        try:
            topo.start()
            await topo.create_streams()
            async with await connect(topo.connect_options(topo.producer_target())) as conn:
                pub = Publisher(conn, PublisherOptions(stream=STREAM))
                await pub.start()
                for i in range(50):
                    await (await pub.publish(f"{SUBJECT}.x", f"k-{i}".encode(), msg_id=f"k-{i}"))
                await pub.close()
            t0 = time.monotonic()
            leader = ""
            while not leader and time.monotonic() - t0 < 30:
                leader = next((m for m in (await asyncio.to_thread(topo.meta_leaders)).values()
                               if m), "")  # fmt: skip
            other = next(n for n in topo.servers if n != leader)
            print(f"meta leader {leader}; cutting {leader}|{other} for {CUT_S} s")
            t0 = time.monotonic()
            net.cut(leader, other)
            last, healed, back = "", None, None
            while time.monotonic() - t0 < LIMIT_S:
                now = time.monotonic() - t0
                if healed is None and now >= CUT_S:
                    net.uncut(leader, other)
                    healed = now
                    print(f"{now:6.2f} healed")
                look = await _look(topo)
                if look != last:
                    print(f"{time.monotonic() - t0:6.2f} {look}", flush=True)
                    last = look
                if healed is not None and "10008" not in look and ":ok(" in look:
                    if back is None:
                        back = time.monotonic() - t0
                    elif time.monotonic() - t0 - back > 15:
                        break  # stable for 15 s
                elif healed is not None:
                    back = None
                await asyncio.sleep(TICK_S)
            print(f"read again {back - healed:.2f} s after the heal" if back and healed
                  else "not readable within the limit")  # fmt: skip
        finally:
            topo.stop()
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
