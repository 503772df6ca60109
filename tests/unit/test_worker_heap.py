"""freeze_imports: a Spark task's process stops walking its imports in every gc.collect()."""

from __future__ import annotations

import subprocess
import sys

# In a child process: freezing is for the worker's heap, never pytest's.
_CHILD = """
import gc
from pyspark import TaskContext
import oncestream.spark._source, oncestream.spark._sink  # what a task imports
from oncestream.spark._worker_heap import freeze_imports

before = len(gc.get_objects())
assert freeze_imports() is False, "froze outside a task"
assert gc.get_freeze_count() == 0
TaskContext._setTaskContext(TaskContext())
assert freeze_imports() is True
frozen = gc.get_freeze_count()
walked = len(gc.get_objects())
assert freeze_imports() is False and gc.get_freeze_count() == frozen, "froze twice"
print(before, frozen, walked)
"""


def test_a_task_freezes_the_imports_once_and_a_driver_never() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    before, frozen, walked = map(int, done.stdout.split())
    # The objects a full collection walks: the imports (tens of thousands) are out of it.
    assert before > 20_000 and frozen > 20_000
    assert walked < before // 20, (before, frozen, walked)
