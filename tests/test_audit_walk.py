"""The audit's streaming pass (`audit.walk`) on hand-built sorted rows: classification and ranges, as pure logic."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st
from mirrorflow.jobs import audit, audit_report

SOURCE = (11, 12, 13, 1000)  # key, value, headers digests and timestamp


def _rows(spec: list[tuple[int, int | None, list[tuple[int, ...]]]]) -> list[dict[str, Any]]:
    """(offset, source present (1), refused (2) or absent (None), copies' digests) -> walk's input rows, sorted
    as Spark sorts them."""
    rows = []
    for offset, present, copies in spec:
        if present == 1:
            rows.append({"topic": "t", "partition": 0, "offset": offset, "side": 0, "kd": 11, "vd": 12, "hd": 13,
                         "ts": 1000, "at_partition": 0, "at_offset": offset})
        for i, c in enumerate(copies):
            kd, vd, hd, ts, part = c
            rows.append({"topic": "t", "partition": 0, "offset": offset, "side": 1, "kd": kd, "vd": vd, "hd": hd,
                         "ts": ts, "at_partition": part, "at_offset": 500 + offset * 3 + i})
        if present == 2:
            rows.append({"topic": "t", "partition": 0, "offset": offset, "side": 2, "kd": 11, "vd": 12, "hd": 13,
                         "ts": 1000, "at_partition": 0, "at_offset": offset})
    return rows


def _walk(rows: list[dict[str, Any]], mirrored: int | None, batch: int = 3) -> dict[str, Any]:
    schema = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()), ("side", pa.int8()),
                        ("kd", pa.int64()), ("vd", pa.int64()), ("hd", pa.int64()), ("ts", pa.int64()),
                        ("at_partition", pa.int32()), ("at_offset", pa.int64())])
    batches = [pa.RecordBatch.from_pylist(rows[i:i + batch], schema=schema) for i in range(0, len(rows), batch)]
    out = [r for b in audit.walk({("t", 0): (mirrored, "a.t")}, iter(batches)) for r in b.to_pylist()]
    assert len(out) == (1 if rows else 0)
    return out[0] if out else {"source_records": 0, "mirrored_records": 0, "missing": 0, "behind": 0, "refused": 0,
                               "missing_ranges": "[]", "duplicated_ranges": "[]"}


SAME = (11, 12, 13, 1000, 0)


def test_each_kind_of_damage_is_named_at_its_offset() -> None:
    spec = [(0, 1, [SAME]), (1, 1, []), (2, 1, []), (3, 1, [SAME, SAME]), (4, 1, [(11, 99, 13, 1000, 0)]),
            (5, 1, [(11, 12, 98, 1001, 0)]), (6, 1, [(11, 12, 13, 1000, 1)]), (7, None, [SAME]), (8, 1, [SAME]),
            (9, 1, []), (10, 2, [])]
    t = _walk(_rows(spec), mirrored=9)
    assert (t["source_records"], t["mirrored_records"], t["copies"], t["unexpected"]) == (10, 6, 7, 1)
    assert t["refused"] == 1  # offset 10: it came from the target topic it would be written to
    assert (t["missing"], json.loads(t["missing_ranges"])) == (2, [[1, 2]])
    assert (t["duplicated"], json.loads(t["duplicated_ranges"])) == (1, [[3, 3]])
    assert [(d[0], d[1]) for d in json.loads(t["differences"])] == \
           [(4, ["value"]), (5, ["headers", "timestamp"]), (6, ["partition"])]
    assert json.loads(t["differences"])[0][2] == "a.t-0@512"
    assert t["behind"] == 1  # offset 9: the flow has not read it


@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from([None, 1, 1, 2])), min_size=1, max_size=60),
       st.one_of(st.none(), st.integers(0, 70)), st.integers(1, 7))
def test_every_source_record_counts_once_and_ranges_are_maximal_runs(
        shape: list[tuple[int, int | None]], mirrored: int | None, batch: int) -> None:
    spec = [(o, present, [SAME] * copies) for o, (copies, present) in enumerate(shape)]
    t = _walk(_rows(spec), mirrored, batch)
    sources = [(o, c) for o, (c, p) in enumerate(shape) if p == 1]
    assert t["source_records"] == len(sources) + t["refused"]
    assert t["refused"] == sum(1 for _, p in shape if p == 2)
    assert t["mirrored_records"] + t["missing"] + t["behind"] + t["refused"] == t["source_records"]  # invariant A
    limit = mirrored if mirrored is not None else -1
    missing = [o for o, c in sources if c == 0 and o < limit]
    dups = [o for o, c in sources if c > 1]
    for offsets, ranges_json in ((missing, t["missing_ranges"]), (dups, t["duplicated_ranges"])):  # invariant B
        runs: list[list[int]] = []
        order = [o for o, (_, p) in enumerate(shape) if p is not None]  # a refused record cuts a run
        for o in offsets:
            if runs and order.index(o) == order.index(runs[-1][1]) + 1:
                runs[-1][1] = o
            else:
                runs.append([o, o])
        assert json.loads(ranges_json) == runs[:audit_report.EXAMPLES]
