"""What tests, benchmarks and the fault campaign share: fills, servers, raw clients.

Tools import this package, never ``tests`` (``tests/unit/test_boundaries.py``
checks it); fixtures only tests use stay in ``tests/``. It is not shipped with
oncestream (``src/`` is); the repository's root is on the path of ``make test``,
``make bench`` and ``make torture``.

Example::

    from harness import publish_n

    await publish_n(conn, "orders.x", 10_000, msg_id=lambda i: f"o{i}")
"""

from ._kafka_habits import NOT_COMPARED, RUNNERS, SCENARIOS, JetStreamSide, KafkaSide, run_all
from ._postgres import PostgresServer, find_pg_bin
from ._procs import ended, free_port, start_logged, stop_group
from ._publish import order, publish_n, publish_orders
from ._rawnats import RawClient
from ._streams import make_streams, order_ids_on

__all__ = [
    "NOT_COMPARED",
    "RUNNERS",
    "SCENARIOS",
    "JetStreamSide",
    "KafkaSide",
    "PostgresServer",
    "RawClient",
    "ended",
    "find_pg_bin",
    "free_port",
    "make_streams",
    "order",
    "order_ids_on",
    "publish_n",
    "publish_orders",
    "run_all",
    "start_logged",
    "stop_group",
]
