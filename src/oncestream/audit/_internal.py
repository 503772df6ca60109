"""The internal face of ``oncestream.audit``: what other oncestream components import from it.

Internal: for other oncestream components, may change without notice. Users
import the public face (``oncestream.audit``); see docs/architecture.md.
"""

from ._audit import SAMPLES, compare

__all__ = ["SAMPLES", "compare"]
