"""The internal face of ``oncestream.streams``: what other oncestream components import from it.

Internal: for other oncestream components, may change without notice. Users
import the public face (``oncestream.streams``); see docs/architecture.md.
"""

from ._admin import seq_at_time
from ._partitions import MAX_PARTITIONS, fnv1a32
from ._reset import RESET_SINCE
from ._server_bugs import SERVER_BUGS, ServerBug, Version, format_version, known_bugs
from ._spec import (
    FAST_INGEST_SINCE,
    captures_subject,
    check_partitioning_change,
    overlapping_streams,
    owning_stream,
    stream_exists,
)
from ._upstreams import upstream_rows
from ._version import check_server_bugs, connected_server_name, server_cluster, server_version

__all__ = [
    "FAST_INGEST_SINCE",
    "MAX_PARTITIONS",
    "RESET_SINCE",
    "SERVER_BUGS",
    "ServerBug",
    "Version",
    "captures_subject",
    "check_partitioning_change",
    "check_server_bugs",
    "connected_server_name",
    "fnv1a32",
    "format_version",
    "known_bugs",
    "overlapping_streams",
    "owning_stream",
    "seq_at_time",
    "server_cluster",
    "server_version",
    "stream_exists",
    "upstream_rows",
]
