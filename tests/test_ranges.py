"""The batch jobs' range rules, as pure functions: time and offsets parsing, and the stream's share of a range."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mirrorflow.errors import ConfigError
from mirrorflow.jobs import ranges
from mirrorflow.jobs.ranges import SourceRange


def test_times_are_epoch_milliseconds_or_iso_8601_with_naive_meaning_utc() -> None:
    assert ranges.parse_time("1795305600000") == 1_795_305_600_000
    assert ranges.parse_time("2026-11-21T10:00:00Z") == ranges.parse_time("2026-11-21 10:00") == 1_795_255_200_000
    assert ranges.parse_time("2026-11-21T11:00:00+01:00") == 1_795_255_200_000
    for bad in ("yesterday", "21/11/2026", "17953056", ""):
        with pytest.raises(ConfigError, match="neither epoch milliseconds nor ISO 8601"):
            ranges.parse_time(bad)


def test_offsets_are_spark_starting_offsets_json_with_minus_two_for_the_earliest() -> None:
    assert ranges.parse_offsets('{"orders": {"0": 10, "1": -2}, "a.b": {"3": 0}}') == \
        {"orders": {0: 10, 1: -2}, "a.b": {3: 0}}
    for bad, says in [("{", "not JSON"), ("{}", "must be an object"), ('{"o": 3}', "expected"),
                      ('{"o": {"x": 1}}', "partition 'x'"), ('{"o": {"0": -1}}', "-> -1"),
                      ('{"o": {"0": true}}', "-> True"), ('{"o": {"0": 1.5}}', "-> 1.5")]:
        with pytest.raises(ConfigError, match=says):
            ranges.parse_offsets(bad)


@given(st.integers(0, 1000), st.integers(0, 1000), st.integers(0, 2000))
def test_the_part_below_a_position_never_widens_the_range_and_leaves_the_rest_to_the_stream(
        start: int, size: int, position: int) -> None:
    r = SourceRange("t", 0, start, start + size, "a.t", position, 0)
    part = ranges.below(r, position)
    assert r.start == part.start <= part.end <= r.end
    assert part.end <= max(position, r.start)
    assert part.end == r.end or part.end == max(position, r.start)


def test_a_batch_jobs_topics_are_one_java_regex_matching_whole_names() -> None:
    wanted = ranges.topic_filter(r"\Qorders.eu\E|pay(?<kind>ments)")
    assert [t for t in ("orders.eu", "ordersXeu", "orders.eu.old", "payments", "payments2") if wanted(t)] == [
        "orders.eu", "payments"]
    assert ranges.topic_filter(None)("anything")
    with pytest.raises(ConfigError, match=r"topics regex '\[a&&b\]' is not valid: .*intersection"):
        ranges.topic_filter("[a&&b]")
