"""The internal face of ``oncestream.process``: what other oncestream components import from it.

Internal: for other oncestream components, may change without notice. Users
import the public face (``oncestream.process``); see docs/architecture.md.
"""

from ._group_status import find_groups, group_report
from ._maxdeliver import refusal as max_deliver_refusal
from ._options import check_prune_interval
from ._replay import unknown_consumer
from ._setup import check_handler

__all__ = [
    "check_handler",
    "check_prune_interval",
    "find_groups",
    "group_report",
    "max_deliver_refusal",
    "unknown_consumer",
]
