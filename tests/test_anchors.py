"""The anchor store's bound, slots and restarts (pure); translation through it is in test_translation.py."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from mirrorflow.rules.anchors import Anchor, PartitionAnchors


@st.composite
def batch_streams(draw: st.DrawFn) -> list[tuple[Anchor, Anchor, bool]]:
    """Batches as the driver records them: ascending, with now and then a replay that starts lower."""
    u = d = 0
    out = []
    for _ in range(draw(st.integers(1, 120))):
        replay = draw(st.integers(0, 9)) == 0
        if replay:
            u = max(0, u - draw(st.integers(0, 50)))
        n = draw(st.integers(1, 40))
        gap = draw(st.sampled_from([1, 1, 2, 5]))
        out.append((Anchor(u, d), Anchor(u + (n - 1) * gap, d + n - 1), replay))
        u, d = u + n * gap, d + n + draw(st.sampled_from([0, 0, 1]))
    return out


@settings(max_examples=300)
@given(batch_streams(), st.integers(2, 12), st.integers(1, 30))
def test_the_store_never_exceeds_its_limit_and_its_slot_writes_rebuild_it(
        batches: list[tuple[Anchor, Anchor, bool]], limit: int, spacing: int) -> None:
    store = PartitionAnchors(limit, spacing)
    compacted: dict[int, Anchor] = {}  # what the compacted topic keeps: the newest record per slot key
    for i, (first, last, replay) in enumerate(batches):
        store.record_batch(first, last, replay=replay, fresh=i == 0)
        for slot, anchor in store.drain():
            if anchor is None:
                compacted.pop(slot, None)
            else:
                compacted[slot] = anchor
        assert len(store) <= limit
        assert dict(zip(store.slots, store.anchors, strict=True)) == compacted
        assert [a.downstream for a in store.anchors] == sorted({a.downstream for a in store.anchors})
    restarted = PartitionAnchors(limit, spacing, compacted.items())
    assert restarted.anchors == store.anchors and not restarted.drain()


@given(batch_streams())
def test_a_smaller_limit_after_a_restart_moves_anchors_into_its_slots_and_writes_none_it_dropped(
        batches: list[tuple[Anchor, Anchor, bool]]) -> None:
    store = PartitionAnchors(16, 1)
    for i, (first, last, replay) in enumerate(batches):
        store.record_batch(first, last, replay=replay, fresh=i == 0)
    compacted = dict(zip(store.slots, store.anchors, strict=True))
    smaller = PartitionAnchors(4, 1, compacted.items())
    if smaller.last is not None:  # a position's batch-first record adopted before the first drain (FlowState.load)
        smaller.append(Anchor(smaller.last.upstream + 1, smaller.last.downstream + 1, barrier=True))
    for slot, anchor in smaller.drain():
        if anchor is None:
            compacted.pop(slot, None)
        else:
            compacted[slot] = anchor
    assert len(smaller) <= 4 and compacted == dict(zip(smaller.slots, smaller.anchors, strict=True))


def test_a_steady_flow_rewrites_one_anchor_per_batch_and_adds_one_per_spacing() -> None:
    store = PartitionAnchors(255, spacing=1_000)
    writes = 0
    for b in range(1_000):
        store.record_batch(Anchor(b * 100, b * 100), Anchor(b * 100 + 99, b * 100 + 99), replay=b == 0, fresh=b == 0)
        writes += len(store.drain())
    assert writes == 1_000 + 1  # the origin, then one slot write per batch
    assert 90 <= len(store) <= 110  # one anchor per 1,000 target offsets


def test_without_spacing_every_batch_adds_an_anchor_until_the_bound_then_about_one_write_per_batch() -> None:
    store = PartitionAnchors(255)
    writes = 0
    for b in range(10_000):
        store.record_batch(Anchor(b * 100, b * 100), Anchor(b * 100 + 99, b * 100 + 99), replay=b == 0, fresh=b == 0)
        writes += len(store.drain())
        assert len(store) <= 255
    assert len(store) > 200 and writes < 2.2 * 10_000
    gaps = [b.downstream - a.downstream for a, b in zip(store.anchors, store.anchors[1:], strict=False)]
    assert gaps[-1] <= 100 and gaps[0] > 10_000  # dense near the head, sparse far behind


def test_every_prefix_of_a_prunes_writes_leaves_no_bracket_across_a_replay() -> None:
    """A kill -9 part way through the driver's anchor writes (invariant W): the prune's tombstones go oldest first,
    so the store never keeps an anchor before a replay's barrier and one after it without the barrier."""
    store = PartitionAnchors(3, 1)
    store.record_batch(Anchor(6, 0), Anchor(6, 0), replay=True, fresh=True)
    compacted: dict[int, Anchor] = {s: a for s, a in store.drain() if a is not None}
    store.record_batch(Anchor(7, 3), Anchor(8, 4), replay=True, fresh=False)  # (7, 3) begins a replay: a barrier
    assert store.prune_below(9) == 2
    writes = store.drain()
    for k in range(len(writes) + 1):
        kept = dict(compacted)
        for slot, anchor in writes[:k]:
            if anchor is None:
                kept.pop(slot, None)
            else:
                kept[slot] = anchor
        downstreams = sorted(a.downstream for a in kept.values())
        assert not (downstreams and downstreams[0] < 3 < downstreams[-1] and 3 not in downstreams), (k, writes)


def test_more_replays_than_the_bound_keep_the_first_anchor_marked_coarse_and_write_the_mark_before_any_tombstone(
        ) -> None:
    """Invariant C: every batch a replay (a query restarted each time), so barriers alone exceed the bound."""
    store = PartitionAnchors(4, 0)
    compacted: dict[int, Anchor] = {}
    for i in range(12):
        store.record_batch(Anchor(10 * i, 10 * i), Anchor(10 * i + 9, 10 * i + 9), replay=True, fresh=i == 0)
        writes = store.drain()
        marked = [k for k, (_, a) in enumerate(writes) if a is not None and a.coarse]
        tombstones = [k for k, (_, a) in enumerate(writes) if a is None]
        assert not marked or not tombstones or marked[0] < tombstones[0], writes  # W
        for slot, anchor in writes:
            if anchor is None:
                compacted.pop(slot, None)
            else:
                compacted[slot] = anchor
        assert len(store) <= 4 and sorted(compacted.values(), key=lambda a: a.downstream) == store.anchors
    first = store.anchors[0]
    assert first.origin and first.coarse and (first.upstream, first.downstream) == (0, 0)
    assert not any(a.coarse for a in store.anchors[1:])
    assert PartitionAnchors(4, 0, compacted.items()).anchors == store.anchors  # a restart reads the mark back


@settings(max_examples=300)
@given(st.lists(st.tuples(st.integers(1, 30), st.sampled_from([1, 1, 2]), st.sampled_from([0, 0, 1]),
                          st.booleans()), min_size=1, max_size=80), st.integers(2, 8))
def test_a_run_an_anchor_keeps_is_true_of_the_target_after_any_thinning(
        batches: list[tuple[int, int, int, bool]], limit: int) -> None:
    """D, against the target itself: batches of n records (source offsets `gap` apart), a marker or not after each,
    now and then a replay of the last batch's records."""
    target: list[int | None] = []  # target offset -> the source offset it mirrors (None: a marker)
    store = PartitionAnchors(limit, 1)
    u = 0
    for i, (n, gap, marker, replay) in enumerate(batches):
        if replay and i:
            u = max(0, u - n)
        offsets = list(range(u, u + n * gap, gap))
        d = len(target)
        target.extend(offsets)
        store.record_batch(Anchor(offsets[0], d), Anchor(offsets[-1], d + n - 1), replay=replay or i == 0,
                           fresh=i == 0, records=n)
        target.extend([None] * marker)
        u = offsets[-1] + 1
        for a in store.anchors:
            assert all(target[a.downstream - k] == a.upstream - k for k in range(a.run)), a


def test_batches_written_back_to_back_without_markers_extend_one_run() -> None:
    store = PartitionAnchors(4, 1)
    for b in range(10):
        store.record_batch(Anchor(b * 10, b * 10), Anchor(b * 10 + 9, b * 10 + 9), replay=b == 0, fresh=b == 0,
                           records=10)
    assert store.last == Anchor(99, 99, run=100)
    store.record_batch(Anchor(101, 101), Anchor(105, 105), replay=False, fresh=False, records=5)  # a source hole
    assert store.last is not None and store.last.run == 5
