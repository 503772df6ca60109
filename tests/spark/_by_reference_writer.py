"""A ``foreachBatch`` function pickled by reference, its writer built when its module is imported.

cloudpickle pickles a module-level function of an importable module by name: the
Connect server's Python worker imports this module (its path is on theirs,
tests/spark/_connect_server.py), which builds :data:`WRITE` with ``__init__``, not
by unpickling a writer. The writer's options come from the starting session's conf
key :data:`CONF_KEY` (JSON ``{"target", "checkpoint_location"}``), set before the
import on the client: the worker imports the module while that session is active.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import SparkSession

from oncestream.spark import transactional

CONF_KEY = "oncestream.test.byReference"

_session = SparkSession.getActiveSession()
assert _session is not None, "import this module with the query's session active"
_options = json.loads(str(_session.conf.get(CONF_KEY)))
WRITE = transactional(
    _options["target"], table="orders", checkpoint_location=_options["checkpoint_location"]
)


def write(df: Any, batch_id: int) -> None:
    """Write the batch with :data:`WRITE` (this function is what Spark pickles)."""
    WRITE(df, batch_id)
