"""How far a stream's mirror or sources are behind, from its stream info."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["upstream_rows"]


def upstream_rows(info: dict[str, Any]) -> list[dict[str, Any]]:
    """``{"kind", "origin", "lag", "idle_seconds"}`` per upstream of a stream info.

    ``kind`` is ``mirror`` or ``source``; ``origin`` is the upstream stream's name,
    with ``@<api prefix>`` when it lives in another JetStream domain or account (a
    hub sourcing a leaf); ``lag`` is the messages not yet copied; ``idle_seconds``
    the time since the upstream was last heard from (``nan``: never).

    Example::

        for row in upstream_rows(await stream_info(conn, "aggregate")):
            print(row["origin"], row["lag"])
    """
    upstreams: list[tuple[str, dict[str, Any]]] = []
    if info.get("mirror"):
        upstreams.append(("mirror", info["mirror"]))
    upstreams.extend(("source", s) for s in info.get("sources") or ())
    rows = []
    for kind, up in upstreams:
        origin = str(up.get("name", ""))
        api = (up.get("external") or {}).get("api")
        if api:
            origin = f"{origin}@{api}"
        active = up.get("active")
        idle = math.nan if not isinstance(active, int) or active < 0 else active / 1e9
        rows.append(
            {"kind": kind, "origin": origin, "lag": int(up.get("lag", 0)), "idle_seconds": idle}
        )
    return rows
