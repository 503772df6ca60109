"""The exactly-once checker: every input key in each output exactly once.

Example::

    from oncestream.audit import OutputSpec, audit

    report = await audit(conn, "ORDERS", [OutputSpec.parse("stream:ENRICHED")], key="lineage")
    assert report.ok
"""

from ._audit import AuditReport, KeySpec, OutputReport, OutputSpec, audit

__all__ = ["AuditReport", "KeySpec", "OutputReport", "OutputSpec", "audit"]
