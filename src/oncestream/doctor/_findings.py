"""What ``oncestream doctor`` reports: findings, each with its fix, and the report's verdict."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["SEVERITIES", "DoctorReport", "Finding", "Severity"]

#: ``breaks``: a guarantee does not hold (exit 1); ``warning``: it holds with less margin,
#: or only while nothing else fails; ``note``: worth knowing, guarantees unaffected;
#: ``ok``: the check passed.
Severity = Literal["breaks", "warning", "note", "ok"]
SEVERITIES: tuple[Severity, ...] = ("breaks", "warning", "note", "ok")


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One check's result.

    Args:
        severity: see :data:`Severity`.
        target: what was checked: ``server``, ``stream ORDERS``, ``consumer ORDERS/billing``.
        check: a short, stable key (``duplicate-window``, ``max-deliver``, ``known-bug``...).
        message: what was found and why it matters.
        fix: the command (or config change) that fixes it; "" when nothing needs fixing.
        reference: an upstream link (known server bugs).
    """

    severity: Severity
    target: str
    check: str
    message: str
    fix: str = ""
    reference: str = ""

    def to_json(self) -> dict[str, str]:
        """The finding as ``--json`` prints it (empty fields left out)."""
        data = {
            "severity": self.severity,
            "target": self.target,
            "check": self.check,
            "message": self.message,
            "fix": self.fix,
            "reference": self.reference,
        }
        return {k: v for k, v in data.items() if v}


@dataclass(frozen=True, kw_only=True)
class DoctorReport:
    """Every finding of one ``doctor`` run and the server it looked at.

    ``server`` holds what the server revealed: ``version`` (or None), ``cluster``
    (its cluster's name, or None), and with a monitoring URL ``sync_interval``
    (seconds) and ``sync_always``.
    """

    server: dict[str, Any]
    findings: tuple[Finding, ...] = field(default=())

    def count(self, severity: Severity) -> int:
        """How many findings have ``severity``."""
        return sum(1 for f in self.findings if f.severity == severity)

    @property
    def healthy(self) -> bool:
        """No finding breaks a guarantee (warnings and notes allowed)."""
        return self.count("breaks") == 0

    @property
    def exit_code(self) -> int:
        """0 healthy, 1 a finding breaks a guarantee."""
        return 0 if self.healthy else 1

    def summary(self) -> str:
        """``1 finding breaks a guarantee, 2 warnings, 1 note, 5 ok``."""
        breaks = self.count("breaks")
        parts = [
            f"{breaks} finding{'s' if breaks != 1 else ''} "
            f"break{'s' if breaks == 1 else ''} an exactly-once guarantee"
            if breaks
            else "nothing breaks an exactly-once guarantee"
        ]
        lesser: tuple[Severity, ...] = ("warning", "note")
        for severity in lesser:
            n = self.count(severity)
            parts.append(f"{n} {severity}{'s' if n != 1 else ''}")
        parts.append(f"{self.count('ok')} ok")
        return ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        """The report as ``--json`` prints it."""
        return {
            "server": self.server,
            "healthy": self.healthy,
            "summary": {severity: self.count(severity) for severity in SEVERITIES},
            "findings": [f.to_json() for f in self.findings],
        }
