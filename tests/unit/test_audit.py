"""Pure logic of the audit: key/output parsing, comparison, timestamps, Spark file-sink logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oncestream import ConfigError
from oncestream.audit._audit import AuditReport, KeySpec, OutputSpec, compare, parse_timestamp
from oncestream.audit._outputs import _spark_committed_files as committed_files


def test_compare_counts_every_kind_of_problem() -> None:
    report = compare("out", ["a", "b", "c", "d"], ["a", "b", "b", "b", "c", "x"])
    assert (report.found, report.missing, report.duplicated, report.unexpected) == (3, 1, 1, 1)
    assert report.duplicate_rows == 2
    assert report.rows == 6
    assert report.missing_samples == ["d"]
    assert report.duplicated_samples == ["b"]
    assert report.unexpected_samples == ["x"]
    assert not report.ok


def test_compare_exact_output_is_ok_and_samples_are_bounded() -> None:
    keys = [str(i) for i in range(100)]
    assert compare("out", keys, reversed(keys)).ok
    report = compare("out", keys, [], samples=3)
    assert report.missing == 100
    assert len(report.missing_samples) == 3


def test_an_input_holding_a_key_twice_fails_the_audit_with_exact_outputs() -> None:
    """docs/audit.md: exit 0 only when every output is exact and the input holds no key twice."""
    exact = compare("out", ["a", "b"], ["b", "a"])
    clean = AuditReport(
        input="IN", key="msg_id", input_rows=2, expected=2, input_duplicated=0, outputs=[exact]
    )
    twice = AuditReport(
        input="IN", key="msg_id", input_rows=3, expected=2, input_duplicated=1, outputs=[exact]
    )
    assert exact.ok and clean.ok
    assert not twice.ok


def test_key_spec_parse() -> None:
    assert KeySpec.parse("msg_id").kind == "msg_id"
    assert KeySpec.parse("lineage").kind == "lineage"
    spec = KeySpec.parse("field:order_id")
    assert (spec.kind, spec.name, str(spec)) == ("field", "order_id", "field:order_id")
    with pytest.raises(ConfigError, match="field:NAME"):
        KeySpec.parse("bogus")


def test_output_spec_parse_and_redaction() -> None:
    assert OutputSpec.parse("stream:OUT") == OutputSpec(kind="stream", target="OUT")
    assert OutputSpec.parse("parquet:/tmp/x").target == "/tmp/x"
    sql = OutputSpec.parse("sql:postgresql://u:secret@h/db#orders")
    assert (sql.target, sql.table) == ("postgresql://u:secret@h/db", "orders")
    assert "secret" not in str(sql)
    for bad in ("nope", "kafka:x", "sql:/tmp/db.sqlite", "sql:/tmp/db#drop table"):
        with pytest.raises(ConfigError):
            OutputSpec.parse(bad)


def test_parse_timestamp_keeps_sub_second_precision() -> None:
    base = parse_timestamp("2026-01-01T00:00:00Z")
    assert parse_timestamp("2026-01-01T00:00:00.250000001Z") == pytest.approx(base + 0.25)


def test_spark_metadata_log_selects_committed_files(tmp_path: Path) -> None:
    meta = tmp_path / "_spark_metadata"
    meta.mkdir()

    def log(name: str, *paths: str) -> None:
        lines = ["v1"] + [json.dumps({"path": f"file://{p}", "action": "add"}) for p in paths]
        (meta / name).write_text("\n".join(lines))

    log("0", "/d/a.parquet")
    log("1.compact", "/d/a.parquet", "/d/b.parquet")
    log("2", "/d/c.parquet")
    assert sorted(committed_files(str(tmp_path)) or []) == [
        "/d/a.parquet",
        "/d/b.parquet",
        "/d/c.parquet",
    ]
    assert committed_files(str(tmp_path / "nothing")) is None
