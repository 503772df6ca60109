"""The shipped Prometheus alert rules pass their `promtool test rules` tests, and each
rule's test fails when that rule's threshold is changed (the tests can catch a change).

promtool comes with Debian's ``prometheus`` package (``make test`` installs it:
scripts/install-test-services).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

RULES_DIR = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
RULES = RULES_DIR / "oncestream-rules.yml"

#: alert -> (text of its rule, what it becomes): a change its test must catch.
SABOTAGE = {
    "OncestreamConsumerLagGrowing": (
        "(oncestream_consumer_pending_messages) > 1000",
        "(oncestream_consumer_pending_messages) > 100000",
    ),
    "OncestreamDeadLetters": (
        "(increase(oncestream_processor_dead_lettered_total[10m])) > 0",
        "(increase(oncestream_processor_dead_lettered_total[10m])) > 5",
    ),
    "OncestreamLedgerSuppressionsSpiking": (
        "> 0.1 * sum by (stream, consumer)",
        "> 0.5 * sum by (stream, consumer)",
    ),
    "OncestreamMirrorBehind": ('_lag_messages"}) > 10000', '_lag_messages"}) > 100000'),
    "OncestreamSparkSourceBehind": (
        "(oncestream_spark_source_lag_seconds) > 600",
        "(oncestream_spark_source_lag_seconds) > 1000",
    ),
}


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        raise RuntimeError(
            "promtool not found: install Debian's prometheus package "
            "(make test installs it: scripts/install-test-services)"
        )
    return found


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def test_rules_are_valid() -> None:
    result = run("check", "rules", RULES.name, cwd=RULES_DIR)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("tests", sorted(p.name for p in RULES_DIR.glob("*-tests.yml")))
def test_promtool_rule_tests_pass(tests: str) -> None:
    result = run("test", "rules", tests, cwd=RULES_DIR)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_test_and_a_sabotage() -> None:
    rules = RULES.read_text()
    alerts = {line.split(":", 1)[1].strip() for line in rules.splitlines() if "- alert:" in line}
    tested = "".join(p.read_text() for p in RULES_DIR.glob("*-tests.yml"))
    assert alerts == set(SABOTAGE)
    for alert in alerts:
        assert f"alertname: {alert}" in tested, alert


@pytest.mark.parametrize("alert", sorted(SABOTAGE))
def test_rule_tests_fail_when_a_threshold_changes(alert: str, tmp_path: Path) -> None:
    before, after = SABOTAGE[alert]
    rules = RULES.read_text()
    assert rules.count(before) == 1, before
    for path in RULES_DIR.glob("*.yml"):
        shutil.copy(path, tmp_path / path.name)
    (tmp_path / RULES.name).write_text(rules.replace(before, after))
    for tests in sorted(tmp_path.glob("*-tests.yml")):
        result = run("test", "rules", tests.name, cwd=tmp_path)
        if result.returncode != 0:
            assert alert in result.stdout + result.stderr, result.stdout + result.stderr
            return
    pytest.fail(f"no promtool test failed with {alert}'s rule changed to {after!r}")
