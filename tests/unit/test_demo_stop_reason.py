"""The demo's one-line reason for a stopped query (``demo._runner.stop_reason``).

The CI run of ddbce31 printed "query 'enriched' stopped ([...] perform commit:
Traceback (most recent call last):)": Spark's message embeds the Python
traceback, and its first line names neither the error nor its cause.
"""

from __future__ import annotations

from oncestream.demo._runner import stop_reason

SPARK_TEXT = """[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data \
source perform commit: Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/pyspark/sql/worker/commit.py", line 88, in main
    writer.commit(messages, batch_id)
  File "/src/oncestream/spark/_sink.py", line 560, in commit
    run_sync(
oncestream._errors.OperationTimeout: $JS.API.STREAM.INFO.SINK_COMMITS: timed out
recording committed micro-batch 7: still failing after 15s of retries (9 attempts)

JVM stacktrace:
org.apache.spark.SparkException: [PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] x
\tat org.apache.spark.sql.errors.QueryExecutionErrors$.pythonStreamingDataSourceRuntimeError
"""


def test_the_python_error_replaces_the_traceback_header() -> None:
    reason = stop_reason(SPARK_TEXT)
    assert "Traceback" not in reason and "\n" not in reason
    assert reason == (
        "[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data "
        "source perform commit: oncestream._errors.OperationTimeout: "
        "$JS.API.STREAM.INFO.SINK_COMMITS: timed out"
    )


def test_a_message_without_a_traceback_is_its_first_line() -> None:
    assert stop_reason("Query terminated with exception: boom\nmore") == (
        "Query terminated with exception: boom"
    )
    assert stop_reason("") == "stopped"
    assert len(stop_reason("x" * 1000)) == 300
