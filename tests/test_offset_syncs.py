"""Offset-sync runs and their wire format (pure)."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st
from mirrorflow import offset_syncs
from mirrorflow.offset_syncs import OffsetRun, Position


@st.composite
def write_orders(draw: st.DrawFn) -> list[tuple[int, int]]:
    """(upstream, downstream) pairs as a writer produces them: both strictly increasing, with gaps."""
    n = draw(st.integers(0, 60))
    u, d, out = draw(st.integers(0, 10**6)), draw(st.integers(0, 10**6)), []
    for _ in range(n):
        out.append((u, d))
        u += draw(st.sampled_from([1, 1, 1, 2, 5]))
        d += draw(st.sampled_from([1, 1, 1, 2]))
    return out


@given(write_orders())
def test_runs_expand_back_to_the_pairs_and_are_maximal(pairs: list[tuple[int, int]]) -> None:
    runs = offset_syncs.runs_of("t", 3, pairs)
    assert offset_syncs.expand(runs) == pairs  # A
    for a, b in itertools.pairwise(runs):
        assert not (b.upstream == a.upstream_end and b.downstream == a.downstream_end)  # B
        assert b.upstream > a.upstream and b.downstream > a.downstream  # C


@given(write_orders(), st.integers(1, 59))
def test_a_run_split_across_batches_is_merged_back(pairs: list[tuple[int, int]], cut: int) -> None:
    first, second = pairs[:cut], pairs[cut:]
    before = offset_syncs.runs_of("t", 0, first)
    after = offset_syncs.continued(before[-1] if before else None, offset_syncs.runs_of("t", 0, second))
    merged = {r.upstream: r for r in [*before, *after]}  # what compaction keeps: the newest per key
    assert offset_syncs.expand(sorted(merged.values(), key=lambda r: r.upstream)) == pairs


def test_records_round_trip_through_the_wire_format() -> None:
    run = OffsetRun("orders.eu", 7, 123_456_789_012, 42, 1000)
    position = Position("orders.eu", 7, 123_456_790_012, 1042)
    assert offset_syncs.decode(run.key(), run.value()) == run
    assert offset_syncs.decode(position.key(), position.value()) == position
    assert offset_syncs.decode(run.key(), None) is None
    assert run.key() != position.key()


def test_the_run_key_layout_is_kind_topic_partition_upstream() -> None:
    key = OffsetRun("ab", 1, 2, 3, 4).key()
    assert key == b"\x00\x00" + b"\x00\x02ab" + b"\x00\x00\x00\x01" + b"\x00" * 7 + b"\x02"
    assert OffsetRun("ab", 1, 2, 3, 4).value() == b"\x00\x00" + b"\x00" * 7 + b"\x03" + b"\x00" * 7 + b"\x04"


def test_the_topic_is_named_after_the_source_and_is_internal_by_default() -> None:
    assert offset_syncs.topic_name("primary") == "mirrorflow-offset-syncs.primary.internal"
    assert offset_syncs.is_offset_syncs_topic(offset_syncs.topic_name("a", "_"))
