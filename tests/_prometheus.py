"""A throw-away Prometheus server for tests, from Debian's ``prometheus`` binary.

Started on 127.0.0.1 and a free port with a temp storage dir and the config
file tests/prometheus/scrape.yml (its targets filled in); readiness is the
server's own "Server is ready to receive web requests." log line; stopped by
PID (its process group). Queried over its HTTP API.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from string import Template
from typing import Any, TypeVar

from harness import free_port, start_logged, stop_group

CONFIG = Path(__file__).parent / "prometheus" / "scrape.yml"
_READY = "Server is ready to receive web requests."
T = TypeVar("T")


def find_prometheus() -> str:
    """The ``prometheus`` binary, or a clear failure."""
    found = shutil.which("prometheus")
    if found is None:
        raise RuntimeError(
            "prometheus not found: install Debian's prometheus package "
            "(make test installs it: scripts/install-test-services)"
        )
    return found


class PrometheusServer:
    """One Prometheus scraping ``targets`` (``host:port``) every ``interval``."""

    def __init__(self, targets: Sequence[str], interval: str = "1s") -> None:
        self.binary = find_prometheus()
        self.dir = Path(tempfile.mkdtemp(prefix="oncestream-prom-"))
        self.port = free_port()
        self.targets = tuple(targets)
        self.config = self.dir / "prometheus.yml"
        self.config.write_text(
            Template(CONFIG.read_text()).substitute(
                interval=interval, targets=", ".join(json.dumps(t) for t in self.targets)
            )
        )
        self._proc: subprocess.Popen[bytes] | None = None
        self._tail: deque[str] = deque(maxlen=40)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> PrometheusServer:
        try:
            self._proc = start_logged(
                [
                    self.binary,
                    f"--config.file={self.config}",
                    f"--storage.tsdb.path={self.dir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--web.console.templates=/nonexistent",
                    "--web.console.libraries=/nonexistent",
                ],
                _READY,
                self._tail,
                timeout=timeout,
                what="Prometheus",
            )
        except RuntimeError:
            self.stop()  # its directory too
            raise
        return self

    def log(self) -> str:
        """The server's last log lines."""
        return "\n".join(self._tail)

    def api(self, path: str, **params: str) -> Any:
        """``GET /api/v1/<path>``'s ``data`` (raises on an error answer)."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as resp:
            body = json.load(resp)
        if body.get("status") != "success":
            raise RuntimeError(f"Prometheus API {path}: {body}")
        return body["data"]

    def names(self) -> set[str]:
        """Every metric name Prometheus has stored."""
        return set(self.api("label/__name__/values"))

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's result vector."""
        data = self.api("query", query=promql)
        result: list[dict[str, Any]] = data["result"]
        return result

    def wait_for(
        self, fetch: Callable[[], T], done: Callable[[T], bool], *, timeout: float, what: str
    ) -> T:
        """Ask the API (``fetch``) every 0.25 s until ``done``; fail naming ``what`` after
        ``timeout`` seconds (Prometheus has no event to await: it scrapes on a timer)."""
        deadline = time.monotonic() + timeout
        while True:
            value = fetch()
            if done(value):
                return value
            if time.monotonic() >= deadline:
                raise AssertionError(f"{what} not seen within {timeout:g}s: {value!r}")
            time.sleep(0.25)

    def stop(self) -> None:
        if self._proc is not None:
            stop_group(self._proc, signal.SIGTERM, timeout=15)
            self._proc = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
