"""Server and network faults of a trial: resolving roles, what each holds, apply, heal.

Worker faults (``kill``/``pause`` of a producer or processor, and the Spark kinds)
stay in :mod:`torture.trial`; this module covers the nats-servers and the links.
Each fault checks a precondition before it acts (the servers it needs are
running, not stopped; a link is not already down) and its effect after
(:class:`Outcome`): the processes are gone or stopped, a probe from the host or
from a node's namespace gets no answer across a cut, packets go through a
degrade's shaping classes in both directions, the disk filler ended on ENOSPC.
Everything a network fault changes lives inside the run's own namespaces
(``ip link`` in the bridge namespace, ``tc`` on a node's ``eth0``), so deleting
the namespaces (normal teardown, or :func:`torture.netns.cleanup_stale` after a
crash) undoes it.
"""

from __future__ import annotations

import errno
import os
import signal
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .nemesis import proc_state, wait_state
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
    (``cut:a|b``, ``shape:a|b``). A degrade also holds the links it shapes (a
    partition of its node, or a cut of its pair, would stop the traffic it slows,
    and the check of its effect would see none); a pair cut and a node's degrade
    may overlap (their tc filters are separate and the cut wins).
    """
    nodes = target.split("|")
    pair = "|".join(sorted(nodes))
    if kind in ("server-kill", "server-pause", "disk-full", "bitflip", "truncate", "os-crash"):
        return {f"srv:{target}"}
    if kind in ("cluster-kill", "power-loss"):
        return {f"srv:{n}" for n in CLUSTER_NODES}
    if kind == "membership":  # one change of the peer set at a time
        return {f"srv:{target}", "membership"}
    if kind in ("pg-kill", "pg-pause", "pg-cut"):
        return {"pg"}  # a cut's check needs the server up; a kill's, the server not cut
    if kind == "ledger-full":
        return {f"ledger:{target}"}
    if kind == "partition":
        return {f"link:{target}"}
    if kind == "degrade":
        return {f"shape:{target}", f"link:{target}"}
    if kind == "partition-pair":
        return {f"cut:{pair}"}
    if kind == "degrade-pair":
        return {f"shape:{pair}", f"cut:{pair}", *(f"link:{n}" for n in nodes)}
    if kind == "consumer-reset":  # a consumer, not its processes: kills may overlap it
        return {f"consumer:{target}"}
    return {target}  # a worker


#: Every node a cluster trial may run (``c4``: the spare a membership change starts).
CLUSTER_NODES = ("c1", "c2", "c3", "c4")


def resolve(
    target: str,
    leader: str | None,
    busy: set[str],
    kind: str,
    turn: int,
    peers: list[str] | None = None,
) -> str | None:
    """Concrete node names for ``leader``/``follower`` roles (None: no leader known).

    ``peers``: the stream's peer set, leader first (default: c1..c3), since a
    membership change moves it. Among the followers, the first (rotated by ``turn``)
    whose resources and server are free, so a second fault on "a follower" picks the
    other one instead of waiting.
    """
    roles = target.split("|")
    if not {"leader", "follower"} & set(roles):
        return target
    if leader is None:
        return None
    members = peers if peers and peers[0] == leader else ["c1", "c2", "c3"]
    followers = [n for n in members if n != leader]
    followers = followers[turn % 2 :] + followers[: turn % 2]
    if roles == ["follower", "follower"]:
        return "|".join(followers)
    options = []
    for follower in followers:
        options.append("|".join(leader if r == "leader" else follower for r in roles))
    # Free: neither what the fault would hold nor the node's server taken by another
    # fault (a cut or a slowdown of a node killed by a membership change cannot land).
    free = [o for o in options if not (holds(kind, o) | {f"srv:{n}" for n in o.split("|")}) & busy]
    return (free or options)[0]


@dataclass(frozen=True)
class Outcome:
    """What starting a fault did.

    ``landed``: its effect was seen (the evidence in ``how``). Otherwise ``why``
    says what failed; ``retry`` means its precondition does not hold yet and
    nothing was changed (the trial tries again later); ``touched`` that something
    was changed and must be healed although the fault did not land.
    """

    landed: bool
    how: str = ""
    why: str = ""
    retry: bool = False
    touched: bool = True


#: The start of a skip reason for a fault whose target an earlier fault took for good, in a
#: trial that reports the loss as a measured limit: counted apart, not as a skip.
NOT_APPLICABLE = "not applicable:"


def not_yet(why: str) -> Outcome:
    return Outcome(False, why=why, retry=True, touched=False)


def _server_down(topo: Topology, node: str, *, stopped_ok: bool) -> str | None:
    """Why ``node``'s server cannot take a fault now (None: it runs; a network fault
    also lands on a stopped server, whose kernel still answers on its behalf)."""
    pid = topo.servers[node].pid
    state = None if pid is None else proc_state(pid)
    if state is None:
        return f"{node}'s server is not running"
    if state in ("T", "t") and not stopped_ok:
        return f"{node}'s server is stopped"
    return None


CLIENT_PORT = 4222


def apply(topo: Topology, net: Net, kind: str, target: str) -> Outcome:
    """Start a server or network fault once its precondition holds; check its effect."""
    nodes = topo.members() if kind == "cluster-kill" else target.split("|")
    network = kind in ("partition", "partition-pair", "degrade", "degrade-pair")
    for node in nodes:
        down = _server_down(topo, node, stopped_ok=network)
        if down is not None:
            return not_yet(down)
    if kind in ("server-kill", "cluster-kill"):
        pids = {n: topo.servers[n].pid for n in nodes}
        for pid in pids.values():  # every node at once, then reap
            assert pid is not None
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGKILL)
        for node in nodes:
            topo.servers[node].kill()
        alive = [n for n, pid in pids.items() if pid is not None and proc_state(pid) is not None]
        how = f"SIGKILL {', '.join(f'{n} pid {p}' for n, p in pids.items())}"
        return Outcome(not alive, how, f"still alive after SIGKILL: {alive}" if alive else "")
    if kind == "server-pause":
        pid = topo.servers[target].pid
        assert pid is not None
        topo.servers[target].pause()
        state = wait_state(pid, {"T", "t"})
        return Outcome(state in ("T", "t"), f"SIGSTOP pid {pid}", f"state {state} after SIGSTOP")
    if kind == "partition":
        if not net.link_is_up(target):
            return not_yet(f"{target}'s bridge port is already down")
        net.link_down(target)
        seen = net.probe(net.nodes[target], CLIENT_PORT)
        how = f"ip link down (bridge port); host -> {target}: {seen}"
        return Outcome(seen in _CUT, how, "" if seen in _CUT else f"host still reaches it: {seen}")
    if kind == "partition-pair":
        a, b = target.split("|")
        net.cut(a, b)
        ways = _both_ways(net, a, b)
        how = f"tc bpf drop both ways; {a} -> {b}: {ways[0]}, {b} -> {a}: {ways[1]}"
        cut = all(w in _CUT for w in ways)
        return Outcome(cut, how, "" if cut else f"packets still pass: {ways}")
    if kind in ("degrade", "degrade-pair"):
        ends = target.split("|")
        node, peer = ends[0], (ends[1] if len(ends) > 1 else None)
        how = net.degrade(node, peer=peer)
        # Traffic through the shaping classes: the workload's, or a probe's.
        if peer is None:
            net.probe(net.nodes[node], CLIENT_PORT, timeout=2.0)
        else:
            _both_ways(net, node, peer, timeout=2.0)
        packets = net.shaped_packets(node, peer=peer)
        shaped = all(n > 0 for n in packets)
        how += f"; packets shaped per direction so far {packets}"
        why = "" if shaped else f"no packets through a shaped class: {packets}"
        return Outcome(shaped, how, why)
    if kind == "disk-full":
        assert topo.store_mount is not None
        code, written = fill(topo.store_mount / "filler")
        ended = errno.errorcode.get(code, code) if code is not None else "no error"
        how = f"tmpfs filled: {written // (1 << 20)} MiB written, then {ended}"
        full = code == errno.ENOSPC
        return Outcome(full, how, "" if full else f"the filler stopped without ENOSPC ({code})")
    raise ValueError(f"unknown server fault kind {kind!r}")


_CUT = ("timeout", "unreachable")


def _both_ways(net: Net, a: str, b: str, timeout: float = 1.0) -> list[str]:
    with ThreadPoolExecutor(2) as pool:
        ab = pool.submit(net.probe, net.nodes[b], CLIENT_PORT, src=a, timeout=timeout)
        ba = pool.submit(net.probe, net.nodes[a], CLIENT_PORT, src=b, timeout=timeout)
        return [ab.result(), ba.result()]


def heal(topo: Topology, net: Net, kind: str, target: str, outcome: Outcome) -> None:
    if kind == "server-kill":
        topo.restart(target)
    elif kind == "server-pause":
        topo.servers[target].resume()
    elif kind == "cluster-kill":
        for node in topo.members():
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
        if outcome.landed:
            # nats-server 2.15.1 keeps failing writes after ENOSPC even once space is
            # freed, until it restarts (torture/repro_disk_full.py): the operator's step.
            topo.restart(target)


def fill(path: Path) -> tuple[int | None, int]:
    """Fill the filesystem holding ``path``: (the errno that ended it, bytes written).

    ENOSPC is the fault; any other error means it did not happen.
    """
    chunk = b"\0" * (1 << 20)
    written = 0
    try:
        with open(path, "wb") as f:
            while True:
                written += f.write(chunk)
                f.flush()
    except OSError as exc:
        return exc.errno, written


def server_log_size(topo: Topology, node: str) -> int:
    try:
        return topo.servers[node].log_file.stat().st_size
    except OSError:
        return 0


def server_log_has(topo: Topology, node: str, since: int, text: str) -> bool:
    """Whether ``node``'s server log holds ``text`` after byte ``since``."""
    try:
        with open(topo.servers[node].log_file, "rb") as f:
            f.seek(since)
            return text.encode() in f.read()
    except OSError:
        return False
