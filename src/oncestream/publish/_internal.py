"""The internal face of ``oncestream.publish``: what other oncestream components import from it.

Internal: for other oncestream components, may change without notice. Users
import the public face (``oncestream.publish``); see docs/architecture.md.
"""

from ._batch import MAX_BATCH, check_atomic
from ._fast_ingest import FAST_INGEST_SINCE
from ._records import REPLAY_OF

__all__ = ["FAST_INGEST_SINCE", "MAX_BATCH", "REPLAY_OF", "check_atomic"]
