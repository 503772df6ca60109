"""The internal face of ``oncestream.tracing``: what other oncestream components import from it.

Internal: for other oncestream components, may change without notice. Users
import the public face (``oncestream.tracing``); see docs/architecture.md.
"""

from ._otel import Tracer, configure_from_env, tracer

__all__ = ["Tracer", "configure_from_env", "tracer"]
