"""``oncestream doctor``: a server, its streams and consumers against what exactly-once needs.

Each check returns a :class:`Finding` with the command that fixes it; a report
with a finding of severity ``breaks`` is not healthy (the CLI exits 1).

Example::

    from oncestream.doctor import Target, diagnose

    report = await diagnose(conn, [Target("ORDERS")])
    for finding in report.findings:
        print(finding.severity, finding.target, finding.message, finding.fix)
"""

from ._checks import (
    MIN_SERVER,
    check_consumer,
    check_server,
    check_stream,
    check_sync_unknown,
    duration,
)
from ._diagnose import diagnose, read_sync_policy
from ._findings import SEVERITIES, DoctorReport, Finding, Severity
from ._options import (
    MIN_ACK_WAIT,
    SPARK_TASK_MAX_FAILURES,
    DoctorOptions,
    Target,
    parse_target,
)

__all__ = [
    "MIN_ACK_WAIT",
    "MIN_SERVER",
    "SEVERITIES",
    "SPARK_TASK_MAX_FAILURES",
    "DoctorOptions",
    "DoctorReport",
    "Finding",
    "Severity",
    "Target",
    "check_consumer",
    "check_server",
    "check_stream",
    "check_sync_unknown",
    "diagnose",
    "duration",
    "parse_target",
    "read_sync_policy",
]
