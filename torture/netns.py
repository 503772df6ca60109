"""Network namespaces for the fault campaign: one per nats-server, a bridge, host access.

Layout for run id ``r`` (4 hex chars) and subnet ``10.77.<k>.0/24``:

* namespace ``os-r-br`` holds bridge ``br0``;
* namespace ``os-r-<node>`` holds ``eth0`` = ``10.77.<k>.<i>/24``, its veth peer
  ``v<node>`` is enslaved to ``br0``;
* the host gets veth ``osr-h`` = ``10.77.<k>.254/24`` whose peer ``host`` is on
  ``br0``, so clients run on the host and reach every server directly (no
  forwarding, no NAT, nothing touched outside what we create).

Faults: ``link_down``/``link_up`` set the node's bridge-side veth down (the
node is cut from everyone, clients included); ``cut``/``uncut`` partition two
nodes only (each drops what it sends to the other: a classic-BPF ``tc`` filter
into a ``blackhole`` class of an HTB root on its ``eth0``; clients still reach
both); ``degrade`` makes a node's link, or the link between two nodes, slow and
lossy (an HTB class of a few Mbit/s with a short queue, plus random loss: netem
where the kernel has it, else a classic-BPF filter on the kernel's per-packet
random number, since this CI kernel has neither ``sch_netem`` nor ``act_gact``).
All of it lives inside the run's namespaces and goes with them.

Everything created is written to a state file under :data:`STATE_DIR` *before*
it is created; :func:`cleanup_stale` (run at the start of each campaign) removes
what a crashed earlier run left, by recorded name only, after checking that the
recording process is gone.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

STATE_DIR = Path(os.environ.get("TORTURE_STATE_DIR", "/run/oncestream-torture"))
#: tc filter priorities (lower runs first) per fault, plus the peer's slot (0 = everyone).
CUT, LOSS, SHAPE = 20, 40, 60
_SKF_AD_RANDOM = 0xFFFFF000 + 56  # classic BPF ancillary load: a per-packet random u32


def drop_bytecode(dst: str | None, pct: float) -> str:
    """Classic BPF (tc ``bpf bytecode``) matching IPv4 packets to ``dst`` (or any), each
    with probability ``pct`` %; a match goes to the filter's class, the rest fall through.

    Runs at the Ethernet header (tc egress): ethertype at 12, IPv4 destination at 30.
    """
    nomatch = "6 0 0 0"
    prog = ["40 0 0 12"]  # ldh [12]
    body: list[str] = []
    if dst is not None:
        addr = int.from_bytes(bytes(int(x) for x in dst.split(".")), "big")
        body += ["32 0 0 30", f"21 0 @ {addr}"]  # ld [30]; jeq addr or nomatch
    if pct < 100.0:
        threshold = min(0xFFFFFFFF, int(pct / 100.0 * 2**32))
        body += [f"32 0 0 {_SKF_AD_RANDOM}", f"37 @ 0 {threshold}"]  # rand > t: nomatch
    body.append("6 0 0 4294967295")  # ret -1: the filter's classid
    prog.append("21 0 @ 2048")  # jeq IPv4 or nomatch
    prog += body
    end = len(prog)  # index of the nomatch instruction
    resolved = [ins.replace("@", str(end - i - 1)) for i, ins in enumerate(prog)]
    return ",".join([str(len(prog) + 1), *resolved, nomatch])


def _ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = ["ip", "netns", "exec", ns, *args] if ns else list(args)
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {result.stderr.strip()}")
    return result


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove(state: dict[str, Any]) -> None:
    """Undo one recorded run: processes, mounts, host veth, namespaces (each by name)."""
    for pid in state.get("pids", []):
        try:
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for mount in state.get("mounts", []):
        subprocess.run(["umount", "-l", mount], capture_output=True, check=False, timeout=20)
    for link in state.get("host_links", []):
        subprocess.run(
            ["ip", "link", "del", "dev", link], capture_output=True, check=False, timeout=20
        )
    for ns in reversed(state.get("namespaces", [])):
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False, timeout=20)


def cleanup_stale() -> list[str]:
    """Remove leftovers of earlier runs whose harness process is gone; return their run ids."""
    removed = []
    if not STATE_DIR.is_dir():
        return removed
    for path in sorted(STATE_DIR.glob("*.json")):
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if _alive(int(state.get("owner", 0))) and state.get("owner") != os.getpid():
            continue  # a concurrent run (e.g. the smoke test next to `make torture`)
        _remove(state)
        path.unlink(missing_ok=True)
        removed.append(str(state.get("run_id")))
    return removed


def _used_subnets() -> set[int]:
    used = set()
    for path in STATE_DIR.glob("*.json"):
        try:
            used.add(int(json.loads(path.read_text())["subnet"]))
        except (OSError, ValueError, KeyError):
            continue
    routes = _ip("ip", "-4", "route", "show", check=False).stdout
    for k in range(1, 255):
        if f"10.77.{k}." in routes:
            used.add(k)
    return used


class Net:
    """The namespaces of one run. Use as a context manager, or call :meth:`teardown`."""

    def __init__(self, run_id: str) -> None:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        self.run_id = run_id
        self.state_file = STATE_DIR / f"{run_id}.json"
        self.nodes: dict[str, str] = {}  # node -> address
        self._shaped: set[str] = set()  # nodes with the HTB root on eth0
        self.bridge_ns = self._ns_name("br")
        # Choose the subnet and record it under one lock: two campaigns (e.g. the CI
        # smoke next to `make torture`) starting a trial at the same moment must not
        # both take the first free subnet (their clients would reach each other's servers).
        with open(STATE_DIR / "subnets.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            free = [k for k in range(1, 255) if k not in _used_subnets()]
            if not free:
                raise RuntimeError("no free 10.77.<k>.0/24 subnet for the torture network")
            self.subnet = free[0]
            self.state: dict[str, Any] = {
                "run_id": run_id,
                "owner": os.getpid(),
                "subnet": self.subnet,
                "namespaces": [],
                "host_links": [],
                "mounts": [],
                "pids": [],
            }
            self._save()
        try:
            self._setup_bridge(run_id)
        except BaseException:
            self.teardown()
            raise

    def _setup_bridge(self, run_id: str) -> None:
        self._add_ns(self.bridge_ns)
        _ip("ip", "link", "add", "br0", "type", "bridge", ns=self.bridge_ns)
        _ip("ip", "link", "set", "br0", "up", ns=self.bridge_ns)
        _ip("ip", "link", "set", "lo", "up", ns=self.bridge_ns)
        host_link = f"os{run_id}-h"
        self.state["host_links"].append(host_link)
        self._save()
        _ip("ip", "link", "add", host_link, "type", "veth", "peer", "name", "host")
        _ip("ip", "link", "set", "dev", "host", "netns", self.bridge_ns)
        _ip("ip", "link", "set", "dev", "host", "master", "br0", ns=self.bridge_ns)
        _ip("ip", "link", "set", "dev", "host", "up", ns=self.bridge_ns)
        _ip("ip", "addr", "add", f"10.77.{self.subnet}.254/24", "dev", host_link)
        _ip("ip", "link", "set", "dev", host_link, "up")

    def _ns_name(self, node: str) -> str:
        return f"os-{self.run_id}-{node}"

    def _save(self) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state))
        tmp.replace(self.state_file)

    def _add_ns(self, ns: str) -> None:
        self.state["namespaces"].append(ns)
        self._save()
        _ip("ip", "netns", "add", ns)

    def add_node(self, node: str) -> str:
        """Create the namespace of ``node`` on the bridge; return its address."""
        ns = self._ns_name(node)
        index = len(self.nodes) + 1
        address = f"10.77.{self.subnet}.{index}"
        self._add_ns(ns)
        veth = (
            "ip",
            "link",
            "add",
            "eth0",
            "netns",
            ns,
            "type",
            "veth",
            "peer",
            "name",
            f"v{node}",
        )
        _ip(*veth, ns=self.bridge_ns)
        _ip("ip", "link", "set", "dev", f"v{node}", "master", "br0", ns=self.bridge_ns)
        _ip("ip", "link", "set", "dev", f"v{node}", "up", ns=self.bridge_ns)
        _ip("ip", "addr", "add", f"{address}/24", "dev", "eth0", ns=ns)
        _ip("ip", "link", "set", "eth0", "up", ns=ns)
        _ip("ip", "link", "set", "lo", "up", ns=ns)
        self.nodes[node] = address
        return address

    def exec_prefix(self, node: str) -> tuple[str, ...]:
        """argv prefix running a command inside ``node``'s namespace (``ip`` execs it)."""
        return ("ip", "netns", "exec", self._ns_name(node))

    def track_pid(self, pid: int) -> None:
        """Record a process started in a namespace, so a crashed run's cleanup kills it."""
        self.state["pids"].append(pid)
        self._save()

    def track_mount(self, path: str) -> None:
        self.state["mounts"].append(path)
        self._save()

    # -- faults ---------------------------------------------------------------------

    def link_down(self, node: str) -> None:
        _ip("ip", "link", "set", "dev", f"v{node}", "down", ns=self.bridge_ns)

    def link_up(self, node: str) -> None:
        _ip("ip", "link", "set", "dev", f"v{node}", "up", ns=self.bridge_ns)

    def _htb(self, node: str) -> None:
        """An HTB root on ``node``'s ``eth0`` (once per node), default class 1:1 unshaped,
        class 1:99 a ``blackhole`` qdisc (every packet classified there is dropped)."""
        if node in self._shaped:
            return
        ns = self._ns_name(node)
        _ip("tc", "qdisc", "replace", "dev", "eth0", "root", "handle", "1:", "htb",
            "default", "1", "r2q", "100000", ns=ns)  # fmt: skip
        for cls in ("1:1", "1:99"):
            _ip("tc", "class", "replace", "dev", "eth0", "parent", "1:", "classid", cls,
                "htb", "rate", "10gbit", ns=ns)  # fmt: skip
        _ip("tc", "qdisc", "replace", "dev", "eth0", "parent", "1:99", "handle", "99:",
            "blackhole", ns=ns)  # fmt: skip
        self._shaped.add(node)

    def _slot(self, peer: str | None) -> int:
        """0 for the whole node, else the peer's host number (1-based, < 20)."""
        return 0 if peer is None else int(self.nodes[peer].rsplit(".", 1)[1])

    def _filter(self, node: str, prio: int, classid: str, *, dst: str | None, pct: float) -> None:
        bytecode = drop_bytecode(dst, pct)
        _ip("tc", "filter", "replace", "dev", "eth0", "parent", "1:", "protocol", "ip",
            "prio", str(prio), "bpf", "bytecode", bytecode, "classid", classid,
            ns=self._ns_name(node))  # fmt: skip

    def _unfilter(self, node: str, prio: int) -> None:
        _ip("tc", "filter", "del", "dev", "eth0", "parent", "1:", "prio", str(prio),
            ns=self._ns_name(node), check=False)  # fmt: skip

    def cut(self, a: str, b: str) -> None:
        """Partition ``a`` from ``b`` only: each side drops every IPv4 packet to the other
        (a classic-BPF tc filter into the blackhole class); clients still reach both."""
        for x, y in ((a, b), (b, a)):
            self._htb(x)
            self._filter(x, CUT + self._slot(y), "1:99", dst=self.nodes[y], pct=100.0)

    def uncut(self, a: str, b: str) -> None:
        for x, y in ((a, b), (b, a)):
            self._unfilter(x, CUT + self._slot(y))

    def degrade(
        self, node: str, *, peer: str | None = None, loss_pct: float = 5.0, delay_ms: int = 150
    ) -> str:
        """A slow, lossy link: from ``node`` to everyone, or (``peer``) between two nodes in
        both directions; returns how.

        Each side's egress to the other goes through an HTB class of low rate (a few
        Mbit/s: queueing latency under load) whose queue holds ``delay_ms`` of it
        (tail drops beyond). The child qdisc is ``netem`` (delay and random loss) where
        the kernel has it; without ``sch_netem`` (this CI's kernel), random loss is a
        classic-BPF tc filter sending ``loss_pct`` % of the packets (the kernel's
        per-packet random number) to the blackhole class.
        """
        pairs = [(node, None)] if peer is None else [(node, peer), (peer, node)]
        how = ""
        for x, y in pairs:
            how = self._degrade_one(x, y, loss_pct, delay_ms)
        return how

    def _degrade_one(self, node: str, peer: str | None, loss_pct: float, delay_ms: int) -> str:
        self._htb(node)
        ns, slot = self._ns_name(node), self._slot(peer)
        dst = None if peer is None else self.nodes[peer]
        classid = f"1:{SHAPE + slot}"
        rate_kbit = 2048 if peer is None else 4096
        _ip("tc", "class", "replace", "dev", "eth0", "parent", "1:", "classid", classid,
            "htb", "rate", f"{rate_kbit}kbit", "ceil", f"{rate_kbit}kbit", ns=ns)  # fmt: skip
        netem = ["tc", "qdisc", "replace", "dev", "eth0", "parent", classid, "netem"]
        netem += ["delay", f"{delay_ms}ms", f"{max(1, delay_ms // 4)}ms", "loss", f"{loss_pct}%"]
        if _ip(*netem, ns=ns, check=False).returncode == 0:
            how = f"htb {rate_kbit}kbit + netem delay {delay_ms}ms loss {loss_pct}%"
        else:
            limit = max(3000, rate_kbit * 1000 // 8 * delay_ms // 1000)  # bytes
            _ip("tc", "qdisc", "replace", "dev", "eth0", "parent", classid, "bfifo",
                "limit", str(limit), ns=ns)  # fmt: skip
            if loss_pct:
                self._filter(node, LOSS + slot, "1:99", dst=dst, pct=loss_pct)
            how = f"htb {rate_kbit}kbit, queue {delay_ms}ms, bpf random loss {loss_pct}%"
        self._filter(node, SHAPE + slot, classid, dst=dst, pct=100.0)
        return how

    def degrade_clear(self, node: str, *, peer: str | None = None) -> None:
        pairs = [(node, None)] if peer is None else [(node, peer), (peer, node)]
        for x, y in pairs:
            slot = self._slot(y)
            self._unfilter(x, LOSS + slot)
            self._unfilter(x, SHAPE + slot)
            _ip("tc", "class", "del", "dev", "eth0", "classid", f"1:{SHAPE + slot}",
                ns=self._ns_name(x), check=False)  # fmt: skip

    def teardown(self) -> None:
        """Remove everything this run created (idempotent)."""
        _remove(self.state)
        self.state_file.unlink(missing_ok=True)
        self.state_file.with_suffix(".tmp").unlink(missing_ok=True)

    def __enter__(self) -> Net:
        return self

    def __exit__(self, *exc: object) -> None:
        self.teardown()
