"""Offset translation's invariants, on simulated mirror histories: transaction gaps, foreign writes, failed
attempts, replays, and anchor stores small enough that thinning, pruning and the hard bound all happen."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st
from mirrorflow.rules.anchors import Anchor, PartitionAnchors
from mirrorflow.rules.offset_syncs import Position
from mirrorflow.rules.translation import (
    PartitionSyncs,
    Translation,
    mm2_comparison,
    mm2_offset_syncs,
    mm2_target_offset,
    source_offset,
    target_offset,
    target_offsets,
)


class ListReader:
    """The target partition as a list (index = target offset, value = the source offset it mirrors, None for
    another writer's record), read a few records at a time as a Kafka fetch would."""

    def __init__(self, target: list[int | None], per_read: int = 3) -> None:
        self.target, self.per_read, self.reads = target, per_read, 0

    def chunk(self, start: int, end: int) -> list[tuple[int, int]]:
        self.reads += 1
        out = []
        for d in range(start, min(end, len(self.target))):
            v = self.target[d]
            if v is not None:
                out.append((d, v))
                if len(out) == self.per_read:
                    break
        return out


@dataclass
class History:
    source_end: int
    visible: list[int]  # source offsets of records a reader sees (the rest: markers, aborted, compacted)
    target: list[int | None]
    batches: list[tuple[int, int, int, int, bool]]  # recorded (first u, first d, last u, last d, replay)
    counts: list[int]  # records each recorded batch wrote (anchors D)
    read: int  # the source offset the flow has read up to
    written: int  # one past the target offset of the last recorded record
    failed: bool

    def syncs(self, limit: int = 10_000, spacing: int = 1, counted: bool = True) -> PartitionSyncs:
        store = self.store(limit, spacing, counted)
        return PartitionSyncs(tuple(store.anchors), Position("t", 0, self.read, self.written))

    def store(self, limit: int = 10_000, spacing: int = 1, counted: bool = True) -> PartitionAnchors:
        """`counted`: the batches say how many records they wrote (anchors D), as the stream's do."""
        store = PartitionAnchors(limit, spacing)
        for i, ((fu, fd, lu, ld, replay), n) in enumerate(zip(self.batches, self.counts, strict=True)):
            store.record_batch(Anchor(fu, fd), Anchor(lu, ld), replay=replay, fresh=i == 0, records=n if counted else 0)
        return store


@st.composite
def histories(draw: st.DrawFn, failures: bool = True) -> History:
    n = draw(st.integers(0, 50))
    visible = [u for u in range(n) if draw(st.integers(0, 4)) > 0]
    target: list[int | None] = []
    batches: list[tuple[int, int, int, int, bool]] = []
    counts: list[int] = []
    i, replay, failed, budget = 0, True, False, 4
    written = read = 0
    while i < len(visible) and draw(st.integers(0, 9)) > 0:
        event = draw(st.sampled_from(["batch"] * 5 + ["foreign"] + (["fail", "replay"] if failures and budget else [])))
        if event == "fail":  # an attempt writes part of the batch and fails (its position may land); a retry follows
            budget -= 1
            failed = True
            target.extend(visible[i: i + draw(st.integers(1, 4))])
            replay, event = True, "batch"
        elif event == "replay":  # the query restarts: its first batch may repeat what a failed attempt wrote
            budget -= 1
            replay, event = True, "batch"
        if event == "batch":
            k = draw(st.integers(1, 6))
            part = visible[i:i + k]
            first_d = len(target)
            target.extend(part)
            batches.append((part[0], first_d, part[-1], len(target) - 1, replay))
            counts.append(len(part))
            written, replay = len(target), False
            i += len(part)
            read = visible[i] if i < len(visible) else n  # the position the batch's task wrote
        else:
            target.append(None)
    return History(n, visible, target, batches, counts, read, written, failed)


def resume(t: int | None) -> int:
    return 0 if t is None else t


def _assert_exact(h: History, u: int, t: int | None) -> None:
    after = {v for v in h.target[resume(t):] if v is not None}
    assert not {v for v in after if v < u}, f"re-reads a consumed record (U={u}, T={t})"
    assert {v for v in h.visible if u <= v < h.read} <= after, f"skips an unconsumed record (U={u}, T={t})"


@settings(max_examples=500)
@given(histories())
def test_a_group_resumes_past_everything_it_consumed_and_before_everything_it_did_not(h: History) -> None:
    syncs = h.syncs()
    reader = ListReader(h.target)
    for u in range(h.read + 1):
        got = target_offset(syncs, u, reader)
        assert got.exact, got.reason
        _assert_exact(h, u, got.offset)


@settings(max_examples=500)
@given(histories())
def test_an_answer_read_off_a_one_to_one_run_equals_the_searched_one(h: History) -> None:
    searched, counted = h.syncs(counted=False), h.syncs()
    for u in range(h.read + 1):
        assert target_offset(counted, u, ListReader(h.target)) == target_offset(searched, u, ListReader(h.target))


def test_a_group_inside_a_batch_copied_one_to_one_resumes_without_a_read() -> None:
    """Batches of 100 records with a commit marker after each: only a batch's first offset needs a read (the record
    before it, and the marker, lie before the run). A bound that keeps every batch's anchor: thinning merges brackets,
    and only the run of the bracket's end is known."""
    target: list[int | None] = []
    store = PartitionAnchors(limit=100)
    for b in range(50):
        d = len(target)
        target.extend(range(b * 100, b * 100 + 100))
        target.append(None)
        store.record_batch(Anchor(b * 100, d), Anchor(b * 100 + 99, d + 99), replay=b == 0, fresh=b == 0, records=100)
    syncs = PartitionSyncs(tuple(store.anchors), Position("t", 0, 5_000, len(target)))
    reader = ListReader(target, per_read=500)
    for u in (1, 57, 99, 101, 4_321, 4_999):
        got = target_offset(syncs, u, reader)
        assert got.exact and got.offset == target.index(u), u
    assert reader.reads == 0
    assert target_offset(syncs, 4_900, reader).offset == target.index(4_900) and reader.reads > 0  # a batch's first


@settings(max_examples=500)
@given(histories(), st.integers(2, 6), st.integers(1, 4))
def test_thinning_never_changes_an_exact_answer_and_the_bound_holds(h: History, limit: int, spacing: int) -> None:
    store = h.store(limit, spacing)
    assert len(store) <= limit
    assert sorted(store.slots) == sorted(set(store.slots)) and all(0 <= s < limit for s in store.slots)
    small = PartitionSyncs(tuple(store.anchors), Position("t", 0, h.read, h.written))
    full = h.syncs()
    reader = ListReader(h.target)
    for u in range(h.read + 1):
        got = target_offset(small, u, reader)
        if got.exact:
            assert got.offset == target_offset(full, u, reader).offset
            _assert_exact(h, u, got.offset)
    if not any(b[4] for b in h.batches[1:]) and limit >= 3:
        # Without barriers beyond the origin nothing forces the hard bound: every answer stays exact.
        assert all(target_offset(small, u, reader).exact for u in range(h.read + 1))


@settings(max_examples=300)
@given(histories(), st.integers(0, 55))
def test_pruning_below_the_log_start_keeps_every_answer_for_offsets_still_on_the_source(h: History,
                                                                                       log_start: int) -> None:
    store = h.store()
    store.prune_below(log_start)
    pruned = PartitionSyncs(tuple(store.anchors), Position("t", 0, h.read, h.written))
    full = h.syncs()
    reader = ListReader(h.target)
    for u in range(h.read + 1):
        got = target_offset(pruned, u, reader)
        if u >= log_start:
            assert got.exact and got.offset == target_offset(full, u, reader).offset
        elif not got.exact:
            assert got.reason


@settings(max_examples=300)
@given(histories())
def test_many_offsets_resolved_together_equal_each_resolved_alone(h: History) -> None:
    syncs = h.syncs(limit=5)
    reader = ListReader(h.target)
    offsets = list(range(h.read + 1))
    together = target_offsets(syncs, offsets, reader)
    assert together == {u: target_offset(syncs, u, reader) for u in offsets}


@settings(max_examples=300)
@given(histories())
def test_translation_is_monotonic_in_the_group_offset(h: History) -> None:
    syncs = h.syncs(limit=6)
    reader = ListReader(h.target)
    offsets = [resume(target_offset(syncs, u, reader).offset) for u in range(h.source_end + 3)]
    assert offsets == sorted(offsets)


@settings(max_examples=300)
@given(histories(failures=False), st.sampled_from([0, 1, 3, 10, 100]))
def test_mm2s_rule_is_never_past_the_exact_offset(h: History, lag: int) -> None:
    syncs = h.syncs(limit=6)
    reader = ListReader(h.target)
    every = [(v, d) for d, v in enumerate(h.target) if v is not None]
    sampled = mm2_offset_syncs(every, lag)
    for u in range(h.read + 1):
        exact = resume(target_offset(syncs, u, reader).offset)
        mm2 = mm2_target_offset(sampled, u)
        assert mm2 is None or mm2 <= exact
        compared = mm2_comparison(syncs, u, reader, lag)
        assert compared is None or compared <= exact


@settings(max_examples=300)
@given(histories(failures=False))
def test_failback_returns_to_the_first_unconsumed_source_record(h: History) -> None:
    syncs = h.syncs(limit=6)
    reader = ListReader(h.target)
    mirrored = {v for v in h.target if v is not None}
    for u in range(h.read + 1):
        t = target_offset(syncs, u, reader).offset
        if t is None:
            continue
        back = source_offset(syncs, t, reader)
        assert back.exact
        start = resume(back.offset)
        assert not [v for v in range(min(start, u), max(start, u)) if v in mirrored]


@settings(max_examples=200)
@given(histories())
def test_past_the_flows_read_point_the_answer_is_marked_inexact(h: History) -> None:
    syncs = h.syncs()
    reader = ListReader(h.target)
    for u in range(h.read + 1, h.source_end + 3):
        got = target_offset(syncs, u, reader)
        assert not got.exact and got.reason


def test_failback_of_a_group_past_a_trailing_commit_marker_is_exact() -> None:
    """A caught-up group on a transactional target sits past the marker after the last copy."""
    syncs = PartitionSyncs((Anchor(0, 0), Anchor(2, 2)), Position("t", 0, 3, 3))
    back = source_offset(syncs, 4, ListReader([0, 1, 2, None]))
    assert back == Translation(3, True, "")
    unknown = source_offset(syncs, 6, ListReader([0, 1, 2, None, 3, None]))
    assert unknown.offset == 4 and not unknown.exact and "past what the flow has written (3)" in unknown.reason


def test_a_partition_with_no_records_resumes_at_the_targets_start() -> None:
    assert target_offset(PartitionSyncs(()), 0, None).offset is None
    assert target_offset(PartitionSyncs(()), 0, None).exact


def test_a_long_transactional_history_stays_within_the_bound_and_resolves_in_few_reads() -> None:
    """100,000 transactions of 4 records (a commit marker after each), mirrored in 2,000 batches."""
    target = [u for u in range(500_000) if u % 5 != 4]
    store = PartitionAnchors()
    d = 0
    for b in range(2_000):
        batch = [u for u in range(b * 250, b * 250 + 250) if u % 5 != 4]
        store.record_batch(Anchor(batch[0], d), Anchor(batch[-1], d + len(batch) - 1), replay=b == 0, fresh=b == 0)
        d += len(batch)
    assert len(store) <= 255
    syncs = PartitionSyncs(tuple(store.anchors), Position("t", 0, 500_000, d))
    reader = ListReader(target, per_read=500)
    for u in (0, 1, 3, 4, 5, 123_457, 250_004, 499_000, 499_999, 500_000):
        before = reader.reads
        got = target_offset(syncs, u, reader)
        assert got.exact and got.offset == sum(1 for v in range(u) if v % 5 != 4)
        assert reader.reads - before <= 12, u


@settings(max_examples=300)
@given(histories(), st.integers(2, 6), st.data())
def test_a_crash_part_way_through_the_drivers_anchor_writes_leaves_state_that_stays_exact(
        h: History, limit: int, data: st.DataObject) -> None:
    """The driver writes a batch's anchor slots (and the tombstones of thinned or pruned ones) after the batch's
    tasks wrote its records and positions; a kill -9 keeps only a prefix of those writes."""
    store = PartitionAnchors(limit, 1)
    compacted: dict[int, Anchor] = {}
    crash_at = data.draw(st.integers(0, max(0, len(h.batches) - 1)))
    for i, (fu, fd, lu, ld, replay) in enumerate(h.batches[:crash_at + 1]):
        store.record_batch(Anchor(fu, fd), Anchor(lu, ld), replay=replay, fresh=i == 0)
        if i == crash_at and data.draw(st.booleans()):
            store.prune_below(data.draw(st.integers(0, lu + 1)))
        writes = store.drain()
        if i == crash_at:
            writes = writes[:data.draw(st.integers(0, len(writes)))]
        for slot, anchor in writes:
            if anchor is None:
                compacted.pop(slot, None)
            else:
                compacted[slot] = anchor
    if not h.batches:
        return
    fu, fd, lu, ld, replay = h.batches[crash_at]
    restarted = PartitionAnchors(limit, 1, compacted.items())
    anchors = list(restarted.anchors)
    if not anchors or anchors[-1].downstream < fd:  # what the reader adds from the position's batch-first record
        anchors.append(Anchor(fu, fd, barrier=replay, origin=crash_at == 0))
    read = next((v for v in h.visible if v > lu), h.source_end)
    target = h.target[:ld + 1]
    syncs = PartitionSyncs(tuple(anchors), Position("t", 0, read, ld + 1))
    reader = ListReader(target)
    for u in range(read + 1):
        got = target_offset(syncs, u, reader)
        coarse = anchors[0].coarse and syncs.below(u) == 0
        assert got.exact or u <= anchors[0].upstream or coarse, got.reason
        if coarse:  # C: may re-read, never skip
            assert {v for v in h.visible if u <= v < read} <= {v for v in target[resume(got.offset):] if v is not None}
        if got.exact:
            after = {v for v in target[resume(got.offset):] if v is not None}
            assert not {v for v in after if v < u}, f"re-reads (U={u}, T={got.offset})"
            assert {v for v in h.visible if u <= v < read} <= after, f"skips (U={u}, T={got.offset})"


@settings(max_examples=500)
@given(histories(), st.integers(2, 6), st.integers(1, 4))
def test_an_answer_the_anchor_bound_made_coarse_is_never_ahead_of_the_data(h: History, limit: int,
                                                                           spacing: int) -> None:
    # More replays than the bound holds drop the oldest barriers, the origin among them, while the source still
    # holds every record: an inexact answer may re-read, never skip a record the group has not consumed.
    store = h.store(limit, spacing)
    small = PartitionSyncs(tuple(store.anchors), Position("t", 0, h.read, h.written))
    reader = ListReader(h.target)
    for u in range(h.read + 1):
        got = target_offset(small, u, reader)
        after = {v for v in h.target[resume(got.offset):] if v is not None}
        assert {v for v in h.visible if u <= v < h.read} <= after, f"skips an unconsumed record (U={u}, {got})"
        assert got.exact or got.reason
