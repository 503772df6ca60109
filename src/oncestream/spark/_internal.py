"""The internal face of ``oncestream.spark``: what other oncestream components import from it.

Internal: for other oncestream components, may change without notice. Users
import the public face (``oncestream.spark``); see docs/architecture.md.
"""

from ._register import warm_worker
from ._session import check_java, supports_read_limits

__all__ = ["check_java", "supports_read_limits", "warm_worker"]
