"""A nats-server store on LazyFS: what an OS crash does to writes that were not fsynced.

LazyFS (github.com/dsrhaslab/lazyfs, built by ``scripts/build-lazyfs`` into the
git-ignored ``torture/.lazyfs``; ``make lazyfs``) is a FUSE file system that keeps
every write in its own page cache and passes it to the folder below only on
``fsync`` (or ``fdatasync``). Told ``lazyfs::clear-cache`` it drops whatever was
not synced, as the kernel's page cache is lost when the machine (not only the
process) goes down: a kernel crash or a power cut, without taking this shared
machine down. Jepsen's NATS analysis (jepsen.io/analyses/nats-2.12.1, jepsen-io/nats
``db.clj``: kill, then ``lose-unfsynced-writes!``) used the same tool.

One :class:`LazyMount` per node: the node's store folder is the mount, the data
lives in ``<work>/<node>/lazyfs-root``. An OS crash of a node is: SIGKILL of its
server, :meth:`LazyMount.unsynced_bytes` (how much the crash throws away: the
landing evidence), :meth:`LazyMount.clear_cache`, then a restart.
"""

from __future__ import annotations

import os
import re
import select
import subprocess
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: Where ``scripts/build-lazyfs`` puts the binary (and its libpcache).
BIN = Path(os.environ.get("TORTURE_LAZYFS_BIN", HERE / ".lazyfs" / "bin"))
#: LazyFS allocates its whole cache up front; a trial's stores hold a few MiB.
CACHE = "128mb"
_UNSYNCED = re.compile(r"total number of bytes un-fsynced: (\d+) bytes")


def available() -> str | None:
    """None when LazyFS can run here, else why not (the fix included)."""
    if not (BIN / "lazyfs").is_file():
        return f"LazyFS is not built ({BIN / 'lazyfs'} missing): run `make lazyfs`"
    if not Path("/dev/fuse").exists():
        return "/dev/fuse is missing: LazyFS needs FUSE"
    if os.geteuid() != 0:
        return "mounting LazyFS here needs root"
    return None


class LazyFSError(RuntimeError):
    """LazyFS did not mount, or did not answer a command in time."""


class LazyMount:
    """One LazyFS mount: ``mount`` shows ``root``'s files, writes cached until fsync."""

    def __init__(self, mount: Path, work: Path) -> None:
        self.mount, self.work = mount, work
        self.root = work / "lazyfs-root"
        self.fifo = work / "lazyfs.fifo"
        self.done_fifo = work / "lazyfs-done.fifo"
        self.log = work / "lazyfs.log"
        self.config = work / "lazyfs.toml"
        self.proc: subprocess.Popen[bytes] | None = None
        self._done_fd: int | None = None

    def start(self, timeout: float = 20.0) -> None:
        """Mount (foreground process, so its PID is known); bounded wait for the mount."""
        for path in (self.mount, self.root):
            path.mkdir(parents=True, exist_ok=True)
        for fifo in (self.fifo, self.done_fifo):
            if not fifo.exists():
                os.mkfifo(fifo, 0o600)
        self.config.write_text(
            "[faults]\n"
            f'fifo_path="{self.fifo}"\n'
            f'fifo_path_completed="{self.done_fifo}"\n'
            "[cache]\napply_eviction=false\n"
            f'[cache.simple]\ncustom_size="{CACHE}"\nblocks_per_page=1\n'
            f'[filesystem]\nlog_all_operations=false\nlogfile="{self.log}"\n'
        )
        # LazyFS opens the completion FIFO for writing when it starts, which blocks until
        # a reader has it open: hold one (non-blocking) for the mount's whole life.
        self._done_fd = os.open(self.done_fifo, os.O_RDONLY | os.O_NONBLOCK)
        env = {**os.environ, "LD_LIBRARY_PATH": str(BIN)}
        argv = [str(BIN / "lazyfs"), str(self.mount), "--config-path", str(self.config),
                "-o", "allow_other", "-o", "modules=subdir", "-o", f"subdir={self.root}",
                "-f"]  # fmt: skip
        with open(self.work / "lazyfs.out", "ab") as out:
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=out, env=env, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while not self.mounted():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise LazyFSError(f"LazyFS did not mount {self.mount}: see {self.work}/lazyfs.out")
            time.sleep(0.05)  # another process's mount: nothing to await on

    def mounted(self) -> bool:
        target = f" {self.mount} fuse.lazyfs "
        return target in Path("/proc/mounts").read_text()

    def _command(self, command: str) -> None:
        # O_NONBLOCK: never hang the harness on a LazyFS that died (ENXIO: no reader).
        fd = os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)
        try:
            os.write(fd, (command + "\n").encode())
        finally:
            os.close(fd)

    def unsynced_bytes(self, timeout: float = 10.0) -> int:
        """Bytes written and not fsynced (``lazyfs::unsynced-data-report``; from its log)."""
        start = self.log.stat().st_size if self.log.exists() else 0
        self._command("lazyfs::unsynced-data-report")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open(self.log, "rb") as f:
                f.seek(start)
                text = f.read().decode(errors="replace")
            found = _UNSYNCED.search(text)
            if found:
                return int(found.group(1))
            if "all data blocks are synced" in text:
                return 0
            time.sleep(0.05)  # LazyFS writes its log line: a file, nothing to await on
        raise LazyFSError(f"no unsynced-data report from LazyFS at {self.mount} in {timeout}s")

    def clear_cache(self, timeout: float = 10.0) -> None:
        """Drop every write not fsynced; returns once LazyFS says it is done."""
        assert self._done_fd is not None
        while True:  # an earlier command's leftover answer
            try:
                if not os.read(self._done_fd, 4096):
                    break
            except BlockingIOError:
                break
        self._command("lazyfs::clear-cache")
        got = b""
        deadline = time.monotonic() + timeout
        while b"finished::clear-cache" not in got:
            left = deadline - time.monotonic()
            if left <= 0:
                raise LazyFSError(f"LazyFS at {self.mount} did not clear its cache in {timeout}s")
            ready, _, _ = select.select([self._done_fd], [], [], left)
            if ready:
                try:
                    got += os.read(self._done_fd, 4096)
                except BlockingIOError:
                    continue

    def stop(self) -> None:
        """Unmount and end the LazyFS process (idempotent)."""
        if self.mounted():
            subprocess.run(["umount", "-l", str(self.mount)], capture_output=True,
                           check=False, timeout=20)  # fmt: skip
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        if self._done_fd is not None:
            os.close(self._done_fd)
            self._done_fd = None
