"""The flow's state between batches (rules/flow_state.py): its invariants F1-F4 on their own, no Kafka or Spark."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from mirrorflow.rules.anchors import Anchor
from mirrorflow.rules.flow_state import STUCK_PAUSE_S, FlowState, PartitionSummary, Tombstone
from mirrorflow.rules.offset_syncs import AnchorRecord, Incarnation, Loss, OffsetRun, Position
from mirrorflow.rules.partition_report import PartitionReport

TP = ("orders", 0)


@dataclass
class _Syncs:
    """Offset syncs as a reader hands them over: plain values."""

    positions: dict[tuple[str, int], Position] = field(default_factory=dict)
    anchors: dict[tuple[str, int], dict[int, Anchor]] = field(default_factory=dict)
    runs: dict[tuple[str, int], dict[int, OffsetRun]] = field(default_factory=dict)
    losses: dict[tuple[str, int], Loss] = field(default_factory=dict)
    incarnations: dict[str, str] = field(default_factory=dict)

    def partitions(self) -> set[tuple[str, int]]:
        return set(self.positions) | {tp for tp, a in self.anchors.items() if a} | {
            tp for tp, r in self.runs.items() if r}


def _summary(tp: tuple[str, int] = TP, first: int = 10, upstream_next: int = 20, downstream: int = 100,
             **changes: object) -> PartitionSummary:
    s = PartitionSummary(tp, first, upstream_next, downstream + (upstream_next - first),
                         Anchor(first, downstream), Anchor(upstream_next - 1, downstream + upstream_next - first - 1),
                         replay=False, stuck=None, aborted=False, filtered=0)
    return replace(s, **changes)  # type: ignore[arg-type]


def _state() -> FlowState:
    return FlowState(anchor_limit=8, anchor_spacing=0)


def test_a_position_moves_with_its_summary_and_never_back_on_a_replay() -> None:
    state = _state()
    state.fold([_summary(first=10, upstream_next=20)])
    assert state.position(TP) == 20 and state.downstream_next[TP] == 110
    assert [(a.upstream, a.downstream) for a in state.anchors[TP].anchors] == [(10, 100), (19, 109)]
    state.fold([_summary(first=10, upstream_next=15, downstream=110, replay=True)])  # a retried task, shorter
    assert state.position(TP) == 20


def test_dropping_a_topic_forgets_every_entry_of_it_and_returns_the_tombstones_of_its_records() -> None:
    state = _state()
    other = ("payments", 0)
    state.fold([_summary(), _summary(other)])
    state.incarnations.update({"orders": "id-1", "payments": "id-2"})
    state.add_loss(TP, 0, 10)
    paused = state.settle([_summary(stuck="no leader")], frozenset(), now=1.0, wall=1000.0)
    assert paused.newly_stuck and TP in state.stuck
    records = state.drop_topics({"orders"})
    assert TP not in state.upstream_next and TP not in state.anchors and TP not in state.losses
    assert TP not in state.stuck and "orders" not in state.incarnations
    assert {type(r) for r in records} == {AnchorRecord, Tombstone, Incarnation}
    assert Tombstone(Loss("orders", 0)) in records and Tombstone(Position("orders", 0, 0, None)) in records
    assert all(r.anchor is None for r in records if isinstance(r, AnchorRecord))
    assert state.position(other) == 20 and state.incarnations == {"payments": "id-2"}


def test_a_partition_stuck_before_it_had_a_position_gets_its_batch_start_and_does_not_move_while_paused() -> None:
    state = _state()
    settled = state.settle([_summary(first=7, upstream_next=30, stuck="request timed out")], frozenset(),
                           now=100.0, wall=5000.0)
    assert settled.moving == [] and settled.first_positions == [Position("orders", 0, 7, None)]
    assert settled.newly_stuck == [(TP, "request timed out", STUCK_PAUSE_S)]
    assert state.position(TP) == 7
    paused = state.paused({TP: 7})
    assert paused == {TP}
    settled = state.settle([_summary(first=7, upstream_next=40, filtered=33)], paused, now=101.0, wall=5001.0)
    assert settled.held_back == [(TP, "request timed out", 33)] and state.position(TP) == 7
    assert state.stuck_due(100.0 + STUCK_PAUSE_S - 1) == []
    assert state.stuck_due(100.0 + STUCK_PAUSE_S) == [TP]
    assert state.paused({TP: 7}) == frozenset() and state.paused({TP: 9}) == {TP}  # only a batch at its position
    again = state.settle([_summary(first=7, upstream_next=30, stuck="request timed out")], frozenset(), now=200.0,
                         wall=5100.0)
    assert again.newly_stuck == [(TP, "request timed out", 2 * STUCK_PAUSE_S)]  # the pause doubles
    assert state.stuck[TP].since == 5000.0
    state.stuck_due(10_000.0)
    taken = state.settle([_summary(first=7, upstream_next=30)], frozenset(), now=10_001.0, wall=6000.0)
    assert taken.resumed == [TP] and [s.tp for s in taken.moving] == [TP] and TP not in state.stuck


def test_partitions_aborted_with_a_stuck_ones_transaction_are_written_again_at_once() -> None:
    state = _state()
    mate = ("orders", 1)
    settled = state.settle([_summary(stuck="no leader"), _summary(mate, aborted=True)], frozenset(), now=50.0,
                           wall=500.0)
    assert settled.aborted == 1 and [tp for tp, _, _ in settled.newly_stuck] == [TP]
    assert state.stuck_due(50.0) == [mate]  # due at once, the stuck one only after its pause
    quiet, released = state.move_quiet({mate: 30}, {"orders"}, frozenset())
    assert quiet == [Position("orders", 1, 30, None)] and released == [mate]


def test_partitions_whose_batch_held_nothing_visible_move_to_its_end_but_paused_ones_do_not() -> None:
    state = _state()
    state.fold([_summary(first=0, upstream_next=10)])
    state.settle([_summary(("orders", 1), first=0, upstream_next=5, stuck="no leader")], frozenset(), now=1.0,
                 wall=1.0)
    quiet, released = state.move_quiet({TP: 12, ("orders", 1): 8, ("internal", 0): 3}, {"orders"},
                                       frozenset({("orders", 1)}))
    assert quiet == [Position("orders", 0, 12, 110)] and released == []
    assert state.position(TP) == 12 and state.position(("orders", 1)) == 0 and state.position(("internal", 0)) is None


def test_a_replayed_batch_finding_the_same_gap_records_no_second_loss() -> None:
    state = _state()
    first = state.add_loss(TP, 100, 150)
    assert first is not None and first.lost == 50
    assert state.add_loss(TP, 100, 150) is None
    later = state.add_loss(TP, 200, 210)
    assert later is not None and later.lost == 60


def test_loading_takes_the_syncs_state_keeps_held_topics_and_turns_runs_of_an_older_version_into_anchors() -> None:
    runs = {0: OffsetRun("orders", 0, 0, 0, 10), 10: OffsetRun("orders", 0, 10, 10, 5)}
    syncs = _Syncs(positions={TP: Position("orders", 0, 15, 15), ("b", 0): Position("b", 0, 4, None)},
                   runs={TP: runs}, losses={TP: Loss("orders", 0, 3, ((0, 3),))}, incarnations={"orders": "id"})
    state = _state()
    state.hold("gone", "remote topic deleted")
    records, migrated = state.load(syncs)
    assert migrated == 2
    assert state.position(TP) == 15 and state.downstream_next == {TP: 15} and state.position(("b", 0)) == 4
    assert state.losses[TP].lost == 3 and state.incarnations == {"orders": "id"}
    assert state.held == {"gone": "remote topic deleted"}  # held until a reset, whoever held the lease meanwhile
    assert [(a.upstream, a.downstream) for a in state.anchors[TP].anchors] == [(0, 0), (9, 9), (10, 10), (14, 14)]
    assert Tombstone(runs[0]) in records and Tombstone(runs[10]) in records
    assert sum(isinstance(r, AnchorRecord) for r in records) == 4


def test_positions_written_by_tasks_the_driver_never_heard_from_are_adopted_only_when_ahead() -> None:
    state = _state()
    state.fold([_summary(first=0, upstream_next=10, downstream=0)])
    state.anchors[TP].drain()
    behind = Position("orders", 0, 5, 5)
    ahead = Position("orders", 0, 25, 25, batch_first=Anchor(10, 10, barrier=True))
    assert state.adopt_positions({TP: behind}) == [] and state.position(TP) == 10
    records = state.adopt_positions({TP: ahead})
    assert state.position(TP) == 25 and state.downstream_next[TP] == 25
    assert state.anchors[TP].last == Anchor(10, 10, barrier=True)
    assert [r.anchor for r in records if isinstance(r, AnchorRecord)] == [Anchor(10, 10, barrier=True)]


def test_a_task_report_becomes_the_state_s_summary_and_one_that_does_not_count_keeps_no_position() -> None:
    report = PartitionReport("orders", 0, None, 0, 0, 0, 0, None, 2, 5, None, None, None, True, 0, None, None, 0,
                             (), None, None, 0, None, None, False, gaps=((1, 3),))
    s = PartitionSummary.of(report)
    assert s.tp == TP and s.upstream_next == 5 and s.downstream_next is None and s.first is None
    assert s.last is None and s.gaps == ((1, 3),) and s.filtered == 2 and s.replay
    uncounted = PartitionSummary.of(replace(report, upstream_next=None))
    assert uncounted.upstream_next is None
    state = FlowState(anchor_limit=8, anchor_spacing=0)
    state.fold([uncounted])
    assert state.position(TP) is None and TP not in state.upstream_next
