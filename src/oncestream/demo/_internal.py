"""The internal face of ``oncestream.demo``: what other oncestream components import from it.

Internal: for other oncestream components, may change without notice. Users
import the public face (``oncestream.demo``); see docs/architecture.md.
"""

from ._runner import DemoConfig, DemoResult, run_demo
from ._summary import print_summary, summary_dict

__all__ = ["DemoConfig", "DemoResult", "print_summary", "run_demo", "summary_dict"]
