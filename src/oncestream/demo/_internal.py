"""The internal face of ``oncestream.demo``: what other oncestream components import from it.

Internal: for other oncestream components, may change without notice. Users
import the public face (``oncestream.demo``); see docs/architecture.md.
"""

from ._pipeline import ORDER_SCHEMA
from ._producer import produce
from ._runner import DemoConfig, DemoResult, run_demo
from ._summary import print_summary, summary_dict
from ._workload import REGIONS, Expected, order_stream

__all__ = [
    "ORDER_SCHEMA",
    "REGIONS",
    "DemoConfig",
    "DemoResult",
    "Expected",
    "order_stream",
    "print_summary",
    "produce",
    "run_demo",
    "summary_dict",
]
