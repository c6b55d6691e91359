"""The stream's batch planning (rules/batch_plan): admission and task-slot ranges, invariants P1-P4, P6, P8 and P9."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st
from mirrorflow.rules import batch_plan
from mirrorflow.rules.batch_plan import Range

A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)


def test_a_batch_reads_everything_available_when_under_the_cap() -> None:
    assert batch_plan.admit({A0: 5, A1: 0}, {A0: 10, A1: 3}, {}, 100) == {A0: 10, A1: 3}


def test_the_cap_is_shared_in_proportion_to_each_partitions_backlog() -> None:
    end = batch_plan.admit({A0: 0, A1: 0, B0: 0}, {A0: 900_000, A1: 100_000, B0: 0}, {}, 100_000)
    assert end == {A0: 90_000, A1: 10_000, B0: 0}


def test_a_small_backlog_still_moves_under_a_large_one() -> None:
    end = batch_plan.admit({A0: 0, A1: 0}, {A0: 1_000_000, A1: 1}, {}, 100_000)
    assert end[A1] == 1 and end[A0] <= 100_000


def test_partitions_take_turns_when_the_cap_would_leave_each_only_a_few_records() -> None:
    start = {("t", p): 0 for p in range(1200)}
    latest = {("t", p): 833 for p in range(1200)}
    first, second = (batch_plan.admit(start, latest, {}, 100_000, turn) for turn in (0, 1))
    moved = [tp for tp in start if first[tp] > 0]
    assert len(moved) == 120 and all(first[tp] == 833 for tp in moved)  # whole backlogs, not 83 records each
    assert not {tp for tp in start if second[tp] > 0} & set(moved)


def test_a_turn_moves_runs_of_consecutive_partitions_so_each_batch_writes_to_a_share_of_the_topics() -> None:
    start = {(f"t{i:04d}", p): 0 for i in range(2_000) for p in range(12)}
    latest = dict.fromkeys(start, 100)
    seen: set[tuple[str, int]] = set()
    for turn in range(10):
        end = batch_plan.admit(start, latest, {}, 250_000, turn)
        moved = sorted(tp for tp in start if end[tp] > 0)
        assert len({t for t, _ in moved}) <= 201  # 200 topics of 12, and a topic a turn's run may split
        assert not seen & set(moved)
        seen |= set(moved)
    assert seen == set(start)


def test_more_partitions_with_a_backlog_than_a_batch_may_write_take_turns_even_under_the_cap() -> None:
    start = {(f"t{i:04d}", p): 0 for i in range(2_000) for p in range(12)}
    latest = dict.fromkeys(start, 10)  # 240,000 records: under the cap, over 24,000 partitions
    for cap in (250_000, None):
        ends = [batch_plan.admit(start, latest, {}, cap, turn) for turn in range(10)]
        moved = [[tp for tp in start if end[tp] > 0] for end in ends]
        assert all(len(m) <= batch_plan.PARTITIONS_MAX for m in moved)
        assert sorted(tp for m in moved for tp in m) == sorted(start)  # ten turns: every partition once, whole
        assert all(ends[t][tp] == 10 for t, m in enumerate(moved) for tp in m)
    assert batch_plan.full(24_000, 250_000, 2_400) and not batch_plan.full(24_000, 250_000, 1_200)
    assert batch_plan.admit({A0: 0}, {A0: 10}, {}, None) == {A0: 10}


def test_a_few_partitions_with_a_long_backlog_under_a_small_cap_each_move_in_turn() -> None:
    start = {("t", p): 0 for p in range(8)}
    latest = {("t", p): 3_000 for p in range(8)}
    for turn in range(40):
        end = batch_plan.admit(start, latest, {}, 500, turn)
        assert [tp for tp in start if end[tp] > 0] == [("t", turn % 8)]


def test_a_turn_of_whole_backlogs_under_the_cap_is_a_full_batch_and_a_trickle_is_not() -> None:
    start = {("t", p): 0 for p in range(1200)}
    end = batch_plan.admit(start, dict.fromkeys(start, 1_667), {}, 100_000)
    read = sum(end.values())
    assert read < 100_000 and batch_plan.full(read, 100_000)
    assert not batch_plan.full(7_500, 100_000) and not batch_plan.full(10**9, None)


def test_every_partition_moves_every_batch_while_the_cap_leaves_each_its_minimum_share() -> None:
    start = {("t", p): 0 for p in range(12)}
    end = batch_plan.admit(start, {("t", p): 1_000_000 for p in range(12)}, {}, 100_000, turn=5)
    assert all(end[tp] == 8_333 for tp in start)


def test_a_new_partition_ends_its_first_batch_at_its_log_start() -> None:
    assert batch_plan.admit({A0: 5}, {A0: 5, B0: 700}, {B0: 300}, None) == {A0: 5, B0: 300}


def test_a_partition_deleted_past_its_start_crosses_the_deleted_span_in_one_batch() -> None:
    # P8: 9,000 records deleted unread; the cap of 200 is shared from the log start, not spent inside the gap.
    start, latest = {A0: 1_000, A1: 0}, {A0: 20_000, A1: 100}
    end = batch_plan.admit(start, latest, {A0: 10_000}, 200)
    assert end[A0] > 10_000 and (end[A0] - 10_000) + end[A1] <= 200 + 2
    assert batch_plan.admit(start, latest, {A0: 10_000, A1: 0}, None) == latest
    assert batch_plan.admit({A0: 1_000}, {A0: 5_000}, {A0: 5_000}, 200) == {A0: 5_000}  # all of it deleted
    assert batch_plan.admit({A0: 1_000}, {A0: 5_000}, {A0: 500}, 200) == {A0: 1_200}  # a log start below: as before


def test_offsets_that_went_back_end_the_batch_there_and_no_range_is_read() -> None:
    end = batch_plan.admit({A0: 50, A1: 0}, {A0: 10, A1: 5}, {}, None)
    assert end == {A0: 10, A1: 5}  # a re-created topic: the driver sees its offsets go back
    assert batch_plan.slot_ranges({A0: 50, A1: 0}, end, 2) == [[Range("a", 1, 0, 5)]]


def test_ranges_cover_each_partition_once_and_skip_empty_ones() -> None:
    slots = batch_plan.slot_ranges({A0: 0, A1: 5, B0: 7}, {A0: 10, A1: 5, B0: 9}, 4)
    assert sorted(r for rs in slots for r in rs) == sorted([Range("a", 0, 0, 10), Range("b", 0, 7, 9)])
    assert len(slots) == 2


def test_a_lingering_batch_of_empty_ranges_spreads_each_topic_over_the_slots() -> None:
    start = {(t, p): 100 for t in ("a", "b") for p in range(12)}
    slots = batch_plan.slot_ranges(start, start, 2, empty=True)
    for topic in ("a", "b"):
        assert [sum(1 for r in rs if r.topic == topic) for rs in slots] == [6, 6]


def test_a_partition_new_in_the_end_offsets_gets_no_range() -> None:
    assert batch_plan.slot_ranges({A0: 0}, {A0: 3, B0: 40}, 2) == [[Range("a", 0, 0, 3)]]


@given(st.dictionaries(st.tuples(st.sampled_from("abcd"), st.integers(0, 30)), st.tuples(
    st.integers(0, 10_000), st.integers(0, 10_000)), max_size=60), st.integers(1, 8), st.integers(1, 50_000))
def test_admission_and_planning_keep_p1_and_p3(parts: dict[tuple[str, int], tuple[int, int]], slots: int,
                                               cap: int) -> None:
    start = {tp: min(a, b) for tp, (a, b) in parts.items()}
    latest = {tp: max(a, b) for tp, (a, b) in parts.items()}
    end = batch_plan.admit(start, latest, {}, cap)
    assert all(start[tp] <= end[tp] <= latest[tp] for tp in start)  # P1
    moved = sum(1 for tp in start if end[tp] > start[tp])
    assert sum(end[tp] - start[tp] for tp in start) <= cap + moved
    backlog = {tp: latest[tp] - start[tp] for tp in start if latest[tp] > start[tp]}
    g = batch_plan.turns(backlog, cap)  # P6: any g consecutive turns move every backlogged partition
    movers = [{tp for tp in backlog if batch_plan.admit(start, latest, {}, cap, t)[tp] > start[tp]}
              for t in range(7, 7 + min(g, 40))]
    assert all(movers) or not backlog  # every turn moves a partition: a batch with a backlog is never empty
    assert g > 40 or set().union(*movers) == set(backlog)
    assert g > 1 or all(end[tp] > start[tp] for tp in backlog)
    planned = batch_plan.slot_ranges(start, end, slots)
    assert planned == batch_plan.slot_ranges(dict(reversed(start.items())), dict(reversed(end.items())), slots)  # P3
    ranges = [r for rs in planned for r in rs]
    assert len(planned) <= slots
    assert sorted((r.topic, r.partition) for r in ranges) == sorted(tp for tp in start if end[tp] > start[tp])
    assert all(r.from_offset == start[(r.topic, r.partition)] and r.until_offset == end[(r.topic, r.partition)]
               for r in ranges)
    loads = [sum(r.records for r in rs) for rs in planned]
    if loads:  # each slot within one range of an even share
        share, widest = sum(loads) / slots, max(r.records for r in ranges)
        assert all(load <= share + widest for load in loads)
        assert len(loads) < slots or all(load >= share - widest for load in loads)


def test_a_partition_stays_with_its_slot_while_the_load_is_even() -> None:
    first = batch_plan.slot_ranges({("t", p): 0 for p in range(12)}, {("t", p): 100 for p in range(12)}, 2)
    later = batch_plan.slot_ranges({("t", p): 100 for p in range(12)}, {("t", p): 190 + p for p in range(12)}, 2)
    assert [[r.partition for r in rs] for rs in first] == [[r.partition for r in rs] for rs in later] == [
        list(range(6)), list(range(6, 12))]


def test_ends_read_earlier_plan_a_batch_only_while_they_hold_a_whole_batch_past_its_start() -> None:
    start = {("a", 0): 100, ("a", 1): 0}
    assert batch_plan.fills(start, {("a", 0): 150, ("a", 1): 50}, 100)
    assert not batch_plan.fills(start, {("a", 0): 150, ("a", 1): 49}, 100)
    assert not batch_plan.fills(start, {("a", 0): 10_000, ("a", 1): 10_000}, None)  # uncapped: fresh ends
    # a partition whose offsets went back adds nothing; one the ends lack, or the start lacks, neither
    assert not batch_plan.fills(start, {("a", 0): 0, ("a", 1): 99, ("b", 0): 500}, 100)
    assert not batch_plan.fills(start, {("a", 1): 99}, 100)


def test_ends_read_earlier_plan_a_batch_while_more_partitions_than_a_turn_have_a_backlog_capped_or_not() -> None:
    """P7 with P6's turns by partitions: the batch moves a turn, the others' records wait anyway."""
    many = batch_plan.PARTITIONS_MAX + 1
    start = {("t", p): 10 for p in range(many)}
    one_each = {tp: at + 1 for tp, at in start.items()}
    assert batch_plan.fills(start, one_each, 10 * many) and batch_plan.fills(start, one_each, None)
    all_but_one = {**one_each, ("t", 0): 10}
    assert not batch_plan.fills(start, all_but_one, 10 * many) and not batch_plan.fills(start, all_but_one, None)


def test_offsets_encode_sorted_so_that_equal_offsets_compare_equal_as_text() -> None:
    one = batch_plan.encode({("b", 10): 1, ("a", 2): 5, ("a", 10): 7})
    other = batch_plan.encode({("a", 10): 7, ("b", 10): 1, ("a", 2): 5})
    assert json.dumps(one) == json.dumps(other) == '{"a": {"2": 5, "10": 7}, "b": {"10": 1}}'
    assert batch_plan.decode(json.loads(json.dumps(one))) == {("b", 10): 1, ("a", 2): 5, ("a", 10): 7}


@st.composite
def _covered(draw: st.DrawFn) -> list[tuple[int, int]]:
    """Ascending, disjoint [from, until) intervals over offsets 0..60."""
    cuts = sorted(draw(st.sets(st.integers(0, 60), max_size=12)))
    return [(a, b) for a, b in zip(cuts[::2], cuts[1::2], strict=False) if a < b]


@given(st.integers(0, 60), st.integers(0, 60), _covered())
def test_a_backfill_reads_the_smallest_span_holding_every_offset_without_a_copy(start: int, end: int,
                                                                              covered: list[tuple[int, int]]) -> None:
    missing = [o for o in range(start, end) if not any(a <= o < b for a, b in covered)]
    span = batch_plan.uncovered_span(start, end, covered)
    assert span == ((missing[0], missing[-1] + 1) if missing else None)


@given(st.lists(st.integers(0, 60), unique=True).map(sorted), st.integers(0, 20), _covered())
def test_a_backfill_writes_exactly_the_offsets_without_a_copy(offsets: list[int], lo: int,
                                                              covered: list[tuple[int, int]]) -> None:
    expected = [i for i in range(lo, len(offsets)) if not any(a <= offsets[i] < b for a, b in covered)]
    assert batch_plan.uncovered(offsets, lo, covered) == expected


@given(st.dictionaries(st.sampled_from([A0, A1, B0]), st.tuples(st.integers(0, 50), st.integers(0, 50),
                                                                st.integers(0, 60)), min_size=1))
def test_a_batch_after_a_lingering_one_resumes_where_the_copy_got_to_and_never_below_sparks_start(
        parts: dict[tuple[str, int], tuple[int, int, int]]) -> None:
    start = {tp: s for tp, (s, _, _) in parts.items()}
    end = {tp: s + n for tp, (s, n, _) in parts.items()}
    positions = {tp: p for tp, (_, _, p) in parts.items()}
    ranges = [r for slot in batch_plan.slot_ranges(batch_plan.resumed(start, positions), end, 2) for r in slot]
    for r in ranges:
        tp = (r.topic, r.partition)
        assert r.from_offset == max(start[tp], positions[tp]) and r.until_offset == end[tp]
    assert {(r.topic, r.partition) for r in ranges} == {tp for tp in parts if max(start[tp], positions[tp]) < end[tp]}


def test_a_partition_without_a_start_gets_none_from_its_position_alone() -> None:
    assert batch_plan.resumed({A0: 5}, {A0: 9, A1: 4}) == {A0: 9}
