"""What the stream's supervisor does after a query ends, read from the query's error text (the markers cross Spark's
JVM inside its exception): no Spark needed to tell them apart."""

from __future__ import annotations

from mirrorflow.errors import FATAL, RECREATED
from mirrorflow.jobs.query_end import QueryEnd, query_end


def test_a_fatal_error_inside_sparks_exception_ends_the_flow_with_its_own_line() -> None:
    error = (f"org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n  File ...\n"
             f"mirrorflow.errors.OperationalError: {FATAL}flow a->b: DATA LOSS on a orders-3: offsets 5..9\n"
             "\tat org.apache.spark...")
    assert query_end(error) == QueryEnd("fatal", "flow a->b: DATA LOSS on a orders-3: offsets 5..9")


def test_re_created_source_topics_restart_the_query_from_a_new_checkpoint() -> None:
    end = query_end(f"\n  pyspark.errors.exceptions: {RECREATED}source topic(s) orders re-created\n")
    assert end.kind == "new checkpoint" and "orders re-created" in end.detail


def test_any_other_error_is_a_failed_start_named_by_its_first_line() -> None:
    end = query_end("\n\n  Connection refused: broker down  \nmore")
    assert end == QueryEnd("failed", "Connection refused: broker down")
    assert query_end("") == QueryEnd("failed", "unknown error")
