"""rules/takeover: where a flow taken over from another mirror resumes, from the target's tail (K1-K5)."""

from __future__ import annotations

import itertools
import random

from mirrorflow.rules.anchors import Anchor, PartitionAnchors
from mirrorflow.rules.offset_syncs import Position
from mirrorflow.rules.takeover import Content, attribute, find_last_copy, match_tail, plan_partition, thinned
from mirrorflow.rules.translation import IMPORTED_NOTE, PartitionSyncs, target_offsets


def _source(n: int, start: int = 0, holes: frozenset[int] = frozenset()) -> list[Content]:
    """n records from `start`, skipping the offsets in `holes` (transaction markers, compaction)."""
    out, offset = [], start
    while len(out) < n:
        if offset not in holes:
            out.append(Content(offset, 1_000 + offset))
        offset += 1
    return out


def _tail(copies: list[Content], at: int) -> list[Content]:
    return [Content(at + i, c.fingerprint) for i, c in enumerate(copies)]


def test_the_flow_resumes_just_past_the_last_copy_the_tail_holds_whatever_the_commit_says() -> None:
    source = _source(50, start=100, holes=frozenset({120, 121}))  # a commit marker's offsets
    for copied in (1, 7, 30, 50):
        tail = _tail(source[:copied], at=4_000)
        for committed in (None, 100, source[copied - 1].offset):
            match = match_tail(tail, source, source_next=152, committed=committed)
            assert match.refused is None
            assert match.resume == source[copied - 1].offset + 1  # K2: never past an open transaction's start
            assert match.last_copy == Anchor(source[copied - 1].offset, 4_000 + copied - 1)
            assert match.past_commit == sum(1 for c in source[:copied] if committed is None or c.offset > committed)


def test_a_tail_that_does_not_start_with_the_syncs_copy_or_is_empty_is_refused() -> None:
    source = _source(10, start=5)
    match = match_tail(_tail(source[1:4], at=70), source, source_next=15)
    assert match.refused is not None and "target offset 70" in match.refused  # K1
    assert match_tail([], source, source_next=15).refused is not None  # the remote partition ends before the sync


def test_repeats_of_earlier_copies_are_counted_and_another_writers_record_refuses_naming_its_offset() -> None:
    source = _source(10)
    with_retry = [source[0], source[1], source[2], source[1], source[2], source[3]]  # a producer's retry
    match = match_tail(_tail(with_retry, at=0), source, source_next=10)
    assert (match.refused, match.resume, match.repeats, match.copies) == (None, 4, 2, 4)  # K3
    assert match.one_to_one == 0  # the repeats sit between copies: no run ends at the last one
    foreign = [source[0], source[1], Content(-1, 42), source[2]]
    match = match_tail(_tail(foreign, at=500), source, source_next=10)
    assert match.refused is not None and "target offset 502" in match.refused


def test_a_commit_past_the_last_copy_on_the_target_is_refused() -> None:
    source = _source(10)
    match = match_tail(_tail(source[:3], at=0), source, source_next=10, committed=5)
    plan = plan_partition("t", 0, committed=5, syncs=[Anchor(0, 0)], target_end=3, match=match, fallback=0, limit=8)
    assert plan.refused is not None and "committed source offset 5" in plan.refused  # K4
    assert "REFUSED" in plan.line()
    marked = _source(3)  # records 0..2, a transaction marker at 3: the log ends at 4
    match = match_tail(_tail(marked, at=0), marked, source_next=4, committed=3)
    plan = plan_partition("t", 0, committed=3, syncs=[Anchor(0, 0)], target_end=3, match=match, fallback=0, limit=8)
    assert (plan.refused, plan.resume) == (None, 3)  # a commit naming the marker (a hand-back's) loses nothing


def test_a_partition_the_old_mirror_never_copied_resumes_at_the_fallback_or_past_its_commit() -> None:
    plan = plan_partition("t", 1, committed=None, syncs=[], target_end=0, match=None, fallback=17, limit=8)
    assert (plan.refused, plan.resume) == (None, 17)
    refused = plan_partition("t", 1, committed=None, syncs=[], target_end=3, match=None, fallback=0, limit=8)
    assert refused.refused is not None


def test_imported_anchors_are_in_write_order_bounded_and_end_with_the_exact_last_copy() -> None:
    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(5, 400)
        source = _source(n, start=rng.randint(0, 1_000))
        syncs, down = [], 10
        for c in source[:-3]:
            if rng.random() < 0.1:
                syncs.append(Anchor(c.offset, down))
            down += 1
        newest = syncs[-1] if syncs else None
        if newest is None:
            continue
        at = source.index(next(c for c in source if c.offset == newest.upstream))
        copied = rng.randint(1, n - at)
        match = match_tail(_tail(source[at:at + copied], at=newest.downstream), source[at:], source_next=10**6)
        limit = rng.randint(2, 12)
        plan = plan_partition("t", 0, committed=None, syncs=list(reversed(syncs)), target_end=newest.downstream
                              + copied, match=match, fallback=0, limit=limit)
        anchors = plan.anchors
        assert 1 <= len(anchors) <= limit  # K5
        assert all(a.upstream < b.upstream and a.downstream < b.downstream for a, b in itertools.pairwise(anchors))
        assert all(a.imported for a in anchors[:-1]) and not anchors[-1].imported and anchors[-1].barrier
        last = match.last_copy
        assert last is not None and anchors[-1] == Anchor(last.upstream, last.downstream, barrier=True,
                                                          run=match.one_to_one)
        stored = PartitionAnchors(limit, 0, enumerate(anchors))
        assert len(stored) == len(anchors)  # the flow's store keeps them as they are


class _FlowCopies:
    """The remote partition: the old mirror's copies (no provenance header) below 1,100, the flow's from there."""

    def chunk(self, start: int, end: int) -> list[tuple[int, int]]:
        return [(d, d - 1_000) for d in range(max(start, 1_100), end)]


def test_a_group_in_the_old_mirrors_copies_translates_by_its_rule_and_one_past_the_last_copy_exactly() -> None:
    # MM2 copied source 0..99 to target 1000..1099, syncs every 25; the flow took over at 100 and copied 100..119.
    syncs = [Anchor(u, 1_000 + u, imported=True) for u in (0, 25, 50, 75)]
    anchors = (*syncs, Anchor(99, 1_099, barrier=True, run=20), Anchor(100, 1_100, barrier=True), Anchor(119, 1_119))
    partition = PartitionSyncs(anchors, Position("t", 0, 120, 1_120))
    answers = target_offsets(partition, [30, 81, 90, 100, 110], _FlowCopies())
    assert answers[30].offset == 1_026 and not answers[30].exact and IMPORTED_NOTE in answers[30].reason
    assert answers[90].offset == 1_090 and answers[90].exact  # on the run the tail's match proved (anchors D)
    assert answers[81].offset == 1_081 and answers[81].exact
    assert answers[100].offset == 1_100 and answers[100].exact
    assert answers[110].offset == 1_110 and answers[110].exact
    older = PartitionSyncs(anchors[1:], Position("t", 0, 120, 1_120))  # MM2's sync of 0 not kept
    below = target_offsets(older, [10, 25], _FlowCopies())
    assert below[10].offset is None and not below[10].exact  # the partition's start: never past the data (C)
    assert below[25].offset == 1_025 and not below[25].exact  # at the oldest sync: its copy (MM2's rule)


def test_an_old_mirrors_syncs_beyond_the_bound_keep_the_oldest_and_the_newest_and_thin_between() -> None:
    for n, keep in ((1_000, 64), (129, 64), (64, 64), (10, 3), (5, 2)):
        kept = thinned(list(range(n)), keep)
        assert len(kept) <= keep and kept == sorted(kept) and kept[0] == 0 and kept[-1] == n - 1
        assert kept[len(kept) - keep // 2:] == list(range(n - keep // 2, n))  # the newest half, every one
        gaps = [b - a for a, b in itertools.pairwise(kept)]
        assert gaps == sorted(gaps, reverse=True)  # older ones further apart
    syncs = [Anchor(u, 5_000 + u) for u in range(0, 10_000, 10)]
    source = _source(30, start=syncs[-1].upstream)
    match = match_tail(_tail(source, at=syncs[-1].downstream), source, source_next=10**6)
    plan = plan_partition("t", 0, committed=None, syncs=syncs, target_end=syncs[-1].downstream + 30, match=match,
                          fallback=0, limit=32)
    assert plan.anchors[0] == Anchor(0, 5_000, imported=True)  # K5: a group at the oldest sync still translates


def test_a_group_on_the_run_the_tail_matched_from_an_older_sync_translates_exactly_without_a_read() -> None:
    # MM2 copied source 0..199 to target 1000..1199 one to one, syncs every 10; the tail was matched from sync 50.
    syncs = [Anchor(u, 1_000 + u) for u in range(0, 200, 10)]
    source = _source(150, start=50)
    match = match_tail(_tail(source, at=1_050), source, source_next=200)
    plan = plan_partition("t", 0, committed=None, syncs=syncs, target_end=1_200, match=match, fallback=0, limit=32)
    runs = {a.upstream: a.run for a in plan.anchors}
    assert runs[199] == 150 and runs[60] == 11 and runs[50] == 0 and runs[40] == 0  # K5, anchors D
    partition = PartitionSyncs(plan.anchors, Position("t", 0, 200, 1_200))
    answers = target_offsets(partition, [52, 57, 61, 150, 199], None)  # no reader: any read would fail
    assert all(answers[u].offset == 1_000 + u and answers[u].exact for u in (52, 57, 61, 150, 199)), answers
    assert not target_offsets(partition, [45], _FlowCopies())[45].exact  # before the run: MM2's rule


def test_without_a_sync_the_latest_copy_of_the_last_committed_record_that_the_tail_follows_stands_for_one() -> None:
    source = _source(30, start=50)
    committed = source[10]  # the group's last consumed record; the mirror copied 5 more before it stopped
    older = _tail(source[:12], at=0)  # an earlier pass over the same records (a restart that re-copied)
    window = [*older, *_tail(source[10:16], at=12)]
    found = find_last_copy(window, source[10:], source_next=80, committed=committed.offset)
    assert found is not None
    sync, match = found
    assert sync == Anchor(committed.offset, 12) and match.resume == source[16].offset  # K6, then K2
    assert match.past_commit == 5
    assert find_last_copy(window[:5], source[10:], source_next=80, committed=committed.offset) is None
    other = [*window[:14], Content(14, 7), *window[15:]]  # after the last copy, a record that is no copy (K3)
    assert find_last_copy(other, source[10:], source_next=80, committed=committed.offset) is None


def test_thinning_a_store_that_starts_with_imported_anchors_keeps_them_a_prefix_and_the_last_copy() -> None:
    rng = random.Random(3)
    for _ in range(100):
        imported = [Anchor(u, 1_000 + u, imported=True) for u in range(0, 10 * rng.randint(2, 7), 10)]
        last = Anchor(imported[-1].upstream + 5, imported[-1].downstream + 5, barrier=True, run=5)
        limit = rng.randint(len(imported) + 1, len(imported) + 6)
        store = PartitionAnchors(limit, 0, enumerate([*imported, last]))
        u, d = last.upstream + 1, last.downstream + 1
        for _ in range(rng.randint(1, 60)):  # the stream's batches after the takeover, some of them replays
            n = rng.randint(1, 30)
            replay = rng.random() < 0.2
            store.record_batch(Anchor(u, d), Anchor(u + n - 1, d + n - 1), replay=replay, fresh=False, records=n)
            u, d = u + n, d + n
            if rng.random() < 0.1:
                store.prune_below(rng.randint(0, u // 3))
            kinds = [a.imported for a in store.anchors]
            assert kinds == sorted(kinds, reverse=True)  # I: every anchor before an imported one is imported
            assert len(store) <= limit


def test_an_old_mirrors_copies_are_attributed_by_content_as_written_repeats_and_skips_included() -> None:
    rng = random.Random(7)
    source = _source(300, start=40, holes=frozenset({90, 91, 200}))
    for _ in range(200):  # a mirror that rewinds to an earlier commit now and then, and skips a record or two
        written, i = [], 0
        while i < len(source):
            written.append(source[i].offset)
            roll = rng.random()
            i = max(0, i - rng.randint(1, 20)) if roll < 0.03 else i + 2 if roll < 0.05 else i + 1
        prints = {c.offset: c.fingerprint for c in source}
        assert attribute([prints[o] for o in written], source) == written  # K7
    assert attribute([5, 1_040, 6], source) == [None, 40, None]  # equal to no source record: none


def test_copies_of_equal_records_are_attributed_in_order_from_the_cursor() -> None:
    source = [Content(o, 7 if o % 2 else 8) for o in range(10)]  # two contents, alternating
    assert attribute([8, 7, 8, 7, 8, 7], source) == [0, 1, 2, 3, 4, 5]
    assert attribute([8, 8, 7], source) == [0, 2, 3]  # offset 1 was skipped
