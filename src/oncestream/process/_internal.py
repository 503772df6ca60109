"""The internal face of ``oncestream.process``: what other oncestream components import from it.

Internal: for other oncestream components, may change without notice. Users
import the public face (``oncestream.process``); see docs/architecture.md.
"""

from ._group_status import find_groups, group_report
from ._setup import check_handler

__all__ = ["check_handler", "find_groups", "group_report"]
