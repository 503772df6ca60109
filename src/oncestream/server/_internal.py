"""The internal face of ``oncestream.server``: what other oncestream components import from it.

Internal: for other oncestream components, may change without notice. Users
import the public face (``oncestream.server``); see docs/architecture.md.
"""

from ._cluster import free_ports, stop_pid, wait_for
from ._lifeline import popen_tied

__all__ = ["free_ports", "popen_tied", "stop_pid", "wait_for"]
