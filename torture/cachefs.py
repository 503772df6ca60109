"""A nats-server store on our page-cache file system: what an OS crash does to writes
that were not fsynced.

``torture/pagecache`` (Go, github.com/hanwen/go-fuse; built by ``make pagecache`` into
the git-ignored ``torture/.pagecache``) is a FUSE loopback file system that holds every
file write in memory (reads see it over the file below) and passes it to the folder
below only on ``fsync``/``fdatasync`` or through an ``O_SYNC``/``O_DSYNC`` handle. Told
``drop`` on its control socket, it forgets whatever was not synced, as the kernel's
page cache is lost when the machine (not only the process) goes down: a kernel crash or
a power cut, without taking this shared machine down. Jepsen's NATS analysis
(jepsen.io/analyses/nats-2.12.1: kill, then lose the unfsynced writes) used LazyFS for
the same; docs/guarantees.md says what this one does and does not lose.

One :class:`CacheMount` per node: the node's store folder is the mount, the data lives in
``<work>/<node>/cache-root``. An OS crash of a node is: SIGKILL of its server,
:meth:`CacheMount.drop` (how much it threw away: the landing evidence), then a restart.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: Where ``make pagecache`` puts the binary.
BIN = Path(os.environ.get("TORTURE_PAGECACHE_BIN", HERE / ".pagecache" / "pagecache"))
#: The mount's type in /proc/mounts (``fuse.`` and the name it mounts with).
FSTYPE = "fuse.pagecache"


class CacheFSError(RuntimeError):
    """The file system did not build, mount, or answer a command in time."""


def build(timeout: float = 600.0) -> Path:
    """``make pagecache`` (a no-op when built and up to date); the binary's path.

    Raises:
        CacheFSError: Go is missing or the build failed (make's own message included).
    """
    if "TORTURE_PAGECACHE_BIN" in os.environ:
        return BIN
    try:
        done = subprocess.run(
            ["make", "--no-print-directory", "-s", "-C", str(ROOT), "pagecache"],
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
    except FileNotFoundError as exc:
        raise CacheFSError("building torture/pagecache needs make, not found on PATH") from exc
    if done.returncode != 0 or not BIN.is_file():
        raise CacheFSError(f"`make pagecache` failed ({done.returncode}): {done.stderr.strip()}")
    return BIN


def unavailable() -> str | None:
    """None when the file system can run here (built if needed), else why not."""
    if not Path("/dev/fuse").exists():
        return "/dev/fuse is missing: the page-cache file system needs FUSE"
    if os.geteuid() != 0:
        return "mounting the page-cache file system here needs root"
    try:
        build()
    except CacheFSError as exc:
        return str(exc)
    return None


class CacheMount:
    """One mount: ``mount`` shows ``root``'s files, writes held until fsync."""

    def __init__(self, mount: Path, work: Path) -> None:
        self.mount, self.work = mount, work
        self.root = work / "cache-root"
        self.control = work / "pagecache.sock"
        self.out = work / "pagecache.out"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 20.0) -> None:
        """Mount (foreground process, so its PID is known); bounded wait for the mount."""
        for path in (self.mount, self.root):
            path.mkdir(parents=True, exist_ok=True)
        argv = [str(BIN), "-root", str(self.root), "-control", str(self.control),
                str(self.mount)]  # fmt: skip
        with open(self.out, "ab") as out:
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while not (self.mounted() and self.control.exists()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise CacheFSError(f"pagecache did not mount {self.mount}: see {self.out}")
            time.sleep(0.05)  # another process's mount: nothing to await on

    def mounted(self) -> bool:
        return f" {self.mount} {FSTYPE} " in Path("/proc/mounts").read_text()

    def _command(self, command: str, timeout: float) -> list[str]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            try:
                sock.connect(str(self.control))
                sock.sendall(command.encode() + b"\n")
                reply = sock.makefile("rb").readline().decode().split()
            except OSError as exc:
                raise CacheFSError(f"pagecache at {self.mount}: {command}: {exc}") from exc
        if len(reply) != 3 or not reply[1].isdigit():
            raise CacheFSError(f"pagecache at {self.mount}: {command}: answered {reply}")
        return reply

    def unsynced_bytes(self, timeout: float = 10.0) -> int:
        """Bytes written and not synced, held in memory now."""
        return int(self._command("unsynced", timeout)[1])

    def drop(self, timeout: float = 10.0) -> int:
        """Forget every write not synced (the OS crash); the bytes it forgot."""
        return int(self._command("drop", timeout)[1])

    def stop(self) -> None:
        """Unmount and end the process (idempotent)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # it unmounts on SIGTERM
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.mounted():
            subprocess.run(["umount", "-l", str(self.mount)], capture_output=True,
                           check=False, timeout=20)  # fmt: skip
