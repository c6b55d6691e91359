"""The copier's fetch wait against the partitions a worker's consumer holds (pure: no broker)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from mirrorflow.kafka import readers


def test_a_consumer_of_a_dozen_partitions_fetches_every_5_ms() -> None:
    assert readers.fetch_wait_ms(12) == 5
    assert readers.reader_config({}, "a->b", False, partitions=12)["fetch.wait.max.ms"] == 5


def test_the_wait_grows_with_the_partitions_up_to_half_a_second() -> None:
    assert readers.fetch_wait_ms(24) == 10
    assert readers.fetch_wait_ms(600) == 320
    assert readers.fetch_wait_ms(12_000) == 500


def test_a_wait_the_operator_set_is_kept() -> None:
    config = readers.reader_config({"fetch.wait.max.ms": "100"}, "a->b", False, partitions=600)
    assert config["fetch.wait.max.ms"] == "100"


@given(st.integers(min_value=0, max_value=100_000), st.integers(min_value=0, max_value=100_000))
def test_an_idle_consumer_stays_within_its_partition_reads_unless_at_the_longest_wait(a: int, b: int) -> None:
    low, high = readers.FETCH_WAIT_MS
    wait = readers.fetch_wait_ms(a)
    assert low <= wait <= high
    assert wait == high or max(a, 1) * 1000 / wait <= readers.IDLE_PARTITION_READS_PER_S
    assert (readers.fetch_wait_ms(a) <= readers.fetch_wait_ms(b)) == (a <= b) or wait == readers.fetch_wait_ms(b)
