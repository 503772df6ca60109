"""Keep Spark's per-task garbage collection off the modules a worker has imported.

A reused PySpark worker (``spark.python.worker.reuse``, the default) runs a full
``gc.collect()`` after every task (``pyspark/daemon.py``). With pyarrow, pyspark,
nats-py and oncestream imported, that collection walks about 60,000 objects that
live as long as the process: 15-40 ms a task, measured as 14% of a source
worker's CPU in a 10^6-message read of ten tasks (docs/benchmarks.md). Moving
what is alive when a process first runs one of our tasks into the permanent
generation (:func:`gc.freeze`) leaves each later collection only the objects
created since.
"""

from __future__ import annotations

import gc

__all__ = ["freeze_imports"]

_frozen = False


def freeze_imports() -> bool:
    """In a Spark task, freeze the objects alive now, once per process; True when it did.

    Outside a task (a driver, a test calling a reader or writer directly) it does
    nothing: there the heap belongs to the caller. Cyclic garbage is collected
    first, so nothing already unreachable is kept. Frozen objects are still
    freed when their reference count drops to zero; only cycles among them are
    no longer looked for, and at this point they are the imported modules,
    classes and functions, which live as long as the worker.
    """
    global _frozen
    if _frozen:
        return False
    from pyspark import TaskContext

    if TaskContext.get() is None:
        return False
    _frozen = True
    gc.collect()
    gc.freeze()
    return True
