"""``oncestream doctor``: a server, its streams and consumers against what exactly-once needs.

Each check returns a :class:`Finding` with the command that fixes it; a report
with a finding of severity ``breaks`` is not healthy (the CLI exits 1).

Example::

    from oncestream.doctor import Target, diagnose

    report = await diagnose(conn, [Target("ORDERS")])
    for finding in report.findings:
        print(finding.severity, finding.target, finding.message, finding.fix)
"""

from ._diagnose import diagnose
from ._findings import DoctorReport, Finding, Severity
from ._options import DoctorOptions, Target

__all__ = ["DoctorOptions", "DoctorReport", "Finding", "Severity", "Target", "diagnose"]
