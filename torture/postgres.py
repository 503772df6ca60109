"""A trial's PostgreSQL, in its own network namespace, and the faults that hit it.

Every trial runs its own PostgreSQL server (the ledger and effects of the
PostgreSQL ``Processor`` pair, or of the group members with ``members=partitioned``,
and the Spark job's ``transactional`` table when drawn) in namespace ``pg`` of the
trial's network, so that it can be killed, paused and cut off from one member of
the pair or group (each of ``pg1``, ``pg2`` runs in a namespace of its own, ``m1``,
``m2``) without touching anything outside the trial. The data
folder is a copy of one ``initdb`` per campaign (a template: a trial's server is
up in about a second); it runs with PostgreSQL's defaults (``fsync`` on).

Faults (:data:`KINDS`):

* ``pg-kill``: SIGKILL of every PostgreSQL process (the postmaster and its
  backends: its process group), restarted after the fault (crash recovery from
  the WAL); landed when the postmaster's PID is gone.
* ``pg-pause``: SIGSTOP of every PostgreSQL process, SIGCONT at the heal; landed
  when the postmaster's state is ``T``.
* ``pg-cut``: the member ``pg1`` or ``pg2`` and the server cut from each other
  (both directions: :meth:`torture.netns.Net.cut`), everyone else still reaches
  both; landed when a TCP connection from the member's namespace to the server
  gets no answer.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections import deque
from pathlib import Path

KINDS = ("pg-kill", "pg-pause", "pg-cut")
PORT = 5432
NODE = "pg"
#: The namespaces of the PostgreSQL pair or members (``pg1`` -> ``m1``...), so a cut
#: reaches one.
MEMBER_NODES = {"pg1": "m1", "pg2": "m2"}
_READY = "database system is ready to accept connections"


def _as_postgres() -> list[str]:
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


def _chown(path: Path) -> None:
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        for root, dirs, files in os.walk(path):
            for name in (root, *(os.path.join(root, d) for d in dirs)):
                os.chown(name, user.pw_uid, user.pw_gid)
            for f in files:
                os.chown(os.path.join(root, f), user.pw_uid, user.pw_gid)


def make_template() -> Path:
    """One ``initdb`` for the campaign; each trial copies it. Trust auth for the trial
    networks' addresses (the servers bind only inside the trial's namespace)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from harness import find_pg_bin

    base = Path(tempfile.mkdtemp(prefix="oncestream-torture-pg-"))
    data = base / "data"
    _chown(base)
    subprocess.run(
        [*_as_postgres(), str(find_pg_bin() / "initdb"), "-D", str(data), "-U", "postgres",
         "--auth=trust", "-E", "UTF8"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    with open(data / "pg_hba.conf", "a") as hba:
        hba.write("host all all 10.77.0.0/16 trust\n")
    return base


class TrialPostgres:
    """The PostgreSQL of one trial: started in namespace ``ns_prefix`` at ``address``."""

    def __init__(self, template: Path, work: Path, address: str, ns_prefix: tuple[str, ...]):
        import sys

        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from harness import find_pg_bin

        self.bin = find_pg_bin()
        self.dir = work / "postgres"
        self.address, self.ns_prefix = address, ns_prefix
        self.data = self.dir / "data"
        self.log = self.dir / "postgres.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._tail: deque[str] = deque(maxlen=30)
        self.dir.mkdir(parents=True, exist_ok=True)
        shutil.copytree(template / "data", self.data, symlinks=True)
        _chown(self.dir)

    @property
    def admin_url(self) -> str:
        return f"postgresql://postgres@{self.address}:{PORT}/postgres"

    def url(self, db: str) -> str:
        return f"postgresql://postgres@{self.address}:{PORT}/{db}"

    def start(self, timeout: float = 60.0) -> None:
        """Start (or restart after a kill: crash recovery); returns once it is ready."""
        # A SIGKILLed server's lock files: the new one refuses to start beside them.
        (self.data / "postmaster.pid").unlink(missing_ok=True)
        for name in (f".s.PGSQL.{PORT}.lock", f".s.PGSQL.{PORT}"):
            (self.dir / name).unlink(missing_ok=True)
        start = self.log.stat().st_size if self.log.exists() else 0
        argv = [*self.ns_prefix, *_as_postgres(), str(self.bin / "postgres"), "-D",
                str(self.data), "-h", self.address, "-p", str(PORT), "-k", str(self.dir),
                "-c", "max_connections=60"]  # fmt: skip
        log = open(self.log, "ab")  # noqa: SIM115 - the server's lifetime, closed in stop
        self.proc = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while True:
            with open(self.log, "rb") as f:
                f.seek(start)  # this start's lines only (an earlier run's are above)
                if _READY.encode() in f.read():
                    return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = self.log.read_text(errors="replace").splitlines()[-15:]
                raise RuntimeError("the trial's PostgreSQL did not start:\n" + "\n".join(tail))
            time.sleep(0.05)  # the server's log line: a file, nothing to await on

    @property
    def pid(self) -> int | None:
        """The postmaster's PID (from ``postmaster.pid``), None when it is not running."""
        try:
            pid = int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        return pid

    def processes(self) -> list[int]:
        """Every process of the server: ``runuser``, the postmaster, each backend (they call
        ``setsid``, so a process group would miss them: found in /proc instead)."""
        from .spark import descendants

        if self.proc is None or self.proc.poll() is not None:
            return []
        return [self.proc.pid, *descendants(self.proc.pid)]

    def signal_all(self, sig: signal.Signals) -> list[int]:
        """``sig`` to every PostgreSQL process; the PIDs signalled."""
        pids = self.processes()
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        return pids

    def kill(self) -> list[int]:
        """SIGKILL of every process (a crash of the server); the PIDs killed."""
        self.signal_all(signal.SIGCONT)
        pids = self.signal_all(signal.SIGKILL)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        return pids

    def stop(self) -> None:
        """At the trial's end: every process gone (idempotent)."""
        self.kill()
