"""The writer's decisions about a partition's records (rules/partition_write PW1-PW8), on their own."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st
from mirrorflow.rules import digests
from mirrorflow.rules.anchors import Anchor
from mirrorflow.rules.partition_write import (
    copies_moved_back,
    first_anchor,
    next_position,
    queue_fills_unsent,
    records_to_write,
    reported_records,
    task_outcome,
    unflushed_allowance,
    write_failure,
)

ascending = st.lists(st.integers(0, 400), min_size=1, max_size=60, unique=True).map(sorted)


@given(ascending, st.none() | st.integers(0, 450), st.lists(st.tuples(st.integers(0, 450), st.integers(1, 40)),
                                                            max_size=4), st.data())
def test_every_record_of_a_run_is_written_skipped_or_refused_once(
        offsets: list[int], position: int | None, spans: list[tuple[int, int]], data: st.DataObject) -> None:
    """PW1: skipped are those below the position or inside a copied stretch; refused those whose headers say they came
    from the target; the rest are written, in order."""
    copied: list[tuple[int, int]] = []
    for start, length in sorted(spans):  # ascending, disjoint [from, until) stretches
        if not copied or start >= copied[-1][1]:
            copied.append((start, start + length))
    looped = data.draw(st.sets(st.sampled_from(range(len(offsets)))))
    headers = [[("mirrorflow.provenance", b"target")] if i in looped else None for i in range(len(offsets))]
    plan = records_to_write(offsets, position, copied, headers, lambda h: h is not None)

    def skip(offset: int) -> bool:
        return (position is not None and offset < position) or any(a <= offset < b for a, b in copied)

    assert plan.writes == sorted(plan.writes)
    assert plan.skipped == sum(1 for o in offsets if skip(o))
    assert set(plan.refused) == {i for i in looped if not skip(offsets[i])}
    assert set(plan.writes) == {i for i, o in enumerate(offsets) if not skip(o) and i not in looped}


@given(st.integers(0, 1000), st.none() | st.integers(0, 1000), st.booleans(), st.none() | st.integers(0, 1000),
       st.none() | st.integers(0, 1000))
def test_a_position_never_moves_behind_what_was_read_and_after_a_whole_range_is_its_end(
        read_through: int, range_end: int | None, whole: bool, last_copy: int | None, previous: int | None) -> None:
    """PW2."""
    upstream, downstream = next_position(read_through, range_end, whole, last_copy, previous)
    assert upstream >= read_through
    assert upstream == (max(read_through, range_end) if whole and range_end is not None else read_through)
    assert downstream == (last_copy + 1 if last_copy is not None else previous)


def test_a_first_copy_below_the_next_target_offset_means_the_remote_topic_was_recreated() -> None:
    """PW3."""
    assert copies_moved_back(5, 10) and not copies_moved_back(10, 10) and not copies_moved_back(0, None)


def test_a_batch_first_copy_is_a_barrier_after_a_replay_or_where_another_writer_landed_in_between() -> None:
    assert first_anchor((10, 10), None, False, False) == Anchor(10, 10, barrier=False, origin=True)
    assert first_anchor((10, 10), 10, False, False) == Anchor(10, 10, barrier=False, origin=False)
    assert first_anchor((10, 10), 10, True, False).barrier  # a replay
    # Idempotent: copies 10..14 of a fenced writer's late request landed where this batch's first was to go.
    assert first_anchor((10, 15), 10, False, False).barrier
    # Transactional: the last batch's commit marker sits at 10, so the first copy at 11 is no sign of another writer.
    assert not first_anchor((10, 11), 10, False, True).barrier



@given(st.lists(st.integers(0, 5), min_size=1, max_size=40), st.data())
def test_sparse_reports_are_each_runs_last_record_and_each_cells_first_written_one(
        steps: list[int], data: st.DataObject) -> None:
    cell = digests.CELL
    offsets = list(itertools.accumulate(s * cell // 3 + 1 for s in steps))
    writes = sorted(data.draw(st.sets(st.integers(0, len(offsets) - 1), min_size=1)))
    last_cell = data.draw(st.none() | st.just(offsets[writes[0]] // cell))
    reported, end = reported_records(offsets, writes, last_cell)
    previous, want = last_cell, {writes[-1]: len(writes) - 1}
    for k, i in enumerate(writes):  # the definition, record by record
        if offsets[i] // cell != previous:
            previous = offsets[i] // cell
            want[i] = k
    assert reported == want and end == offsets[writes[-1]] // cell


def test_a_flush_begins_once_about_a_batch_per_written_partition_is_left() -> None:
    """A flush makes every queued batch due at once while librdkafka sends one request per partition at a time: the
    writer first lets the queue drain to this many records."""
    one_kib = (1_000, 1_024_000)
    assert unflushed_allowance([one_kib], 1_048_576) == 1_024
    assert unflushed_allowance([one_kib] * 600, 1_048_576) == 600 * 1_024
    assert unflushed_allowance([(1_000, 10_000)], 1_048_576) == 10_000  # tiny records: librdkafka's count caps a batch
    assert unflushed_allowance([(0, 0), (5, 5_000_000)], 1_048_576) == 2  # none yet, or larger than a batch: one
    assert unflushed_allowance([], 1_048_576) == 0


def test_a_full_queue_is_flushed_at_once_when_its_partitions_may_each_hold_a_batch_filling() -> None:
    """Batches waiting out a 5 s linger are freed by no answer: past as many partitions as the queue holds whole
    batches, a full queue is sent at once; below, the writer waits for answers first (a flush makes every queued
    batch due, and the broker thread spins while one waits behind its partition's request)."""
    assert queue_fills_unsent(64, 65_536, 1_048_576)  # 64 MiB: 64 batches of 1 MiB
    assert not queue_fills_unsent(63, 65_536, 1_048_576)
    assert not queue_fills_unsent(12, 65_536, 1_048_576)  # a 12-partition topic: full batches in flight free it
    assert queue_fills_unsent(600, 65_536, 1_048_576)
    assert queue_fills_unsent(2, 1_024, 524_288)  # a small queue



STUCK, PURGED, TOO_LARGE, DENIED = frozenset({7, 8}), frozenset({-152}), 10, 29
codes = st.sampled_from([7, 8, -152, TOO_LARGE, DENIED])


@given(st.lists(st.tuples(codes, st.integers(1, 10_000)), max_size=8))
def test_a_partition_is_stuck_only_when_every_failure_may_pass_and_a_refusal_names_the_largest_too_large_record(
        failures: list[tuple[int, int]]) -> None:
    """PW7."""
    found = write_failure([c for c, _ in failures], [f for _, f in failures], stuck=STUCK, purged=PURGED,
                          too_large=TOO_LARGE)
    if not failures:
        assert found is None
        return
    assert found is not None
    passing = all(c in STUCK | PURGED for c, _ in failures)
    assert found.refused is not passing
    named = failures[found.index]
    if passing:
        assert named[0] in STUCK or not any(c in STUCK for c, _ in failures)
        assert all(c not in STUCK for c, _ in failures[:found.index])
        assert any(c in STUCK for c, _ in failures) or found.index == 0
    elif any(c == TOO_LARGE for c, _ in failures):
        assert named[1] == max(f for _, f in failures)
    else:
        assert found.index == 0


@given(st.dictionaries(st.integers(0, 20), st.none() | codes, max_size=8), st.booleans())
def test_a_transaction_commits_only_when_nothing_failed_and_aborts_exactly_its_failed_partitions_as_stuck(
        failures: dict[int, int | None], halted: bool) -> None:
    """PW8: stuck are the partitions failed for a cause of their own; a purge or a halt alone is retried."""
    outcome = task_outcome(failures, purged=PURGED, halted=halted)
    own = {p for p, c in failures.items() if c is not None and c not in PURGED}
    if own:
        assert (outcome.action, outcome.stuck) == ("abort", own)
    elif halted or any(c is not None for c in failures.values()):
        assert (outcome.action, outcome.stuck) == ("retry", frozenset())
    else:
        assert (outcome.action, outcome.stuck) == ("commit", frozenset())
