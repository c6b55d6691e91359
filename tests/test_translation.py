"""Offset translation's invariants, on simulated mirror histories (gaps, foreign writes, crashes and replays)."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st
from mirrorflow.offset_syncs import OffsetRun, Position, expand, runs_of
from mirrorflow.translation import (
    PartitionSyncs,
    mm2_offset_syncs,
    mm2_offset_syncs_of_runs,
    mm2_target_offset,
    source_offset,
    target_offset,
)


@dataclass
class History:
    source_end: int
    visible: list[int]  # source offsets of records a reader sees (the rest: markers, aborted, compacted)
    target: list[int | None]  # per target offset, the source offset it mirrors (None: another writer)
    synced: list[tuple[int, int]]  # the (upstream, downstream) pairs the offset syncs recorded
    read: int  # the source offset the flow has read up to
    crashed: bool

    def syncs(self) -> PartitionSyncs:
        surviving: dict[int, OffsetRun] = {}
        for run in runs_of("t", 0, self.synced):  # compaction keeps the newest run per first upstream offset
            surviving[run.upstream] = run
        return PartitionSyncs(tuple(surviving.values()), Position("t", 0, self.read, len(self.target)))


@st.composite
def histories(draw: st.DrawFn, crashes: bool = True) -> History:
    n = draw(st.integers(0, 40))
    visible = [u for u in range(n) if draw(st.integers(0, 4)) > 0]
    target: list[int | None] = []
    synced: list[tuple[int, int]] = []
    stop = draw(st.integers(0, len(visible)))
    i, crashed, budget = 0, False, 3
    while i < stop:
        event = draw(st.sampled_from(["copy"] * 6 + ["foreign"] + (["crash"] if crashes and budget else [])))
        if event == "copy":
            synced.append((visible[i], len(target)))
            target.append(visible[i])
            i += 1
        elif event == "foreign":
            target.append(None)
        else:
            budget -= 1
            crashed = True
            target.extend(visible[i: i + draw(st.integers(0, 3))])  # written, crash before their syncs
            i = draw(st.integers(0, i))  # the batch is replayed from its start
    read = visible[i] if i < len(visible) else n
    return History(n, visible, target, synced, read, crashed)


def resume(t: int | None) -> int:
    return 0 if t is None else t


@settings(max_examples=400)
@given(histories())
def test_a_group_resumes_past_everything_it_consumed_and_before_everything_it_did_not(h: History) -> None:
    syncs = h.syncs()
    for u in range(h.read + 1):
        got = target_offset(syncs, u)
        assert got.exact
        after = {v for v in h.target[resume(got.offset):] if v is not None}
        assert not {v for v in after if v < u}, "re-reads a consumed record"
        assert {v for v in h.visible if u <= v < h.read} <= after, "skips an unconsumed record"


@settings(max_examples=300)
@given(histories())
def test_translation_is_monotonic_in_the_group_offset(h: History) -> None:
    syncs = h.syncs()
    offsets = [resume(target_offset(syncs, u).offset) for u in range(h.source_end + 3)]
    assert offsets == sorted(offsets)


@settings(max_examples=300)
@given(histories(crashes=False), st.sampled_from([0, 1, 3, 10, 100]))
def test_mm2s_rule_is_never_past_the_exact_offset(h: History, lag: int) -> None:
    syncs = h.syncs()
    sampled = mm2_offset_syncs(h.synced, lag)
    for u in range(h.read + 1):
        mm2 = mm2_target_offset(sampled, u)
        assert mm2 is None or mm2 <= resume(target_offset(syncs, u).offset)


@settings(max_examples=300)
@given(histories(crashes=False))
def test_failback_returns_to_the_first_unconsumed_source_record(h: History) -> None:
    syncs = h.syncs()
    for u in range(h.read + 1):
        t = target_offset(syncs, u).offset
        if t is None:
            continue
        back = source_offset(syncs, t)
        assert back.exact
        start = resume(back.offset)
        mirrored = {s[0] for s in h.synced}
        assert not [v for v in range(min(start, u), max(start, u)) if v in mirrored]


@settings(max_examples=300)
@given(histories(crashes=False))
def test_past_the_flows_read_point_it_is_mm2s_rule_with_every_record_a_sync(h: History) -> None:
    syncs = h.syncs()
    every = expand(sorted(syncs.runs, key=lambda r: r.upstream))
    for u in range(h.read + 1, h.source_end + 3):
        got = target_offset(syncs, u)
        assert not got.exact and got.reason
        if every:
            assert got.offset == mm2_target_offset(every, u)


def test_a_partition_with_no_records_resumes_at_the_targets_start() -> None:
    assert target_offset(PartitionSyncs(()), 0).offset is None
    assert target_offset(PartitionSyncs(()), 0).exact


def test_mm2_rereads_up_to_offset_lag_max_near_the_head() -> None:
    pairs = [(u, u + 1000) for u in range(1000)]
    syncs = PartitionSyncs(tuple(runs_of("t", 0, pairs)), Position("t", 0, 1000, 2000))
    sampled = mm2_offset_syncs(pairs, 100)
    rereads = [resume(target_offset(syncs, u).offset) - (mm2_target_offset(sampled, u) or 0) for u in range(1000)]
    assert max(rereads) == 99 and rereads[0] == 0
    assert target_offset(syncs, 950).offset == 1950


@settings(max_examples=400)
@given(histories(), st.sampled_from([0, 1, 2, 5, 100]))
def test_mm2_syncs_from_runs_equal_mm2_syncs_from_every_record(h: History, lag: int) -> None:
    runs = runs_of("t", 0, h.synced)
    assert mm2_offset_syncs_of_runs(runs, lag) == mm2_offset_syncs(h.synced, lag)
