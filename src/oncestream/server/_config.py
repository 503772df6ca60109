"""Typed nats-server configuration rendered to a config file.

The server's config language is a superset of JSON; :func:`render` writes
nested dicts/lists/scalars in that syntax, so every typed object below only
has to produce a plain dict. New topologies (clusters, leaf nodes, accounts)
add objects that contribute keys, without touching the renderer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._errors import ConfigError

__all__ = ["JetStreamConfig", "ServerConfig", "render"]

_BARE_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        return f'"{escaped}"'
    raise ConfigError(f"cannot render {type(value).__name__} value {value!r} in a server config")


def _key(key: str) -> str:
    return key if _BARE_KEY.match(key) else _scalar(key)


def render(config: dict[str, Any], indent: int = 0) -> str:
    """Render a nested dict in nats-server config syntax.

    Example::

        >>> print(render({"port": 4222, "jetstream": {"store_dir": "/tmp/js"}}))
        port: 4222
        jetstream {
          store_dir: "/tmp/js"
        }
    """
    pad = "  " * indent
    lines: list[str] = []
    for key, value in config.items():
        if value is None:
            continue
        if isinstance(value, dict):
            lines.append(f"{pad}{_key(key)} {{")
            body = render(value, indent + 1)
            if body:
                lines.append(body)
            lines.append(f"{pad}}}")
        elif isinstance(value, list | tuple):
            lines.append(f"{pad}{_key(key)}: {_render_list(value, indent)}")
        else:
            lines.append(f"{pad}{_key(key)}: {_scalar(value)}")
    return "\n".join(lines)


def _render_list(items: list[Any] | tuple[Any, ...], indent: int) -> str:
    if not items:
        return "[]"
    pad = "  " * (indent + 1)
    rendered = []
    for item in items:
        if isinstance(item, dict):
            rendered.append(f"{pad}{{\n{render(item, indent + 2)}\n{pad}}}")
        elif isinstance(item, list | tuple):
            rendered.append(pad + _render_list(item, indent + 1))
        else:
            rendered.append(pad + _scalar(item))
    closing = "  " * indent
    return "[\n" + ",\n".join(rendered) + f"\n{closing}]"


@dataclass(frozen=True, kw_only=True)
class JetStreamConfig:
    """The ``jetstream {}`` block.

    Args:
        store_dir: where file-storage streams live.
        domain: JetStream domain of this server (``$JS.<domain>.API``).
        max_memory_store, max_file_store: limits in bytes (None = server default).
        sync_interval: ``"always"`` to fsync every write, or a duration like ``"2m"``.
    """

    store_dir: Path
    domain: str | None = None
    max_memory_store: int | None = None
    max_file_store: int | None = None
    sync_interval: str | None = None

    def __post_init__(self) -> None:
        if self.domain is not None and not re.match(r"^[A-Za-z0-9_-]+$", self.domain):
            raise ConfigError(
                f"domain must contain only letters, digits, '-' and '_', got {self.domain!r}"
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "store_dir": str(self.store_dir),
            "domain": self.domain,
            "max_memory_store": self.max_memory_store,
            "max_file_store": self.max_file_store,
            "sync_interval": self.sync_interval,
        }


@dataclass(frozen=True, kw_only=True)
class ServerConfig:
    """One nats-server process.

    Args:
        host: bind address; loopback unless ``loopback_only`` is False.
        loopback_only: refuse a non-loopback ``host`` (default). Set False only
            for a server inside a network namespace the caller created (the
            fault-injection campaign under ``torture/``).
        port: client port, or ``-1`` to let the server pick a free one.
        server_name: unique name (required for clusters and JetStream domains).
        jetstream: the JetStream block, or None for a core-NATS-only server.
        max_payload: largest message the server accepts, in bytes.
        http_port: monitoring port, or None for none.
        blocks: typed top-level blocks (anything with ``to_dict()``: the
            cluster, leafnodes, accounts, authorization, tls and operator
            objects of ``oncestream.server``), merged in order.
        extra: further top-level blocks as plain dicts, rendered verbatim
            (applied last).

    Raises:
        ConfigError: if the host is not a loopback address or a value is out of range.
    """

    host: str = "127.0.0.1"
    loopback_only: bool = True
    port: int = -1
    server_name: str = "oncestream"
    jetstream: JetStreamConfig | None = None
    max_payload: int | None = None
    http_port: int | None = None
    blocks: tuple[Any, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        loopback = self.host.startswith("127.") or self.host in ("localhost", "::1")
        if self.loopback_only and not loopback:
            raise ConfigError(
                f"host must be a loopback address (127.0.0.0/8, localhost, ::1) unless "
                f"loopback_only=False, got {self.host!r}"
            )
        if self.port != -1 and not 0 < self.port < 65536:
            raise ConfigError(f"port must be -1 (random) or 1..65535, got {self.port!r}")
        if self.max_payload is not None and not 0 < self.max_payload <= 64 * 1024 * 1024:
            raise ConfigError(f"max_payload must be 1..67108864 bytes, got {self.max_payload!r}")

    def to_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = {
            "server_name": self.server_name,
            "host": self.host,
            "port": self.port,
            "max_payload": self.max_payload,
            "http_port": self.http_port,
        }
        if self.jetstream is not None:
            result["jetstream"] = self.jetstream.to_dict()
        for block in self.blocks:
            result.update(block.to_dict())
        result.update(self.extra)
        return result

    def render(self) -> str:
        """The config file text."""
        return render(self.to_dict()) + "\n"
