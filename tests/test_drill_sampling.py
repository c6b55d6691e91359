"""The drills' reading of sampled end offsets: how long a topic took nothing, at most and at least."""

from __future__ import annotations

from support.streams import stall_bounds


def test_a_stall_lasts_at_most_from_one_seen_growth_to_the_next_and_at_least_between_equal_readable_sums() -> None:
    samples: list[tuple[float, int | None]] = [(0.5, 10), (1.0, 12), (1.5, 12), (2.0, None), (2.5, None),
                                               (3.0, 12), (3.5, 20), (4.0, 21)]
    at_most, at_least = stall_bounds(samples)
    assert (at_most, at_least) == (2.5, 2.0)


def test_unreadable_samples_between_growths_lengthen_only_the_upper_bound() -> None:
    samples: list[tuple[float, int | None]] = [(0.5, 10), (1.0, None), (5.0, None), (5.5, 11), (6.0, 12)]
    assert stall_bounds(samples) == (5.5, 0.0)
    assert stall_bounds([(0.5, 3), (9.5, 3)]) == (9.5, 9.0)  # nothing grew: all of it, at most
