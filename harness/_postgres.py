"""A throw-away PostgreSQL server for tests and benchmarks, from the Debian binaries.

Started with ``initdb`` + ``postgres`` in a temp dir on 127.0.0.1 and a free
port; readiness is the server's own "ready to accept connections" log line;
stopped by PID, and killed with the process that started it if that one dies by a
signal. When the tests run as root the server runs as the ``postgres`` user
(PostgreSQL refuses to run as root).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections import deque
from pathlib import Path

from ._procs import free_port, start_logged, stop_group

_READY = "database system is ready to accept connections"


def find_pg_bin() -> Path:
    """Directory holding ``initdb`` and ``postgres``, or a clear failure."""
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.path.exists(os.path.join(candidate, "initdb")):
            return Path(candidate)
    found = shutil.which("initdb")
    if found:
        return Path(os.path.realpath(found)).parent
    raise RuntimeError(
        "PostgreSQL server binaries not found: install them "
        "(Debian: make test installs them: scripts/install-test-services)"
    )


class PostgresServer:
    """One PostgreSQL instance; :attr:`url` is a superuser DSN to database ``postgres``.

    Args:
        fsync: PostgreSQL's ``fsync`` (off by default: tests need no durability; a
            benchmark of commits turns it on, as PostgreSQL's own default is).
    """

    def __init__(self, *, fsync: bool = False) -> None:
        self.fsync = fsync
        self.bin = find_pg_bin()
        self.dir = Path(tempfile.mkdtemp(prefix="oncestream-pg-"))
        self.port = free_port()
        self._proc: subprocess.Popen[bytes] | None = None
        self._tail: deque[str] = deque(maxlen=30)
        self._as: list[str] = []
        self._user: str | None = None
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.dir, user.pw_uid, user.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
            # The server itself is started as postgres without runuser: runuser would
            # stand between the test process and the postmaster, which then outlives a
            # worker killed by a signal (the parent-death signal ties the direct child).
            self._user = "postgres"

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self, timeout: float = 60.0) -> PostgresServer:
        data = self.dir / "data"
        subprocess.run(
            [
                *self._as,
                str(self.bin / "initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        try:
            self._proc = start_logged(
                [
                    str(self.bin / "postgres"),
                    "-D",
                    str(data),
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(self.port),
                    "-k",
                    str(self.dir),
                    "-c",
                    f"fsync={'on' if self.fsync else 'off'}",
                    "-c",
                    "max_connections=100",
                ],
                _READY,
                self._tail,
                timeout=timeout,
                what="PostgreSQL",
                user=self._user,
            )
        except RuntimeError:
            self.stop()  # its directory too
            raise
        return self

    def password_role(self, name: str, password: str) -> str:
        """Create (or reset) login role ``name`` that must give ``password`` (scram-sha-256).

        Members of the ``pw_login`` group authenticate with their password; every
        other role keeps the server's ``trust`` rule. Returns a URL to database
        ``postgres`` as that role, without the password.
        """
        import psycopg
        from psycopg import sql

        hba = self.dir / "data" / "pg_hba.conf"
        rule = "host all +pw_login 127.0.0.1/32 scram-sha-256\n"
        with psycopg.connect(self.url, autocommit=True) as admin:
            if rule not in hba.read_text():
                admin.execute(
                    "DO $$ BEGIN CREATE ROLE pw_login NOLOGIN;"
                    " EXCEPTION WHEN duplicate_object THEN NULL; END $$"
                )
                hba.write_text(rule + hba.read_text())
                admin.execute("SELECT pg_reload_conf()")
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))
            admin.execute(
                sql.SQL("CREATE ROLE {} LOGIN IN ROLE pw_login PASSWORD {}").format(
                    sql.Identifier(name), sql.Literal(password)
                )
            )
        url = f"postgresql://{name}@127.0.0.1:{self.port}/postgres"
        # The postmaster reloads pg_hba.conf asynchronously: wait until it asks for passwords.
        deadline = time.monotonic() + 10
        while True:
            try:
                psycopg.connect(url, password="not-" + password, connect_timeout=5).close()
            except psycopg.OperationalError as exc:
                if "password authentication failed" in str(exc):
                    return url
                raise
            if time.monotonic() > deadline:
                raise RuntimeError("pg_hba.conf password rule not in effect after 10 s")
            time.sleep(0.05)

    @property
    def pid(self) -> int | None:
        """The postmaster's process id while the server runs (None: not running)."""
        return None if self._proc is None else self._proc.pid

    def stop(self) -> None:
        if self._proc is not None:
            # SIGINT is PostgreSQL's "fast shutdown".
            stop_group(self._proc, signal.SIGINT, timeout=30)
        self._proc = None
        shutil.rmtree(self.dir, ignore_errors=True)
