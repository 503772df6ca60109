"""Server and network faults of a trial: resolving roles, what each holds, apply, heal.

Worker faults (``kill``/``pause`` of a producer or processor, and the Spark kinds)
stay in :mod:`torture.trial`; this module covers the nats-servers and the links.
Everything a network fault changes lives inside the run's own namespaces
(``ip link`` in the bridge namespace, ``tc`` on a node's ``eth0``), so deleting
the namespaces (normal teardown, or :func:`torture.netns.cleanup_stale` after a
crash) undoes it.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from .netns import Net
from .topology import Topology

SERVER_KINDS = (
    "server-kill",
    "server-pause",
    "disk-full",
    "partition",
    "degrade",
    "partition-pair",
    "degrade-pair",
    "cluster-kill",
)


def holds(kind: str, target: str) -> set[str]:
    """What a fault occupies while active: another fault needing any of it waits.

    Processes by name (a worker, ``srv:<node>``), a node's whole link
    (``link:<node>``), its node-wide shaping (``shape:<node>``), a pair's link
    (``cut:a|b``, ``shape:a|b``). A pair cut and a node's degrade may overlap
    (their tc filters are separate and the cut wins).
    """
    nodes = target.split("|")
    if kind in ("server-kill", "server-pause", "disk-full"):
        return {f"srv:{target}"}
    if kind == "cluster-kill":
        return {f"srv:{n}" for n in ("c1", "c2", "c3")}
    if kind == "partition":
        return {f"link:{target}"}
    if kind == "degrade":
        return {f"shape:{target}"}
    if kind == "partition-pair":
        return {"cut:" + "|".join(sorted(nodes))}
    if kind == "degrade-pair":
        return {"shape:" + "|".join(sorted(nodes))}
    return {target}  # a worker


def resolve(target: str, leader: str | None, busy: set[str], kind: str, turn: int) -> str | None:
    """Concrete node names for ``leader``/``follower`` roles (None: no leader known).

    Among the followers, the first (rotated by ``turn``) whose resources are free,
    so a second fault on "a follower" picks the other one instead of waiting.
    """
    roles = target.split("|")
    if not {"leader", "follower"} & set(roles):
        return target
    if leader is None:
        return None
    followers = [n for n in ("c1", "c2", "c3") if n != leader]
    followers = followers[turn % 2 :] + followers[: turn % 2]
    if roles == ["follower", "follower"]:
        return "|".join(followers)
    options = []
    for follower in followers:
        options.append("|".join(leader if r == "leader" else follower for r in roles))
    free = [o for o in options if not holds(kind, o) & busy]
    return (free or options)[0]


def apply(topo: Topology, net: Net, kind: str, target: str) -> str:
    """Start a server or network fault; returns how it was made."""
    if kind == "server-kill":
        topo.servers[target].kill()
    elif kind == "server-pause":
        topo.servers[target].pause()
    elif kind == "cluster-kill":
        pids = [s.pid for s in topo.servers.values() if s.running() and s.pid is not None]
        for pid in pids:  # every node at once, then reap
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGKILL)
        for server in topo.servers.values():
            server.kill()
        return f"SIGKILL {len(pids)} nodes"
    elif kind == "partition":
        net.link_down(target)
        return "ip link down (bridge port)"
    elif kind == "degrade":
        return net.degrade(target)
    elif kind == "partition-pair":
        a, b = target.split("|")
        net.cut(a, b)
        return "tc bpf drop both ways"
    elif kind == "degrade-pair":
        a, b = target.split("|")
        return net.degrade(a, peer=b)
    elif kind == "disk-full":
        assert topo.store_mount is not None
        fill(topo.store_mount / "filler")
        return "tmpfs filled to ENOSPC"
    return "ok"


def heal(topo: Topology, net: Net, kind: str, target: str) -> None:
    if kind == "server-kill":
        topo.restart(target)
    elif kind == "server-pause":
        topo.servers[target].resume()
    elif kind == "cluster-kill":
        for node in topo.servers:
            topo.restart(node)
    elif kind == "partition":
        net.link_up(target)
    elif kind == "degrade":
        net.degrade_clear(target)
    elif kind == "partition-pair":
        a, b = target.split("|")
        net.uncut(a, b)
    elif kind == "degrade-pair":
        a, b = target.split("|")
        net.degrade_clear(a, peer=b)
    elif kind == "disk-full":
        assert topo.store_mount is not None
        (topo.store_mount / "filler").unlink(missing_ok=True)
        # nats-server 2.15.1 keeps failing writes after ENOSPC even once space is
        # freed, until it restarts (torture/repro_disk_full.py): the operator's step.
        topo.restart(target)


def fill(path: Path) -> None:
    """Fill the filesystem holding ``path`` (ENOSPC ends it: that is the fault)."""
    chunk = b"\0" * (1 << 20)
    try:
        with open(path, "wb") as f:
            while True:
                f.write(chunk)
                f.flush()
    except OSError:
        pass
