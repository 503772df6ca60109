"""A server's fsync policy, read from its monitoring endpoint (``/varz``), and whose it is.

``doctor --monitor URL`` reads nats-server's ``/varz``: ``server_name``,
``cluster.name`` and ``jetstream.config`` (``sync_always``, ``sync_interval`` in
nanoseconds; ``server/monitor.go`` ``Varz``, ``server/jetstream.go``
``JetStreamConfig``). Every answer that is not that is bad usage (the URL is not
a NATS monitoring endpoint) and says what was expected; an endpoint that does not
answer is a failure of the run.
"""

from __future__ import annotations

import http.client
import math
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

import orjson

from .._errors import ConfigError, OncestreamError

__all__ = ["ServerSync", "read_sync_policy"]

_MONITOR_TIMEOUT = 5.0
#: A /varz is a few kB; a larger answer is not one (and is not read to its end).
_MAX_BODY = 1 << 20
#: nats-server's sync_interval when its configuration sets none (``defaultSyncInterval``).
DEFAULT_SYNC_INTERVAL = 120.0
_EXPECTED = (
    "expected nats-server's monitoring endpoint (its http_port, e.g. http://127.0.0.1:8222), "
    "whose /varz is a JSON object naming the server (server_name) and its JetStream "
    "configuration (jetstream.config)"
)


@dataclass(frozen=True, kw_only=True)
class ServerSync:
    """One server's fsync policy, as its ``/varz`` at ``url`` tells it.

    Args:
        url: the monitoring URL read (``scheme://host:port``, never credentials).
        server: the server's name (``server_name``; its id when none is configured).
        cluster: the name of its cluster; None outside one.
        sync_always: an fsync before each acknowledgement.
        sync_interval: seconds between background fsyncs otherwise.
    """

    url: str
    server: str
    cluster: str | None
    sync_always: bool
    sync_interval: float

    def to_json(self) -> dict[str, Any]:
        """The policy as ``doctor --json`` prints it (``server.monitored``)."""
        return {
            "url": self.url,
            "server": self.server,
            "cluster": self.cluster,
            "sync_always": self.sync_always,
            "sync_interval": self.sync_interval,
        }


def read_sync_policy(monitor: str) -> ServerSync:
    """The fsync policy of the server whose monitoring URL is ``monitor``.

    Raises:
        ConfigError: ``monitor`` is not a NATS monitoring endpoint (a client port,
            another HTTP server, a ``/varz`` of an unexpected shape) or its server
            runs without JetStream: named, with what was expected (exit 2 in the CLI).
        OncestreamError: the endpoint does not answer (exit 1 in the CLI).
    """
    url = f"{monitor}/varz"
    try:
        with urllib.request.urlopen(url, timeout=_MONITOR_TIMEOUT) as response:
            body = response.read(_MAX_BODY + 1)
    except urllib.error.HTTPError as exc:
        answer = f"answered HTTP {exc.code} {exc.reason}"
        if exc.code >= 500:
            raise OncestreamError(f"cannot read {url}: it {answer}") from exc
        raise _not_monitoring(monitor, answer) from exc
    except (http.client.RemoteDisconnected, http.client.IncompleteRead) as exc:
        raise OncestreamError(f"cannot read {url}: the connection closed mid-answer") from exc
    except http.client.HTTPException as exc:
        raise _not_monitoring(monitor, _not_http(exc)) from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise OncestreamError(f"cannot read {url}: {reason}") from exc
    if len(body) > _MAX_BODY:
        raise _not_monitoring(monitor, f"answered more than {_MAX_BODY} bytes")
    try:
        varz = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise _not_monitoring(monitor, "answered something that is not JSON") from exc
    return _parse(monitor, varz)


def _parse(monitor: str, varz: Any) -> ServerSync:
    if not isinstance(varz, dict):
        raise _not_monitoring(monitor, f"answered a JSON {_kind(varz)}, not an object")
    server = varz.get("server_name")
    if not isinstance(server, str) or not server:
        raise _not_monitoring(monitor, f"answered a JSON object without a server_name ({server!r})")
    cluster = varz.get("cluster", {})
    if not isinstance(cluster, dict) or not isinstance(cluster.get("name", ""), str):
        raise _not_monitoring(
            monitor, f"answered a cluster that is not an object with a name: {cluster!r}"
        )
    jetstream = varz.get("jetstream", {})
    config = jetstream.get("config") if isinstance(jetstream, dict) else None
    if config is None and isinstance(jetstream, dict):
        raise ConfigError(
            f"--monitor {monitor}: server {server!r} runs without JetStream (its /varz has no "
            "jetstream.config), so it holds no stream: give the monitoring URL of a server "
            "that holds the streams checked"
        )
    if not isinstance(config, dict):
        raise _not_monitoring(
            monitor, f"answered a jetstream that is not an object with a config: {jetstream!r}"
        )
    always = config.get("sync_always", False)
    if not isinstance(always, bool):
        raise _not_monitoring(
            monitor, f"answered jetstream.config.sync_always {always!r}, expected true or false"
        )
    interval = config.get("sync_interval", 0)
    if (
        isinstance(interval, bool)
        or not isinstance(interval, int | float)
        or not math.isfinite(interval)
        or interval < 0
    ):
        raise _not_monitoring(
            monitor,
            f"answered jetstream.config.sync_interval {interval!r}, expected nanoseconds "
            "(an integer >= 0)",
        )
    return ServerSync(
        url=monitor,
        server=server,
        cluster=cluster.get("name") or None,
        sync_always=always,
        # absent (omitempty) or 0: nats-server applies its default
        sync_interval=interval / 1e9 if interval else DEFAULT_SYNC_INTERVAL,
    )


def _not_monitoring(monitor: str, answer: str) -> ConfigError:
    return ConfigError(
        f"--monitor {monitor} is not a NATS monitoring endpoint: GET {monitor}/varz {answer}; "
        f"{_EXPECTED}"
    )


def _not_http(exc: http.client.HTTPException) -> str:
    line = str(getattr(exc, "line", "") or "")
    if line.startswith("INFO "):
        return (
            "answered a NATS INFO line, not HTTP: that is the server's client port (4222 by "
            "default), not its monitoring port"
        )
    return f"did not answer HTTP ({type(exc).__name__})"


def _kind(value: Any) -> str:
    kinds = {list: "list", str: "string", bool: "boolean", int: "number", float: "number"}
    return kinds.get(type(value), "null" if value is None else type(value).__name__)
