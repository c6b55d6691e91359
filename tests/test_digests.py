"""Digest units: the ledger's units and the audit's chain of them (pure)."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from mirrorflow.rules import digests
from mirrorflow.rules.digests import CELL, CellDigest, Ledger, Unit

# A partition's batches: consecutive [begin, end) ranges (sizes), each record's digest its offset * 7919.
batch_sizes = st.lists(st.integers(0, CELL * 2), min_size=1, max_size=8)


def _cells(begin: int, end: int) -> list[CellDigest]:
    offsets = np.arange(begin, end, dtype=np.int64)
    return [CellDigest(c, n, 0, x, None) for c, n, x in digests.cell_digests(offsets, offsets * 7919)]


@given(batch_sizes)
def test_units_never_overlap_stay_in_one_cell_and_hold_exactly_their_records(sizes: list[int]) -> None:
    ledger, units, position = Ledger(), [], 5
    for size in sizes:
        units += ledger.add(("t", 0), position, position + size, _cells(position, position + size), now=0.0)
        position += size
    units += ledger.drain()
    units.sort(key=lambda u: u.first)
    for a, b in itertools.pairwise(units):
        assert a.next <= b.first  # A
    for u in units:
        assert u.first // CELL == (u.next - 1) // CELL  # A
        expected = np.bitwise_xor.reduce(np.arange(u.first, u.next, dtype=np.int64) * 7919) if u.next > u.first else 0
        assert (u.records, u.xor) == (u.next - u.first, int(expected))  # B
    assert sum(u.records for u in units) == sum(sizes)


def test_a_replayed_batch_cuts_the_open_unit_and_the_chain_skips_the_overlap() -> None:
    ledger = Ledger()
    first = ledger.add(("t", 0), 0, 50, _cells(0, 50), now=0.0)
    replayed = ledger.add(("t", 0), 30, 80, _cells(30, 80), now=1.0)  # a batch replayed after a crash
    assert first == [] and [(u.first, u.next) for u in replayed] == [(0, 50)]
    units = replayed + ledger.drain()
    assert [(u.first, u.next) for u in digests.chain(units, 10)] == [(0, 50)]  # C: (30, 80) overlaps, skipped


def test_an_open_unit_with_records_is_emitted_after_the_interval_one_without_is_not() -> None:
    ledger = Ledger(interval_s=60)
    ledger.add(("t", 0), 0, 10, _cells(0, 10), now=0.0)
    ledger.add(("t", 1), 0, 10, [], now=0.0)  # markers only
    assert ledger.due(now=59.0) == []
    [due] = ledger.due(now=60.0)
    assert (due.partition, due.first, due.next, due.records) == (0, 0, 10, 10)
    assert list(ledger.open) == [("t", 1)]


def test_refused_records_are_counted_apart_and_left_out_of_the_xor() -> None:
    ledger = Ledger()
    [unit] = ledger.add(("t", 0), CELL - 4, CELL, [CellDigest(0, 3, 1, 42, 7)], now=0.0)
    assert (unit.records, unit.refused, unit.xor, unit.target_first) == (3, 1, 42, 7)


@given(st.lists(st.tuples(st.integers(0, 300), st.integers(1, 40)), max_size=12), st.integers(0, 300))
def test_a_chain_starts_at_its_start_and_is_contiguous(spans: list[tuple[int, int]], start: int) -> None:
    units = [Unit("t", 0, a, a + n, n, 0, 0, None) for a, n in spans]
    found = digests.chain(units, start)
    if found:
        assert found[0].first <= start < found[0].next  # C
    for a, b in itertools.pairwise(found):
        assert a.next == b.first  # C


def test_a_unit_matches_only_the_same_count_and_xor() -> None:
    unit = Unit("t", 0, 0, 10, 10, 0, 99, 0)
    assert digests.matches(unit, {"records": 10, "xor": 99})
    assert not digests.matches(unit, {"records": 11, "xor": 99})
    assert not digests.matches(unit, {"records": 10, "xor": 98})
    assert not digests.matches(unit, None) and digests.matches(Unit("t", 0, 0, 10, 0, 3, 0, None), None)
    assert Unit.decode(unit.encode()[1]) == unit
