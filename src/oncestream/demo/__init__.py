"""``oncestream demo``: the whole exactly-once pipeline on one machine, with faults, audited.

Users run it as ``oncestream demo`` (docs/demo.md); it has no public Python names.
The CLI drives it through its internal face, ``oncestream.demo._internal``.
"""

from __future__ import annotations

__all__: list[str] = []
