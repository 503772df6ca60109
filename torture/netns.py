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
both); ``degrade`` makes a node's link (in both directions: its ``eth0`` shapes
what it sends, its bridge port what it receives), or the link between two nodes,
slow and lossy (an HTB class of a few Mbit/s with a short queue, plus random
loss: netem where the kernel has it, else a classic-BPF filter on the kernel's
per-packet random number, since this CI kernel has neither ``sch_netem`` nor
``act_gact``). All of it lives inside the run's namespaces and goes with them.
:meth:`Net.probe` (a TCP connection from the host or from a node's namespace)
and :meth:`Net.shaped_packets` (the shaping classes' counters) let the harness
check that a fault took effect.

Everything created is written to a state file under :data:`STATE_DIR` *before*
it is created; :func:`cleanup_stale` (run at the start of each campaign) removes
what a crashed earlier run left, by recorded name only, after checking that the
recording process is gone.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

STATE_DIR = Path(os.environ.get("TORTURE_STATE_DIR", "/run/oncestream-torture"))
#: tc filter priorities (lower runs first) per fault, plus the peer's slot (0 = everyone).
CUT, LOSS, SHAPE = 20, 40, 60
_SKF_AD_RANDOM = 0xFFFFF000 + 56  # classic BPF ancillary load: a per-packet random u32
_UNREACHABLE = {errno.EHOSTUNREACH, errno.ENETUNREACH}


def class_packets(shown: str, classid: str) -> int:
    """Packets sent through ``classid`` in ``tc -s class show`` text (0 if absent).

    (iproute2 6.1 prints no JSON for class statistics.)
    """
    blocks = re.split(r"\n(?=class )", shown)
    for block in blocks:
        if block.split()[2:3] == [classid]:
            sent = re.search(r"Sent \d+ bytes (\d+) pkt", block)
            return int(sent.group(1)) if sent else 0
    return 0


def _probe_in(ns: str, dst: str, port: int, timeout: float) -> str:
    """:meth:`Net.probe` from inside namespace ``ns`` (bash's /dev/tcp, bounded by timeout)."""
    cmd = ["ip", "netns", "exec", ns, "timeout", f"{timeout:g}", "bash", "-c",
           f"exec 3<>/dev/tcp/{dst}/{port}"]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 10, check=False)
    if result.returncode == 0:
        return "open"
    if result.returncode == 124:
        return "timeout"
    if "refused" in result.stderr:
        return "refused"
    if "No route" in result.stderr or "unreachable" in result.stderr:
        return "unreachable"
    return f"error: {result.stderr.strip()[-200:]}"


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
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            out, err = proc.communicate(timeout=20)
        except BaseException:
            # Interrupted (the run's SIGTERM) or timed out: wait until the command is gone.
            # subprocess.run waits a quarter of a second after an interrupt; a slow
            # `ip netns add` finished after the teardown had removed its namespace, and
            # the namespace was left behind (a loaded CI run).
            proc.kill()
            proc.wait()
            raise
    result = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
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
    removed: list[str] = []
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
        self._shaped: set[tuple[str, str]] = set()  # (namespace, device) with the HTB root
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
        # The peer is born in the bridge namespace: a name in the root namespace is shared
        # by every run, and one left there (its run killed between two steps) made every
        # later run fail with "File exists" (CI run of 1b36b3e).
        peer = ("peer", "name", "host", "netns", self.bridge_ns)
        _ip("ip", "link", "add", host_link, "type", "veth", *peer)
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

    def _dev(self, node: str, *, inbound: bool = False) -> tuple[str, str]:
        """(namespace, device) whose egress carries what ``node`` sends (its ``eth0``) or,
        ``inbound``, what it receives (its veth peer on the bridge)."""
        return (self.bridge_ns, f"v{node}") if inbound else (self._ns_name(node), "eth0")

    def _htb(self, ns: str, dev: str) -> None:
        """An HTB root on ``dev`` (once per device), default class 1:1 unshaped,
        class 1:99 a ``blackhole`` qdisc (every packet classified there is dropped)."""
        if (ns, dev) in self._shaped:
            return
        _ip("tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb",
            "default", "1", "r2q", "100000", ns=ns)  # fmt: skip
        for cls in ("1:1", "1:99"):
            _ip("tc", "class", "replace", "dev", dev, "parent", "1:", "classid", cls,
                "htb", "rate", "10gbit", ns=ns)  # fmt: skip
        _ip("tc", "qdisc", "replace", "dev", dev, "parent", "1:99", "handle", "99:",
            "blackhole", ns=ns)  # fmt: skip
        self._shaped.add((ns, dev))

    def _slot(self, peer: str | None) -> int:
        """0 for the whole node, else the peer's host number (1-based, < 20)."""
        return 0 if peer is None else int(self.nodes[peer].rsplit(".", 1)[1])

    def _filter(
        self, ns: str, dev: str, prio: int, classid: str, *, dst: str | None, pct: float
    ) -> None:
        bytecode = drop_bytecode(dst, pct)
        _ip("tc", "filter", "replace", "dev", dev, "parent", "1:", "protocol", "ip",
            "prio", str(prio), "bpf", "bytecode", bytecode, "classid", classid,
            ns=ns)  # fmt: skip

    def _unfilter(self, ns: str, dev: str, prio: int) -> None:
        _ip("tc", "filter", "del", "dev", dev, "parent", "1:", "prio", str(prio),
            ns=ns, check=False)  # fmt: skip

    def cut(self, a: str, b: str) -> None:
        """Partition ``a`` from ``b`` only: each side drops every IPv4 packet to the other
        (a classic-BPF tc filter into the blackhole class); clients still reach both."""
        for x, y in ((a, b), (b, a)):
            ns, dev = self._dev(x)
            self._htb(ns, dev)
            self._filter(ns, dev, CUT + self._slot(y), "1:99", dst=self.nodes[y], pct=100.0)

    def uncut(self, a: str, b: str) -> None:
        for x, y in ((a, b), (b, a)):
            self._unfilter(*self._dev(x), CUT + self._slot(y))

    def _shaped_links(self, node: str, peer: str | None) -> list[tuple[str, str, int, str | None]]:
        """(namespace, device, slot, destination) of each direction a degrade shapes:
        between two nodes, each one's ``eth0`` towards the other; a whole node, its
        ``eth0`` (what it sends) and its bridge port (what it receives)."""
        if peer is None:
            return [(*self._dev(node), 0, None), (*self._dev(node, inbound=True), 0, None)]
        return [
            (*self._dev(node), self._slot(peer), self.nodes[peer]),
            (*self._dev(peer), self._slot(node), self.nodes[node]),
        ]

    def degrade(
        self, node: str, *, peer: str | None = None, loss_pct: float = 5.0, delay_ms: int = 150
    ) -> str:
        """A slow, lossy link: to and from ``node`` (everyone), or (``peer``) between two
        nodes, both directions; returns how.

        Each direction's egress goes through an HTB class of low rate (a few
        Mbit/s: queueing latency under load) whose queue holds ``delay_ms`` of it
        (tail drops beyond). The child qdisc is ``netem`` (delay and random loss) where
        the kernel has it; without ``sch_netem`` (this CI's kernel), random loss is a
        classic-BPF tc filter sending ``loss_pct`` % of the packets (the kernel's
        per-packet random number) to the blackhole class.
        """
        how = ""
        for ns, dev, slot, dst in self._shaped_links(node, peer):
            rate_kbit = 2048 if peer is None else 4096
            how = self._degrade_one(ns, dev, slot, dst, rate_kbit, loss_pct, delay_ms)
        return how

    def _degrade_one(
        self,
        ns: str,
        dev: str,
        slot: int,
        dst: str | None,
        rate_kbit: int,
        loss_pct: float,
        delay_ms: int,
    ) -> str:
        self._htb(ns, dev)
        classid = f"1:{SHAPE + slot}"
        _ip("tc", "class", "replace", "dev", dev, "parent", "1:", "classid", classid,
            "htb", "rate", f"{rate_kbit}kbit", "ceil", f"{rate_kbit}kbit", ns=ns)  # fmt: skip
        netem = ["tc", "qdisc", "replace", "dev", dev, "parent", classid, "netem"]
        netem += ["delay", f"{delay_ms}ms", f"{max(1, delay_ms // 4)}ms", "loss", f"{loss_pct}%"]
        if _ip(*netem, ns=ns, check=False).returncode == 0:
            how = f"htb {rate_kbit}kbit + netem delay {delay_ms}ms loss {loss_pct}%"
        else:
            limit = max(3000, rate_kbit * 1000 // 8 * delay_ms // 1000)  # bytes
            _ip("tc", "qdisc", "replace", "dev", dev, "parent", classid, "bfifo",
                "limit", str(limit), ns=ns)  # fmt: skip
            if loss_pct:
                self._filter(ns, dev, LOSS + slot, "1:99", dst=dst, pct=loss_pct)
            how = f"htb {rate_kbit}kbit, queue {delay_ms}ms, bpf random loss {loss_pct}%"
        self._filter(ns, dev, SHAPE + slot, classid, dst=dst, pct=100.0)
        return f"{how}, both directions"

    def degrade_clear(self, node: str, *, peer: str | None = None) -> None:
        for ns, dev, slot, _ in self._shaped_links(node, peer):
            self._unfilter(ns, dev, LOSS + slot)
            self._unfilter(ns, dev, SHAPE + slot)
            _ip("tc", "class", "del", "dev", dev, "classid", f"1:{SHAPE + slot}",
                ns=ns, check=False)  # fmt: skip

    def shaped_packets(self, node: str, *, peer: str | None = None) -> list[int]:
        """Packets each direction of a degrade sent through its shaping class so far."""
        out = []
        for ns, dev, slot, _ in self._shaped_links(node, peer):
            shown = _ip("tc", "-s", "class", "show", "dev", dev, ns=ns, check=False).stdout
            out.append(class_packets(shown, f"1:{SHAPE + slot}"))
        return out

    def link_is_up(self, node: str) -> bool:
        shown = _ip("ip", "-j", "link", "show", "dev", f"v{node}", ns=self.bridge_ns, check=False)
        try:
            links = json.loads(shown.stdout or "[]")
        except ValueError:
            return False
        return bool(links) and "UP" in links[0].get("flags", [])

    def probe(self, dst: str, port: int, *, src: str | None = None, timeout: float = 1.0) -> str:
        """Try a TCP connection to ``dst:port`` from the host or from ``src``'s namespace.

        ``open`` (connected), ``refused`` (a reset came back: packets pass),
        ``timeout`` or ``unreachable`` (nothing came back: the path is cut).
        """
        if src is None:
            try:
                with socket.create_connection((dst, port), timeout=timeout):
                    return "open"
            except ConnectionRefusedError:
                return "refused"
            except TimeoutError:
                return "timeout"
            except OSError as exc:
                return "unreachable" if exc.errno in _UNREACHABLE else f"error: {exc}"
        return _probe_in(self._ns_name(src), dst, port, timeout)

    def teardown(self) -> None:
        """Remove everything this run created (idempotent)."""
        _remove(self.state)
        self.state_file.unlink(missing_ok=True)
        self.state_file.with_suffix(".tmp").unlink(missing_ok=True)

    def __enter__(self) -> Net:
        return self

    def __exit__(self, *exc: object) -> None:
        self.teardown()
