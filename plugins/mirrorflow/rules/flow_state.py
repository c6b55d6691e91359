"""A flow's state as the stream's driver keeps it from batch to batch: positions, anchors, losses, incarnations,
held topics and stuck partitions. No I/O: it is loaded from the offset syncs, folds each batch's per-partition
summaries, and returns the offset-sync records to write; the driver reads, writes, logs and counts.

Invariants (tests/test_flow_state.py):
  F1. a partition's position never moves back in one instance: a summary moves it to the larger of the two.
  F2. bounded: positions, anchors (at most `anchor_limit` each), losses and stuck partitions hold at most one entry
      per source partition the flow mirrors; incarnations and held topics one per source topic. Dropping a topic
      (deleted, re-created) removes every entry of it and returns the tombstones of its records.
  F3. a stuck or paused partition's position does not move with its batch; one stuck or aborted before it had a
      position gets one at its batch's start, so that a later start from any checkpoint resumes there.
  F4. a loss is recorded once: a replayed batch that finds the same gap returns no record.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from mirrorflow.rules import offset_syncs
from mirrorflow.rules.anchors import Anchor, PartitionAnchors
from mirrorflow.rules.offset_syncs import AnchorRecord, Incarnation, Loss, OffsetRun, Position, TopicPartition
from mirrorflow.rules.partition_report import PartitionReport

STUCK_PAUSE_S, STUCK_PAUSE_MAX_S = 30.0, 300.0  # a stuck partition's pause: doubles from the first to the last


@dataclass(frozen=True)
class Tombstone:
    """The tombstone of an offset-sync record: a deleted topic's position or loss, an old run turned into anchors."""

    record: Position | OffsetRun | Loss

    def key(self) -> bytes:
        return self.record.key()

    def value(self) -> None:
        return None


# What the driver writes to the offset syncs.
SyncRecord = (AnchorRecord | Position | Loss | Incarnation | offset_syncs.Release | offset_syncs.Writers
              | Tombstone)


class SyncsView(Protocol):
    """What the state is loaded from: the offset syncs as read (kafka/offset_sync_log.SyncsState)."""

    positions: dict[TopicPartition, Position]
    anchors: dict[TopicPartition, dict[int, Anchor]]
    runs: dict[TopicPartition, dict[int, OffsetRun]]
    losses: dict[TopicPartition, Loss]
    incarnations: dict[str, str]

    def partitions(self) -> set[TopicPartition]: ...


@dataclass(frozen=True)
class PartitionSummary:
    """What a task reports of one source partition it copied, as far as the flow's state goes (its report,
    partition_report, has the metrics and digests too)."""

    tp: TopicPartition
    first_offset: int | None  # the first record read, None if none
    upstream_next: int | None  # every record below it is on the target (or refused, skipped); None: not known
    downstream_next: int | None  # where the next copy lands, None if the task did not learn it
    first: Anchor | None  # the batch's first and last mirrored records, None if none was written
    last: Anchor | None
    replay: bool  # the batch may have repeated records already written
    stuck: str | None  # why the target did not take the partition's records in time
    aborted: bool  # rolled back with the transaction of another, stuck, partition
    filtered: int  # records read past the range and passed over (paused partitions, held topics)
    gaps: tuple[tuple[int, int], ...] = ()  # [begin, end) the source deleted while the task read
    records: int = 0  # records written from `first` to `last`

    @classmethod
    def of(cls, report: PartitionReport) -> PartitionSummary:
        """From a task's report (partition_report); a report that does not count (T1) keeps no position."""
        return cls(report.tp, report.first_offset, report.upstream_next, report.downstream_next, report.first,
                   report.last, report.replay, report.stuck, report.aborted, report.filtered, report.gaps,
                   report.records)


@dataclass
class Stuck:
    """A partition the target did not take in time, or (`aborted`) one whose records were aborted with such a
    partition's transaction: paused until `retry_at` (monotonic), then tried again."""

    why: str
    since: float  # wall-clock seconds
    retry_at: float
    pause: float
    paused: bool = True
    aborted: bool = False  # not stuck itself: its records were aborted with a stuck partition's transaction


@dataclass
class Settled:
    """A batch's summaries sorted by what the target did with them (`FlowState.settle`)."""

    moving: list[PartitionSummary]  # neither stuck, aborted nor paused: their positions move
    first_positions: list[Position]  # F3
    held_back: list[tuple[TopicPartition, str, int]]  # paused while stuck: why, records passed over
    resumed: list[TopicPartition]  # stuck before, taken again now
    newly_stuck: list[tuple[TopicPartition, str, float]]  # why, the pause before it is tried again
    aborted: int = 0


@dataclass
class FlowState:
    anchor_limit: int
    anchor_spacing: int
    upstream_next: dict[TopicPartition, int] = field(default_factory=dict)
    downstream_next: dict[TopicPartition, int] = field(default_factory=dict)
    losses: dict[TopicPartition, Loss] = field(default_factory=dict)  # one Loss per partition that lost records
    incarnations: dict[str, str] = field(default_factory=dict)  # source topic -> the topic ID the state is about
    anchors: dict[TopicPartition, PartitionAnchors] = field(default_factory=dict)
    held: dict[str, str] = field(default_factory=dict)  # source topic -> why its remote topic cannot be written
    # Changed by the batch's thread, read by the watch loop's: iterated over copies.
    stuck: dict[TopicPartition, Stuck] = field(default_factory=dict)

    def load(self, syncs: SyncsView) -> tuple[list[SyncRecord], int]:
        """Take the positions, losses, incarnations and anchors the offset syncs hold (at start, and after the lease
        was held again: another holder may have moved them); held topics and stuck partitions stay. The records
        that bring the syncs up to date (old runs turned into anchors, and their tombstones; anchors a smaller
        limit moved), and how many runs were turned."""
        self.upstream_next = {tp: p.upstream_next for tp, p in syncs.positions.items()}
        self.downstream_next = {tp: p.downstream_next for tp, p in syncs.positions.items()
                                if p.downstream_next is not None}
        self.losses = dict(syncs.losses)
        self.incarnations = dict(syncs.incarnations)
        records: list[SyncRecord] = []
        migrated = 0
        for tp in syncs.partitions():
            slots = syncs.anchors.get(tp, {})
            store = PartitionAnchors(self.anchor_limit, self.anchor_spacing, slots.items())
            if not slots and syncs.runs.get(tp):
                for anchor in offset_syncs.anchors_of_runs(syncs.runs[tp].values()):
                    store.append(anchor)
                migrated += len(syncs.runs[tp])
            records.extend(Tombstone(run) for run in syncs.runs.get(tp, {}).values())
            position = syncs.positions.get(tp)
            if position is not None:
                adopt_batch_first(store, position)  # the driver stopped before it recorded that batch
            self.anchors[tp] = store
        return records + self.anchor_writes(), migrated

    def position(self, tp: TopicPartition) -> int | None:
        """Where the partition resumes; None if the flow has no position for it."""
        return self.upstream_next.get(tp)

    def known_topics(self) -> set[str]:
        return {t for t, _ in set(self.anchors) | set(self.upstream_next)} | set(self.incarnations)

    def anchor_writes(self) -> list[SyncRecord]:
        return [AnchorRecord(tp[0], tp[1], slot, anchor) for tp, store in self.anchors.items() if store.pending
                for slot, anchor in store.drain()]

    def adopt_positions(self, positions: Mapping[TopicPartition, Position]) -> list[SyncRecord]:
        """Positions ahead of the state's (written by tasks of a batch whose summaries never came back): adopted with
        where their next record lands, and their batch's first record as an anchor."""
        for tp, position in positions.items():
            known = self.position(tp)
            if known is not None and position.upstream_next <= known:
                continue
            self.upstream_next[tp] = position.upstream_next
            if position.downstream_next is not None:
                self.downstream_next[tp] = position.downstream_next
            adopt_batch_first(self._store(tp), position)
        return self.anchor_writes()

    def drop_topics(self, gone: Iterable[str]) -> list[SyncRecord]:
        """Forget source topics (F2): their anchors, positions, losses, incarnations and stuck partitions; the
        tombstones of their records."""
        gone = set(gone)
        records: list[SyncRecord] = []
        for tp in sorted(tp for tp in set(self.anchors) | set(self.upstream_next) | set(self.losses) if tp[0] in gone):
            store = self.anchors.pop(tp, None)
            records.extend(AnchorRecord(tp[0], tp[1], slot, None) for slot in (store.slots if store else ()))
            records.append(Tombstone(Position(tp[0], tp[1], 0, None)))
            if self.losses.pop(tp, None) is not None:
                records.append(Tombstone(Loss(tp[0], tp[1])))
            self.upstream_next.pop(tp, None)
            self.downstream_next.pop(tp, None)
        for tp in [tp for tp in self.stuck if tp[0] in gone]:
            del self.stuck[tp]
        for topic in sorted(gone):
            if self.incarnations.pop(topic, None) is not None:
                records.append(Incarnation(topic, None))
        return records

    def recreated(self, ids: Mapping[str, str]) -> set[str]:
        """Topics the state knows under another topic ID than `ids` gives them: re-created since."""
        return {t for t, i in ids.items() if t in self.incarnations and self.incarnations[t] != i}

    def record_incarnations(self, ids: Mapping[str, str]) -> list[SyncRecord]:
        """The topic IDs the state is about from now on (drop re-created topics first)."""
        records: list[SyncRecord] = []
        for topic, topic_id in ids.items():
            if self.incarnations.get(topic) != topic_id:
                self.incarnations[topic] = topic_id
                records.append(Incarnation(topic, topic_id))
        return records

    def prune_below(self, log_starts: Mapping[TopicPartition, int]) -> int:
        """Drop the anchors below the source's log starts; how many went."""
        return sum(self.anchors[tp].prune_below(start) for tp, start in log_starts.items() if tp in self.anchors)

    def add_loss(self, tp: TopicPartition, position: int, end: int) -> Loss | None:
        """Records [position, end) of a partition lost; its updated loss record, None if already recorded (F4)."""
        known = self.losses.get(tp, Loss(tp[0], tp[1]))
        loss = known.add(position, end)
        if loss == known:
            return None
        self.losses[tp] = loss
        return loss

    def hold(self, topic: str, why: str) -> None:
        """Nothing more of `topic` is written until a reset; its stuck partitions are no longer tried again."""
        self.held[topic] = why
        for tp in [tp for tp in self.stuck if tp[0] == topic]:
            del self.stuck[tp]

    # -- stuck partitions ---------------------------------------------------------------------------------------

    def paused(self, begins: Mapping[TopicPartition, int]) -> frozenset[TopicPartition]:
        """The stuck partitions a batch starting at `begins` must not write: paused ones, and any whose batch does
        not start at its position (only a query from a new checkpoint writes a stuck partition)."""
        return frozenset(tp for tp, s in list(self.stuck.items())
                         if s.paused or begins.get(tp) != self.position(tp))

    def stuck_due(self, now: float) -> list[TopicPartition]:
        """Paused partitions whose pause is over at `now` (monotonic): unpaused, to be tried from a new query."""
        due = [tp for tp, s in list(self.stuck.items()) if s.paused and s.retry_at <= now]
        for tp in due:
            self.stuck[tp].paused = False
        return due

    def retry_stuck_now(self) -> None:
        """The target is back (a lease regained): every paused partition is due."""
        for stuck in list(self.stuck.values()):
            stuck.retry_at = 0.0

    def settle(self, summaries: Iterable[PartitionSummary], paused: frozenset[TopicPartition], now: float,
               wall: float) -> Settled:
        """Pause the partitions the target did not take in time and, transactional, those aborted with them (tried
        again at once), release those it took again (F3). `now` monotonic, `wall` the clock's seconds."""
        out = Settled([], [], [], [], [])
        for s in summaries:
            tp = s.tp
            if tp in paused:
                if not self.stuck[tp].aborted:
                    out.held_back.append((tp, self.stuck[tp].why, s.filtered))
                continue
            if s.stuck is None and not s.aborted:
                known = self.stuck.pop(tp, None)
                if known is not None and not known.aborted:
                    out.resumed.append(tp)
                out.moving.append(s)
                continue
            if self.position(tp) is None and s.first_offset is not None:
                self.upstream_next[tp] = s.first_offset
                out.first_positions.append(Position(tp[0], tp[1], s.first_offset, self.downstream_next.get(tp)))
            known = self.stuck.get(tp)
            if s.aborted:  # written again at once (the query restarts at the positions), not a stuck partition
                out.aborted += 1
                if known is None:
                    self.stuck[tp] = Stuck("aborted with a stuck partition's transaction", wall, now, 0.0,
                                           aborted=True)
                else:  # a stuck partition tried again: it did not fail itself, so it is written again at once
                    known.paused, known.retry_at = True, now
                continue
            assert s.stuck is not None
            if known is not None and known.aborted:
                known = None  # it was only aborted with another: stuck itself from now
            pause = STUCK_PAUSE_S if known is None else min(known.pause * 2, STUCK_PAUSE_MAX_S)
            self.stuck[tp] = Stuck(s.stuck, known.since if known else wall, now + pause, pause)
            out.newly_stuck.append((tp, s.stuck, pause))
        return out

    # -- folding a batch ----------------------------------------------------------------------------------------

    def fold(self, moving: Iterable[PartitionSummary]) -> None:
        """Move the positions (F1) and anchors of the partitions the target took."""
        for s in moving:
            tp = s.tp
            known = self.position(tp)
            if s.upstream_next is not None:
                self.upstream_next[tp] = s.upstream_next if known is None else max(known, s.upstream_next)
            if s.first is not None and s.last is not None:
                store = self._store(tp)
                fresh = not store.anchors and tp not in self.downstream_next  # nothing written there yet
                store.record_batch(s.first, s.last, replay=s.replay, fresh=fresh, records=s.records)
            if s.downstream_next is not None:
                self.downstream_next[tp] = s.downstream_next

    def move_quiet(self, ends: Mapping[TopicPartition, int], topics: Iterable[str],
                   paused: frozenset[TopicPartition]) -> tuple[list[Position], list[TopicPartition]]:
        """Partitions of `topics` whose batch held no visible record past their positions (markers, aborted
        records) move to the batch's end too: their position records, and the stuck ones released by it (tried
        again with nothing to write)."""
        topics = set(topics)
        records: list[Position] = []
        released: list[TopicPartition] = []
        for tp, end in ends.items():
            known = self.position(tp)
            if (tp[0] not in topics or (known is not None and end <= known) or tp in paused
                    or (tp in self.stuck and self.stuck[tp].paused)):
                continue
            records.append(Position(tp[0], tp[1], end, self.downstream_next.get(tp)))
            self.upstream_next[tp] = end
            if self.stuck.pop(tp, None) is not None:
                released.append(tp)
        return records, released

    def _store(self, tp: TopicPartition) -> PartitionAnchors:
        store = self.anchors.get(tp)
        if store is None:
            store = self.anchors[tp] = PartitionAnchors(self.anchor_limit, self.anchor_spacing)
        return store


def adopt_batch_first(store: PartitionAnchors, position: Position) -> None:
    """A position's batch-first record as an anchor, when it is newer than the partition's newest one."""
    first = position.batch_first
    if first is not None and (store.last is None or first.downstream > store.last.downstream):
        store.append(first)
