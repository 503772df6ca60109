"""The internal face of ``oncestream.load``: what other oncestream components import from it.

Internal: for other oncestream components, may change without notice. Users
import the public face (``oncestream.load``); see docs/architecture.md.
"""

from ._input import open_input

__all__ = ["open_input"]
