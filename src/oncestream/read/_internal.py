"""The internal face of ``oncestream.read``: what other oncestream components import from it.

Internal: for other oncestream components, may change without notice. Users
import the public face (``oncestream.read``); see docs/architecture.md.
"""

from ._ids import locate_ids
from ._options import check_group_name
from ._range import (
    LEADER_PATIENCE,
    RANGE_CONSUMER_PREFIX,
    count_sequences,
    delete_consumer_later,
    led_stream_info,
    nth_sequence,
)

__all__ = [
    "LEADER_PATIENCE",
    "RANGE_CONSUMER_PREFIX",
    "check_group_name",
    "count_sequences",
    "delete_consumer_later",
    "led_stream_info",
    "locate_ids",
    "nth_sequence",
]
