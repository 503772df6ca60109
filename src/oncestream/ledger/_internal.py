"""The internal face of ``oncestream.ledger``: what other oncestream components import from it.

Internal: for other oncestream components, may change without notice. Users
import the public face (``oncestream.ledger``); see docs/architecture.md.
"""

from ._from_url import ledger_from_dsn
from ._handed_back import drop_handed_back, read_handed_back
from ._readonly import check_ledger_target, read_applied_count, read_horizons

__all__ = [
    "check_ledger_target",
    "drop_handed_back",
    "ledger_from_dsn",
    "read_applied_count",
    "read_handed_back",
    "read_horizons",
]
