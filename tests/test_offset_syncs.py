"""Offset-sync records and their wire format (pure)."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st
from mirrorflow.rules import offset_syncs
from mirrorflow.rules.anchors import Anchor
from mirrorflow.rules.offset_syncs import LOSS_RANGES, AnchorRecord, Incarnation, Loss, OffsetRun, Position


def test_records_round_trip_through_the_wire_format() -> None:
    anchor = AnchorRecord("orders.eu", 7, 254, Anchor(123_456_789_012, 42, barrier=True, origin=True, coarse=True))
    position = Position("orders.eu", 7, 123_456_790_012, 1042, Anchor(123_456_789_900, 1000, barrier=True))
    first = Position("orders.eu", 7, 10, 3, Anchor(0, 0, barrier=True, origin=True))
    assert offset_syncs.decode(first.key(), first.value()) == (("orders.eu", 7), first)
    quiet = Position("orders.eu", 7, 5, None)
    assert offset_syncs.decode(anchor.key(), anchor.value()) == (("orders.eu", 7), anchor)
    assert offset_syncs.decode(position.key(), position.value()) == (("orders.eu", 7), position)
    assert offset_syncs.decode(quiet.key(), quiet.value()) == (("orders.eu", 7), quiet)
    tombstone = AnchorRecord("orders.eu", 7, 254, None)
    assert tombstone.value() is None and offset_syncs.decode(tombstone.key(), None) == (("orders.eu", 7), tombstone)
    assert len({anchor.key(), position.key(), AnchorRecord("orders.eu", 7, 253, None).key()}) == 3


@given(st.lists(st.tuples(st.integers(0, 60), st.integers(1, 10)), max_size=30))
def test_a_loss_counts_the_union_of_its_ranges_merges_neighbours_and_round_trips(
        ranges: list[tuple[int, int]]) -> None:
    """Gaps as a stream meets them: each starts at or after the previous one's end (a replay repeats one)."""
    loss, at, covered = Loss("repartition", 3), 0, set()
    for skip, size in ranges:
        first = at + skip
        loss = loss.add(first, first + size)
        if skip == 0 and loss.ranges and loss.ranges[-1][1] == first + size:
            assert loss.add(first, first + size) == loss  # a replayed batch finds the same gap
        covered |= set(range(first, first + size))
        at = first + size
    assert loss.lost == len(covered)
    assert len(loss.ranges) <= LOSS_RANGES
    assert all(a < b for a, b in loss.ranges)
    assert all(b < c for (_, b), (c, _) in zip(loss.ranges, loss.ranges[1:], strict=False))  # merged, ordered
    assert offset_syncs.decode(loss.key(), loss.value()) == (("repartition", 3), loss)
    assert offset_syncs.decode(loss.key(), None) == (("repartition", 3), None)
    assert loss.key() != Position("repartition", 3, 0, 0).key()


def test_an_incarnation_round_trips_and_has_one_key_per_topic() -> None:
    now = Incarnation("orders", "kV1mZ2eWQ-2c4X1dYv3H9A")
    assert offset_syncs.decode(now.key(), now.value()) == (("orders", 0), now)
    assert Incarnation("orders", None).value() is None and Incarnation("orders", None).key() == now.key()
    assert now.key() not in {Position("orders", 0, 0, 0).key(), Loss("orders", 0).key()}


def test_the_anchor_key_layout_is_kind_topic_partition_slot() -> None:
    key = AnchorRecord("ab", 1, 3, None).key()
    assert key == b"\x00\x02" + b"\x00\x02ab" + b"\x00\x00\x00\x01" + b"\x00\x03"
    value = AnchorRecord("ab", 1, 3, Anchor(2, 3, barrier=True)).value()
    assert value == b"\x00\x00" + b"\x00" * 7 + b"\x02" + b"\x00" * 7 + b"\x03" + b"\x00\x01"


def test_a_version_0_position_and_an_old_run_are_still_read() -> None:
    key = b"\x00\x01" + b"\x00\x02ab" + b"\x00\x00\x00\x01"
    value = b"\x00\x00" + (10).to_bytes(8, "big") + (20).to_bytes(8, "big")
    assert offset_syncs.decode(key, value) == (("ab", 1), Position("ab", 1, 10, 20))
    run = OffsetRun("ab", 1, 2, 3, 4)
    assert offset_syncs.decode(run.key(), run.value()) == (("ab", 1), run)


@st.composite
def old_runs(draw: st.DrawFn) -> list[OffsetRun]:
    u, d, out = draw(st.integers(0, 1000)), draw(st.integers(0, 1000)), []
    for _ in range(draw(st.integers(1, 12))):
        n = draw(st.integers(1, 5))
        out.append(OffsetRun("t", 0, u, d, n))
        u += n + draw(st.sampled_from([0, 1, 3, -n - 2]))
        d += n + draw(st.sampled_from([0, 0, 1]))
        u = max(u, 0)
    return out


@given(old_runs())
def test_old_runs_become_anchors_at_their_ends_with_a_barrier_wherever_a_run_does_not_continue(
        runs: list[OffsetRun]) -> None:
    anchors = offset_syncs.anchors_of_runs(runs)
    ends = {(r.upstream, r.downstream) for r in runs} | {(r.upstream + r.length - 1, r.downstream + r.length - 1)
                                                        for r in runs}
    assert {(a.upstream, a.downstream) for a in anchors} == ends
    assert [a.downstream for a in anchors] == sorted(a.downstream for a in anchors)
    assert anchors[0].origin and anchors[0].barrier
    for prev, run in itertools.pairwise(runs):
        first = next(a for a in anchors if a.downstream == run.downstream)
        if run.upstream <= prev.upstream + prev.length - 1 or run.downstream != prev.downstream + prev.length:
            assert first.barrier


def test_the_topic_is_named_after_the_source_and_is_internal_by_default() -> None:
    assert offset_syncs.topic_name("primary") == "mirrorflow-offset-syncs.primary.internal"
    assert offset_syncs.is_offset_syncs_topic(offset_syncs.topic_name("a", "_"))


def test_the_writers_record_round_trips_and_is_one_per_flow() -> None:
    record = offset_syncs.Writers(4)
    assert offset_syncs.decode(record.key(), record.value()) == (("", 0), record)
    assert record.key() == offset_syncs.Writers(9).key()


def test_a_tombstone_key_says_which_record_it_deletes() -> None:
    assert offset_syncs.tombstoned(Position("orders", 3, 10, None).key()) == (Position, None)
    assert offset_syncs.tombstoned(Loss("orders", 3).key()) == (Loss, None)
    assert offset_syncs.tombstoned(Incarnation("orders", "id").key()) == (Incarnation, None)
    assert offset_syncs.tombstoned(OffsetRun("orders", 3, 12_345, 7, 2).key()) == (OffsetRun, 12_345)
    assert offset_syncs.tombstoned(AnchorRecord("orders", 3, 4, None).key()) == (None, None)


def test_an_anchor_with_a_run_round_trips_and_one_without_keeps_the_version_0_layout() -> None:
    ran = AnchorRecord("orders.eu", 7, 3, Anchor(1_000, 2_000, barrier=True, run=900))
    assert offset_syncs.decode(ran.key(), ran.value()) == (("orders.eu", 7), ran)
    plain = AnchorRecord("orders.eu", 7, 3, Anchor(1_000, 2_000, barrier=True))
    assert plain.value() == bytes.fromhex("0000" "00000000000003e8" "00000000000007d0" "0001")
