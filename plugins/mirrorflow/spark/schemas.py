"""Arrow schemas as Spark SQL DDL: each output schema of a `mapInArrow` is declared once, as Arrow, and Spark is
told the same columns (a mismatch fails every batch at run time, so it must not be written twice)."""

from __future__ import annotations

import pyarrow as pa

_SCALARS = {pa.string(): "string", pa.int32(): "int", pa.int64(): "long", pa.bool_(): "boolean",
            pa.binary(): "binary", pa.float64(): "double"}


def spark_type(arrow: pa.DataType) -> str:
    if pa.types.is_list(arrow):
        return f"array<{spark_type(arrow.value_type)}>"
    if arrow in _SCALARS:
        return _SCALARS[arrow]
    raise TypeError(f"no Spark SQL type for Arrow {arrow}")


def ddl(schema: pa.Schema) -> str:
    """`name type, ...`, as `mapInArrow` and `createDataFrame` take a schema."""
    return ", ".join(f"{f.name} {spark_type(f.type)}" for f in schema)
