"""Jepsen's storage and membership faults on an R3 cluster (jepsen.io/analyses/nats-2.12.1,
nemeses in jepsen-io/nats ``src/jepsen/nats/nemesis.clj``), where one machine allows them.

* ``bitflip``: a minority node (one of three) SIGKILLed, then bits of its stream files
  flipped (Jepsen: ``bitflip-file-chunks``, about two errors per file), then restarted
  at the heal. Landed when the file's bytes changed (hash before and after); the
  server's log after the restart says whether it noticed (``noticed``).
* ``truncate``: the same, one file cut to a random shorter length (``truncate-file``).
* ``membership``: a stream peer removed and a fresh node added (Jepsen's membership
  package: wipe the node, ``stream cluster peer-remove``, join a node): the node is
  SIGKILLed and its store wiped, ``STREAM.PEER.REMOVE`` takes it out of the stream's
  peer set, a spare node (``c4``, started on first use) or an earlier victim is there
  to take its place; landed when the stream's peer set no longer holds it and holds
  a replacement. The victim restarts at the heal with an empty store (a fresh node
  with the old name: the next membership change can place the stream there).
* ``os-crash``: one node's OS crashes: its server SIGKILLed and its page-cache mount
  (:mod:`torture.cachefs`) drops every write not fsynced; restarted at the heal.
  Landed when the file system confirmed the drop (the unsynced bytes it dropped are recorded).
* ``power-loss``: the same for every node at once (Jepsen's coordinated power failure).

Clock skew is not a fault kind: nats-server is a static Go binary (``LD_PRELOAD``,
hence libfaketime, does not reach it; its log keeps the real time under
``FAKETIME=-3d``), Go reads the clock through the vDSO, and a time namespace offsets
only the monotonic clocks by a constant; skewing the wall clock would move the clock
of the whole shared machine. docs/guarantees.md says so under its limits.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .faults import Outcome, not_yet
from .nemesis import proc_state

if TYPE_CHECKING:
    from .topology import Topology

CORRUPT_KINDS = ("bitflip", "truncate")
CRASH_KINDS = ("os-crash", "power-loss")
KINDS = (*CORRUPT_KINDS, "membership", *CRASH_KINDS)
#: Log lines of a restarted server that show it noticed damaged files.
NOTICED = ("corrupt", "checksum", "bad ", "truncat", "rebuild", "inconsisten", "lost",
           "error opening", "could not", "failed")  # fmt: skip


def stream_files(store: Path, stream: str, *, suffix: str = ".blk") -> list[Path]:
    """The message block files of ``stream`` in a node's store, sorted.

    The store is walked while its server runs: a folder it removes meanwhile (a raft
    group's ``__msgs__`` compacted away) is skipped, not an error (``os.walk`` passes
    over what it cannot list; ``Path.glob`` raised, a harness failure in trial 97 of
    the 55b19a7 campaign)."""
    found = []
    for root, _dirs, files in os.walk(store):
        folder = Path(root)
        parent = folder.parent
        if (folder.name, parent.name, parent.parent.name) == ("msgs", stream, "streams"):
            found += [folder / f for f in files if f.endswith(suffix)]
    return sorted(p for p in found if p.is_file())


def _digest(path: Path) -> str:
    return hashlib.blake2b(path.read_bytes(), digest_size=8).hexdigest()


def flip_bits(path: Path, rng: random.Random, flips: int = 2) -> list[int]:
    """Flip ``flips`` random bits of ``path`` in place; the byte offsets flipped."""
    size = path.stat().st_size
    offsets = sorted(rng.randrange(size) for _ in range(flips)) if size else []
    with open(path, "r+b") as f:
        for offset in offsets:
            f.seek(offset)
            byte = f.read(1)[0]
            f.seek(offset)
            f.write(bytes([byte ^ (1 << rng.randrange(8))]))
        f.flush()
        os.fsync(f.fileno())
    return offsets


def truncate(path: Path, rng: random.Random) -> tuple[int, int]:
    """Cut ``path`` to a random shorter length: (size before, after)."""
    size = path.stat().st_size
    keep = rng.randrange(size) if size else 0
    os.truncate(path, keep)
    return size, keep


def kill_node(topo: Topology, node: str) -> int | None:
    """SIGKILL ``node``'s server and reap it; its PID (None: it was not running)."""
    server = topo.servers[node]
    pid = server.pid
    if pid is not None:
        os.kill(pid, signal.SIGCONT)
        os.kill(pid, signal.SIGKILL)
    server.kill()
    return pid


def corrupt(topo: Topology, kind: str, node: str, rng: random.Random, stream: str) -> Outcome:
    """``bitflip`` / ``truncate``: kill ``node``, damage its stream's block files."""
    if topo.servers[node].pid is None or proc_state(topo.servers[node].pid or 0) is None:
        return not_yet(f"{node}'s server is not running")
    files = stream_files(topo.store(node), stream)
    files = [f for f in files if f.stat().st_size > 0]
    if not files:
        return not_yet(f"{node} holds no block file of {stream} yet")
    pid = kill_node(topo, node)
    picked = rng.sample(files, min(len(files), 2 if kind == "bitflip" else 1))
    done: list[str] = []
    changed = True
    for path in picked:
        before = _digest(path)
        if kind == "bitflip":
            offsets = flip_bits(path, rng)
            done.append(f"{path.name}: bits flipped at bytes {offsets}")
        else:
            size, keep = truncate(path, rng)
            done.append(f"{path.name}: {size} -> {keep} bytes")
        changed = changed and (_digest(path) != before or path.stat().st_size == 0)
    how = f"SIGKILL {node} pid {pid}; " + "; ".join(done)
    return Outcome(changed, how, "" if changed else "the files' bytes did not change")


def truncate_all(topo: Topology, stream: str) -> Outcome:
    """The negative control ``--sabotage truncate-all``: every node SIGKILLed, then every
    block file of ``stream`` emptied on every node (no replica left to repair from); the
    nodes restart at the heal. The acknowledged records in them are gone: the checker
    must report them."""
    nodes = topo.members()
    files = {n: [f for f in stream_files(topo.store(n), stream) if f.stat().st_size] for n in nodes}
    if not all(files.values()):
        return not_yet("not every node holds a block file of the stream yet")
    for node in nodes:
        kill_node(topo, node)
    cut = 0
    for paths in files.values():
        for path in paths:
            cut += path.stat().st_size
            os.truncate(path, 0)
    return Outcome(True, f"SIGKILL {', '.join(nodes)}; {cut} bytes of {stream} blocks cut to 0")


def noticed(topo: Topology, node: str, since: int) -> list[str]:
    """Lines of ``node``'s log after byte ``since`` that show it found damaged files."""
    try:
        with open(topo.servers[node].log_file, "rb") as f:
            f.seek(since)
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    lines = [ln for ln in text.splitlines() if "[WRN]" in ln or "[ERR]" in ln]
    return [ln[-240:] for ln in lines if any(w in ln.lower() for w in NOTICED)][:8]


def lose_page_cache(topo: Topology, nodes: list[str]) -> Outcome:
    """``os-crash`` / ``power-loss``: SIGKILL every node of ``nodes`` at once, then drop the
    writes their page-cache mounts hold unsynced."""
    for node in nodes:
        pid = topo.servers[node].pid
        if pid is None or proc_state(pid) is None:
            return not_yet(f"{node}'s server is not running")
        if node not in topo.lazy:
            return Outcome(
                False, why=f"{node}'s store is not on the page-cache file system", touched=False
            )
    pids = {n: topo.servers[n].pid for n in nodes}
    for pid in pids.values():  # every node at once, then reap
        assert pid is not None
        os.kill(pid, signal.SIGCONT)
        os.kill(pid, signal.SIGKILL)
    for node in nodes:
        topo.servers[node].kill()
    dropped: dict[str, int] = {}
    for node in nodes:
        mount = topo.lazy[node]
        dropped[node] = mount.drop()
    how = (
        f"SIGKILL {', '.join(f'{n} pid {p}' for n, p in pids.items())}; the page cache dropped "
        + (", ".join(f"{n} {b} unsynced bytes" for n, b in dropped.items()))
    )
    return Outcome(True, how)


def wipe(topo: Topology, node: str) -> None:
    """Empty ``node``'s store (a fresh node with the old name when it starts again)."""
    store = topo.store(node)
    for child in store.iterdir() if store.exists() else ():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


async def remove_peer(topo: Topology, node: str, stream: str, timeout: float = 15.0) -> Any:
    """``STREAM.PEER.REMOVE`` of ``node`` from ``stream``; then, within ``timeout``, the
    stream's peer set (leader + replicas) once ``node`` has left it and three are in it
    (else the peer set at the deadline, ``late``: removed when it shows the same)."""
    from oncestream import connect

    deadline = time.monotonic() + timeout
    answer: Any = None
    async with await connect(topo.connect_options(topo.producer_target())) as conn:
        while answer is None or not answer.get("success"):
            try:
                answer = await conn.api(f"STREAM.PEER.REMOVE.{stream}", {"peer": node})
            except Exception as exc:  # the meta leader may be electing: ask again
                answer = {"error": f"{type(exc).__name__}: {exc}"}
            if time.monotonic() > deadline:
                return {"removed": False, "answer": answer}
            if not answer.get("success"):
                await _sleep(0.5)
        while time.monotonic() < deadline:
            peers = await topo.stream_peers(conn)
            if peers and node not in peers and len(peers) >= 3:
                return {"removed": True, "peers": peers}
            await _sleep(0.3)
    # Past the deadline the stream's state decides: a removal answered but seen late
    # (its new peer catching up under other faults) landed all the same.
    peers = await topo.peers_now()
    late = node not in peers and len(peers) >= 3
    return {"removed": late, "late": True, "answer": answer, "peers": peers}


async def _sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)
