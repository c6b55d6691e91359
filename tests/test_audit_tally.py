"""The audit's comparison (jobs/audit_tally) on hand-built sides: classification and ranges, as pure logic; the field
hashes of a side (jobs/audit_task) on hand-built messages."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from confluent_kafka import Message
from hypothesis import given
from hypothesis import strategies as st
from mirrorflow.jobs import audit_report, audit_task
from mirrorflow.jobs.audit_tally import Side, Tally, compare

SOURCE = (11, 12, 13, 1000)  # key, value, headers hashes and timestamp


def _sides(spec: list[tuple[int, int | None, list[tuple[int, ...]]]]) -> tuple[Side, np.ndarray, Side]:
    """(offset, source present (1), refused (2) or absent (None), copies' fields) -> the source side, its refused
    flags and the copies (in the target's order: by offset, then as listed)."""
    present = [(o, p) for o, p, _ in spec if p is not None]
    offsets = np.array([o for o, _ in present], np.int64)
    source = Side(offsets, np.array([SOURCE] * len(present), np.int64).reshape(-1, 4),
                  np.zeros(len(present), np.int32), offsets)
    copies = [(o, c, 500 + o * 3 + i) for o, _, cs in spec for i, c in enumerate(cs)]
    side = Side(np.array([o for o, _, _ in copies], np.int64),
                np.array([c[:4] for _, c, _ in copies], np.int64).reshape(-1, 4),
                np.array([c[4] for _, c, _ in copies], np.int32), np.array([at for _, _, at in copies], np.int64))
    return source, np.array([p == 2 for _, p in present], bool), side


def _tally(spec: list[tuple[int, int | None, list[tuple[int, ...]]]], mirrored: int | None,
           span: int = 1_000) -> dict[str, Any]:
    """compare() over the spec, `span` offsets at a time with one tally (as a task compares a long range)."""
    source, refused, copies = _sides(spec)
    tally = Tally("a.t", mirrored)
    end = len(spec)  # offsets 0 to len(spec) - 1
    for start in range(0, end, span):
        inside = (source.offsets >= start) & (source.offsets < start + span)
        part = Side(source.offsets[inside], source.fields[inside], source.partitions[inside], source.at[inside])
        compare(tally, part, refused[inside], copies, start, min(end, start + span))
    return dataclasses.asdict(tally.audit("t", 0, 0, end))


SAME = (11, 12, 13, 1000, 0)


def test_each_kind_of_damage_is_named_at_its_offset() -> None:
    spec = [(0, 1, [SAME]), (1, 1, []), (2, 1, []), (3, 1, [SAME, SAME]), (4, 1, [(11, 99, 13, 1000, 0)]),
            (5, 1, [(11, 12, 98, 1001, 0)]), (6, 1, [(11, 12, 13, 1000, 1)]), (7, None, [SAME]), (8, 1, [SAME]),
            (9, 1, []), (10, 2, [])]
    t = _tally(spec, mirrored=9)
    assert (t["source_records"], t["mirrored_records"], t["copies"], t["unexpected"]) == (10, 6, 7, 1)
    assert t["refused"] == 1  # offset 10: it came from the target topic it would be written to
    assert (t["missing"], t["missing_ranges"]) == (2, ((1, 2),))
    assert (t["duplicated"], t["duplicated_ranges"]) == (1, ((3, 3),))
    assert [(d["offset"], d["fields"]) for d in t["differences"]] == \
           [(4, ("value",)), (5, ("headers", "timestamp")), (6, ("partition",))]
    assert t["differences"][0]["at"] == "a.t-0@512"
    assert t["behind"] == 1  # offset 9: the flow has not read it


@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from([None, 1, 1, 2])), min_size=1, max_size=60),
       st.one_of(st.none(), st.integers(0, 70)), st.integers(1, 7))
def test_every_source_record_counts_once_and_ranges_are_maximal_runs(
        shape: list[tuple[int, int | None]], mirrored: int | None, span: int) -> None:
    spec = [(o, present, [SAME] * copies) for o, (copies, present) in enumerate(shape)]
    t = _tally(spec, mirrored, span)
    sources = [(o, c) for o, (c, p) in enumerate(shape) if p == 1]
    assert t["source_records"] == len(sources) + t["refused"]
    assert t["refused"] == sum(1 for _, p in shape if p == 2)
    assert t["mirrored_records"] + t["missing"] + t["behind"] + t["refused"] == t["source_records"]  # invariant A
    limit = mirrored if mirrored is not None else -1
    missing = [o for o, c in sources if c == 0 and o < limit]
    dups = [o for o, c in sources if c > 1]
    for offsets, ranges in ((missing, t["missing_ranges"]), (dups, t["duplicated_ranges"])):  # invariant B
        runs: list[list[int]] = []
        order = [o for o, (_, p) in enumerate(shape) if p is not None]  # a refused record cuts a run
        for o in offsets:
            if runs and order.index(o) == order.index(runs[-1][1]) + 1:
                runs[-1][1] = o
            else:
                runs.append([o, o])
        assert [list(r) for r in ranges] == runs[:audit_report.EXAMPLES]


@given(st.lists(st.tuples(st.sampled_from([None, 1, 1, 1, 2]),
                          st.lists(st.sampled_from([SAME, SAME, (11, 99, 13, 1000, 0), (11, 12, 13, 1000, 1)]),
                                   max_size=3)), max_size=60),
       st.one_of(st.none(), st.integers(0, 70)), st.integers(1, 9))
def test_comparing_in_bulk_gives_what_classifying_each_record_in_offset_order_gives(
        shape: list[tuple[int | None, list[tuple[int, ...]]]], mirrored: int | None, span: int) -> None:
    spec = [(o, present, copies) for o, (present, copies) in enumerate(shape)]  # invariant C
    one_by_one = Tally("a.t", mirrored)
    for o, present, copies in spec:
        rows = [(*c, 500 + o * 3 + i) for i, c in enumerate(copies)]
        one_by_one.record(o, None if present is None else (*SOURCE, 0, o), rows, present == 2)
    assert _tally(spec, mirrored, span) == dataclasses.asdict(one_by_one.audit("t", 0, 0, len(spec)))


def test_a_records_field_hashes_do_not_depend_on_the_records_read_with_it() -> None:
    def message(offset: int) -> Message:
        return Message(topic="t", partition=0, offset=offset, key=b"k", value=b"v", timestamp=(1, 7))

    unreadable, plain, with_one = audit_task._UNREADABLE, None, [("h", b"x")]
    alone = audit_task._side([message(0)], [0], [0], 0, [unreadable])
    for neighbour in (plain, with_one):
        beside = audit_task._side([message(0), message(1)], [0, 1], [0, 1], 0, [unreadable, neighbour])
        assert beside.row(0) == alone.row(0)
    assert alone.row(0) != audit_task._side([message(0)], [0], [0], 0, [[]]).row(0)  # unreadable is not "none"


def test_copies_without_a_provenance_header_are_attributed_by_content_repeats_and_strangers_included() -> None:
    rng = np.random.default_rng(3)
    source = Side(np.arange(100, 110, dtype=np.int64), rng.integers(-2**62, 2**62, (10, 4)),
                  np.zeros(10, np.int32), np.arange(100, 110, dtype=np.int64))
    order = [0, 1, 2, 3, 2, 3, 4, 6, 7]  # a rewind (2, 3 again) and a skipped record (5)
    stranger = rng.integers(-2**62, 2**62, (1, 4))
    fields = np.concatenate([source.fields[order[:4]], stranger, source.fields[order[4:]]])
    copies = Side(np.full(10, -1, np.int64), fields, np.zeros(10, np.int32), np.arange(500, 510, dtype=np.int64))
    found = audit_task._by_content(copies, source)
    assert found.offsets.tolist() == [100 + o for o in order]
    assert found.at.tolist() == [500, 501, 502, 503, 505, 506, 507, 508, 509]  # the stranger (504) is nobody's copy
    tally = Tally("remote", 110)
    compare(tally, source, np.zeros(10, bool), found, 100, 110)
    audit = tally.audit("t", 0, 100, 110)
    assert (audit.missing, audit.duplicated, audit.mirrored_records) == (3, 2, 7)  # 105, 108, 109; 102, 103
