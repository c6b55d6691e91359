"""Each mapInArrow output schema is declared once, as Arrow: Spark's DDL is derived from it (pure)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from mirrorflow.spark import schemas


def test_the_ddl_names_every_column_with_its_spark_type_in_order() -> None:
    schema = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                        ("replay", pa.bool_()), ("cells", pa.list_(pa.int64())), ("key", pa.binary())])
    assert schemas.ddl(schema) == ("topic string, partition int, offset long, replay boolean, cells array<long>, "
                                   "key binary")


def test_an_arrow_type_spark_is_not_told_about_fails_at_once() -> None:
    with pytest.raises(TypeError, match="no Spark SQL type"):
        schemas.ddl(pa.schema([("at", pa.timestamp("ms"))]))
