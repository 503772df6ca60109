"""The internal face of ``oncestream.doctor``: what other oncestream components import from it.

Internal: for other oncestream components, may change without notice. Users
import the public face (``oncestream.doctor``); see docs/architecture.md.
"""

from ._options import SPARK_TASK_MAX_FAILURES, parse_target

__all__ = ["SPARK_TASK_MAX_FAILURES", "parse_target"]
