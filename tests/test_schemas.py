"""Each mapInArrow output schema is declared once, as Arrow: Spark's DDL is derived from it, and the rows a task
yields carry exactly its columns (pure)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from mirrorflow.jobs import audit
from mirrorflow.spark import schemas


def test_the_ddl_names_every_column_with_its_spark_type_in_order() -> None:
    schema = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                        ("replay", pa.bool_()), ("cells", pa.list_(pa.int64())), ("key", pa.binary())])
    assert schemas.ddl(schema) == ("topic string, partition int, offset long, replay boolean, cells array<long>, "
                                   "key binary")


def test_an_arrow_type_spark_is_not_told_about_fails_at_once() -> None:
    with pytest.raises(TypeError, match="no Spark SQL type"):
        schemas.ddl(pa.schema([("at", pa.timestamp("ms"))]))


def test_an_audit_tally_row_carries_exactly_the_result_columns() -> None:
    row = audit._Tally(("orders", 3), None, "east.orders").row()
    assert list(row) == audit._RESULT.names
    pa.RecordBatch.from_pylist([row], schema=audit._RESULT)
