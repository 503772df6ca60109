"""``oncestream demo``: the whole exactly-once pipeline on one machine, with faults, audited.

Example::

    from oncestream.demo import DemoConfig, run_demo
    result = run_demo(DemoConfig(messages=20_000))
    assert result.ok
"""

from __future__ import annotations

from ._runner import DemoConfig, DemoResult, run_demo
from ._summary import print_summary, summary_dict

__all__ = ["DemoConfig", "DemoResult", "print_summary", "run_demo", "summary_dict"]
