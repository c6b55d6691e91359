"""The copier's decisions about a partition's range (rules/range_cursor RC1-RC5), on their own."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from mirrorflow.rules.range_cursor import OPEN, closes_at_end, cut, exhausted, linger_end, lost_inside, read_to

chunks = st.lists(st.integers(0, 300), min_size=1, max_size=50, unique=True).map(sorted)


@given(chunks, st.integers(0, 300), st.integers(0, 80))
def test_a_fetched_chunk_is_dropped_taken_and_held_in_that_order_and_the_range_closes_at_its_end(
        offsets: list[int], start: int, length: int) -> None:
    """RC1."""
    until = start + length
    c = cut(offsets, start, until)
    assert 0 <= c.lo <= c.hi <= len(offsets)
    assert all(o < start for o in offsets[:c.lo])
    assert all(start <= o < until for o in offsets[c.lo:c.hi])
    assert all(o >= until for o in offsets[c.hi:])
    assert c.closes == (any(o >= until for o in offsets) or offsets[-1] == until - 1)


def test_a_chunk_inside_a_lingering_range_is_taken_whole_and_does_not_close_it() -> None:
    """RC1 with no end yet (C6)."""
    assert (cut([5, 6, 9], 4, OPEN).lo, cut([5, 6, 9], 4, OPEN).hi) == (0, 3)
    assert not cut([5, 6, 9], 4, OPEN).closes


@given(st.integers(0, 100), st.integers(0, 100), st.integers(0, 100), st.booleans())
def test_an_end_of_partition_closes_a_range_at_its_end_and_a_full_batchs_lingering_one_past_its_position(
        end: int, planned: int, position: int, behind: bool) -> None:
    """RC2."""
    assert closes_at_end(end, planned, behind=behind, planned=planned, position=position) == (end >= planned)
    lingering = closes_at_end(end, OPEN, behind=behind, planned=planned, position=position)
    assert lingering == (behind and end >= planned and end >= position)


@given(st.integers(0, 100), st.none() | st.integers(0, 200))
def test_a_lingering_range_ends_where_the_read_got_to_never_before_its_plan(planned: int, position: int | None
                                                                           ) -> None:
    """RC3."""
    end = linger_end(planned, position)
    assert end >= planned and (position is None or end >= position)
    assert end in (planned, position)


def test_a_partition_is_read_to_an_offset_by_its_position_or_its_last_end_event() -> None:
    """RC4: None is no position or no end event yet."""
    assert read_to(10, 10, None) and read_to(10, None, 12) and read_to(10, 3, 10)
    assert not read_to(10, None, None) and not read_to(10, 9, 9) and not read_to(1, None, 0)


@given(st.integers(0, 100), st.integers(0, 60), st.integers(0, 200), st.integers(0, 200))
def test_records_lost_inside_a_range_are_counted_once_and_within_it(start: int, length: int, reached: int,
                                                                   log_start: int) -> None:
    """RC5: a gap at the range's start is the driver's to see (positions against the log start), not the task's."""
    until = start + length
    lost = lost_inside(start, until, reached, log_start)
    if lost is None:
        assert not start < reached < log_start
    else:
        begin, end = lost
        assert start < begin == reached and end == min(log_start, until)
    assert exhausted(until, log_start) == (log_start >= until)
