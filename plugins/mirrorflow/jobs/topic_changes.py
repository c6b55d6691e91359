"""What happens to a flow's topics outside the flow, as its stream's driver finds out batch by batch: remote
topics to create or grow, remote topics deleted or re-created on the target (the topic is held), source topics
deleted or re-created (their state is dropped), and source records deleted before the flow read them (a loss,
recorded, or the flow stops). The state it changes is the driver's FlowState; it returns the offset-sync records
to write, except for incarnations, which it writes itself before any record of the batch."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import OffsetSpec

from mirrorflow.errors import MirrorError, OperationalError, TopicsRecreated
from mirrorflow.jobs.driver_writes import DriverWrites
from mirrorflow.kafka import admin_sync
from mirrorflow.kafka.link import FlowLink
from mirrorflow.model import selection
from mirrorflow.model.config import Flow
from mirrorflow.rules import batch_plan
from mirrorflow.rules.flow_state import FlowState, PartitionSummary, SyncRecord
from mirrorflow.rules.offset_syncs import Loss
from mirrorflow.status import metrics

log = logging.getLogger(__name__)

# create_ahead makes fresh remote topics this many partitions at a time, in (topic) order: a backlog over more
# partitions than a batch moves is copied a turn at a time in that order (rules/batch_plan P6), so the first batch
# waits for its own topics only (24,000 new partitions took the target here about 90 s).
AHEAD_PARTITIONS = batch_plan.PARTITIONS_MAX


class TopicChanges:
    """Bounded: `ready` and `missing_topics` hold at most one entry per source topic the flow replicates."""

    def __init__(self, link: FlowLink, state: FlowState, flow_metrics: metrics.FlowMetrics, writes: DriverWrites,
                 forget: Callable[[set[str]], Any], wait: Callable[[float], Any]) -> None:
        self.link, self.flow, self.state, self.metrics, self.writes = link, link.flow, state, flow_metrics, writes
        self.forget = forget  # the driver's own state of dropped topics (digests)
        self.wait = wait  # sleeps, cut short by a stop
        self.ready: dict[str, int] = {}  # remote topics created or grown by this run: their partitions
        self.recreated: set[str] = set()  # re-created topics not yet restarted from their earliest offset
        self.missing_topics: set[str] = set()  # missing at the last prune: gone if missing again at the next
        self.prune_due = self.incarnations_due = self.held_due = 0.0
        self.made = threading.Condition()  # guards `pending`, and `ready` while create_ahead's thread writes it
        self.pending: set[str] = set()  # source topics create_ahead's thread has yet to make remote topics of

    def forget_deleted(self, read: set[str]) -> set[str]:
        """The topics the flow knows or a query read (`read`) that are gone from the source, looked at twice 2 s apart
        (a topic being re-created is not deleted), their state dropped; none if the source cannot be reached (the
        caller's restart waits and tries again)."""
        known = {t for t, _ in self.state.upstream_next} | read
        looks = []
        for attempt in range(2):
            try:
                counts, _ = admin_sync.partition_counts(self.link.source_admin, self.link.source.alias)
            except (OperationalError, KafkaException) as exc:
                log.warning("flow %s: cannot tell whether source topics were deleted (%s)", self.flow.name, exc)
                return set()
            looks.append({t for t in known if t not in counts})
            if attempt == 0 and looks[0]:
                self.wait(2.0)
        gone = looks[0] & looks[-1]
        if gone:
            self.writes.write(self.drop(gone))
        return gone

    def look_again(self) -> None:
        """At the next batch, look at every topic on both sides (a failed query may be a topic gone)."""
        self.held_due = self.incarnations_due = 0.0

    def prepare_batch(self, ends: Mapping[tuple[str, int], int], starts: Mapping[tuple[str, int], int]
                      ) -> tuple[set[str], dict[str, int]]:
        """Before a batch writes: the flow's topics among its partitions (held ones included: their partitions are
        still the flow's), and those it writes with their partition counts, their remote topics created or grown
        and checked. A topic create_ahead has not made yet is left out of the batch when none of its partitions
        moves (`ends` against `starts`); otherwise the batch waits for it. Raises TopicsRecreated when a source
        topic was re-created."""
        counts: dict[str, int] = {}
        for topic, partition in ends:
            counts[topic] = max(counts.get(topic, 0), partition + 1)
        flow_topics = {t for t in counts if selection.replicates(self.flow, t)}
        moving = {tp[0] for tp, end in ends.items() if end != starts.get(tp, end)}
        replicated = self.create_remotes(counts, moving)
        self._check_recreated(ends, replicated)
        return flow_topics, replicated

    def create_remotes(self, counts: Mapping[str, int], moving: AbstractSet[str] | None = None) -> dict[str, int]:
        """The topics of `counts` (source topic -> partitions) the flow replicates and does not hold, their remote
        topics created or grown (once a run for each size). Holds come first: a remote topic deleted on the target
        is never created again behind the operator's back. Of the topics create_ahead's thread is still making,
        those in `moving` are waited for and the others left out (None: every one is waited for)."""
        unmade = self._after_ahead(set(counts) if moving is None else moving)
        replicated = {t: n for t, n in counts.items() if selection.replicates(self.flow, t) and t not in unmade}
        grown = {t: n for t, n in replicated.items() if self.ready.get(t, 0) < n}
        self._hold_gone_remotes(replicated, grown)
        replicated = {t: n for t, n in replicated.items() if t not in self.state.held}
        grown = {t: n for t, n in grown.items() if t not in self.state.held}
        if grown:
            admin_sync.ensure_remote_topics(self.flow, self.link.source_admin, self.link.target_admin, grown)
            with self.made:
                self.ready.update(grown)
        return replicated

    def create_ahead(self) -> None:
        """Before the first batch: the remote topics created or grown, so that the target makes their partitions
        while Spark starts (1,200 new ones took 22 s of a first batch; 24,000 take the target here about 90 s).
        Topics the flow has written to are looked at here (a hold writes offset syncs); the ones it never wrote to
        are created in a thread of its own, AHEAD_PARTITIONS at a time in topic order, which writes nothing but
        `ready` and `pending`, and which a batch waits for only as far as the topics it moves. What fails, the
        batches try again and report."""
        def not_ahead(exc: Exception) -> None:
            log.warning("flow %s: remote topics not created before the batches that need them (%s); they create "
                        "them", self.flow.name, exc)

        try:
            counts = admin_sync.partition_counts(self.link.source_admin, self.link.source.alias)[0]
            written = {t for (t, _), d in self.state.downstream_next.items() if d >= 0}
            fresh = {t: n for t, n in counts.items()
                     if t not in written and t not in self.state.held and selection.replicates(self.flow, t)}
            self.create_remotes({t: n for t, n in counts.items() if t not in fresh})
        except (OperationalError, KafkaException) as exc:
            not_ahead(exc)
            return

        def create() -> None:
            try:
                for part in _parts(fresh, AHEAD_PARTITIONS):
                    admin_sync.ensure_remote_topics(self.flow, self.link.source_admin, self.link.target_admin, part)
                    with self.made:
                        self.ready.update(part)
                        self.pending -= part.keys()
                        self.made.notify_all()
            except (OperationalError, KafkaException) as exc:
                not_ahead(exc)
            finally:
                with self.made:
                    self.pending.clear()
                    self.made.notify_all()

        if fresh:
            self.pending = set(fresh)
            try:
                threading.Thread(target=create, name=f"mirrorflow-create-ahead-{self.flow.name}", daemon=True).start()
            except RuntimeError as exc:  # no thread to be had: the batches create them
                self.pending = set()
                not_ahead(exc)

    def _after_ahead(self, wanted: AbstractSet[str]) -> set[str]:
        """Wait until create_ahead's thread has made the remote topics of `wanted` (or ended); the topics it has
        yet to make."""
        with self.made:
            self.made.wait_for(lambda: not (self.pending & wanted))
            return set(self.pending)

    def prune(self) -> list[SyncRecord]:
        """Every `mirrorflow.offset-syncs.prune.interval.seconds`: anchors below the source's log start go, and so
        does the state of deleted topics (after two looks in a row, so that one incomplete metadata answer
        deletes nothing)."""
        if time.monotonic() < self.prune_due:
            return []
        interval = self.flow.number("mirrorflow.offset-syncs.prune.interval.seconds")
        self.prune_due = time.monotonic() + interval
        try:
            counts, _ = admin_sync.partition_counts(self.link.source_admin, self.link.source.alias)
        except (OperationalError, KafkaException) as exc:
            # Housekeeping: a source out of reach (a cut link) stalls the flow, it must not fail its batch.
            log.warning("flow %s: offset-sync anchors and deleted topics not pruned (%s); tried again in %d s",
                        self.flow.name, exc, interval)
            return []
        missing = {t for t, _ in set(self.state.anchors) | set(self.state.upstream_next) if t not in counts}
        gone, self.missing_topics = missing & self.missing_topics, missing - self.missing_topics
        records = self.drop(gone)
        live = [tp for tp in self.state.anchors if tp[0] in counts and tp[1] < counts[tp[0]]]
        try:
            starts = admin_sync.offsets(self.link.source_admin, self.link.source.alias, live,
                                        OffsetSpec.earliest())  # type: ignore[no-untyped-call]
        except (OperationalError, KafkaException) as exc:
            log.warning("flow %s: offset-sync anchors not pruned (%s); tried again in %d s", self.flow.name, exc,
                        interval)
            return records
        pruned = self.state.prune_below(starts)
        if pruned:
            log.info("flow %s: %d offset-sync anchors below the source's log start removed", self.flow.name, pruned)
        return records

    def drop(self, gone: set[str], why: str = "deleted") -> list[SyncRecord]:
        """Forget deleted (or re-created) source topics: their anchors, positions, losses and incarnations
        (tombstones), metrics and remote-topic state."""
        records = self.state.drop_topics(gone)
        for topic in gone:
            self.ready.pop(topic, None)
        if gone:
            self.metrics.forget(gone)
            self.forget(gone)
            log.warning("flow %s: source topic(s) %s %s: their offset syncs removed%s", self.flow.name,
                        ", ".join(sorted(gone)), why, "; mirrored again from the new topic's earliest offset"
                        if why == "re-created" else "")
        return records

    def incarnations(self, topics: set[str]) -> set[str]:
        """Record the topic ID of topics seen for the first time; forget the state of topics re-created since
        (another ID under the same name) and return them: they start again from their earliest offset."""
        if not topics:
            return set()
        ids = admin_sync.topic_ids(self.link.source_admin, self.link.source.alias, sorted(topics))
        recreated = self.state.recreated(ids)
        records = self.drop(recreated, why="re-created") if recreated else []
        self.writes.write(records + self.state.record_incarnations(ids))
        self.recreated |= recreated
        return recreated

    def _hold_gone_remotes(self, replicated: Mapping[str, int], grown: Mapping[str, int]) -> None:
        """Hold the topics whose remote topic was deleted, or re-created (its end fell below where the flow's next
        record would land), on the target after the flow wrote to it: nothing of them is written and their
        positions stay, so no remote topic is created again behind the operator's back and no offset sync points
        into a topic that no longer holds the copies. `mirrorflow reset` releases a topic (at the next start).
        Looked at for topics new to this run and every prune interval."""
        due = time.monotonic() >= self.held_due
        if due:
            self.held_due = time.monotonic() + self.flow.number("mirrorflow.offset-syncs.prune.interval.seconds")
        written = {tp: d for tp, d in self.state.downstream_next.items() if d >= 0}
        written_topics = {t for t, _ in written}
        looked = {t for t in replicated if t not in self.state.held and (due or t in grown) and t in written_topics}
        if not looked:
            return
        remote = {t: self.flow.policy.remote_topic(self.flow.source, t) for t in looked}
        counts, _ = admin_sync.partition_counts(self.link.target_admin, self.link.target.alias)
        if any(remote[t] not in counts for t in looked):  # a second look: one broker's stale metadata holds nothing
            self.wait(2.0)
            counts, _ = admin_sync.partition_counts(self.link.target_admin, self.link.target.alias)
        gone = {t: f"remote topic {remote[t]} deleted on {self.flow.target}" for t in looked if remote[t] not in counts}
        for (t, p) in sorted(written):
            if t in looked and t not in gone and p >= counts[remote[t]]:
                gone[t] = f"remote topic {remote[t]} re-created on {self.flow.target} with fewer partitions ({p} gone)"
        present = [(remote[tp[0]], tp[1]) for tp in written if tp[0] in looked and tp[0] not in gone]
        ends = admin_sync.offsets(self.link.target_admin, self.link.target.alias, present,
                                  OffsetSpec.latest(), available_within=5.0)  # type: ignore[no-untyped-call]
        for (t, p), d in sorted(written.items()):  # a partition without a leader now is judged at the next look
            end = ends.get((remote.get(t, ""), p))
            if t in looked and t not in gone and end is not None and end < d:
                gone[t] = (f"remote topic {remote[t]} re-created or truncated on {self.flow.target} (partition {p} "
                           f"ends at {end}, the flow's next copy would land at {d})")
        for t, why in sorted(gone.items()):
            self.state.hold(t, why)
            self.metrics.hold(t, why, 0)
            log.warning("flow %s: %s: %s is HELD, nothing of it written, its positions kept; to mirror it into a "
                        "new %s: mirrorflow reset --flow %s --topic %s --to earliest (or the offset to start at), "
                        "then start the flow", self.flow.name, why, t, remote[t], self.flow.name, t)

    def _check_recreated(self, ends: Mapping[tuple[str, int], int], replicated: Mapping[str, int]) -> None:
        """Before anything is written: topics re-created on the source (Kafka's topic ID changed) lose their old
        state, and the query restarts from a new checkpoint, reading them from their earliest offset. Looked at for
        new topics, for partitions whose offsets went backwards, and for every topic each prune interval."""
        if time.monotonic() >= self.incarnations_due:
            interval = self.flow.number("mirrorflow.offset-syncs.prune.interval.seconds")
            self.incarnations_due = time.monotonic() + interval
            looked = set(replicated)
        else:
            looked = {t for t in replicated if t not in self.state.incarnations}
            looked |= {tp[0] for tp, end in ends.items()
                       if tp[0] in replicated and end < (self.state.position(tp) or 0)}
        recreated = self.incarnations(looked)
        if recreated:
            raise TopicsRecreated(f"source topic(s) {', '.join(sorted(recreated))} re-created")

    def refuse_loss(self, ends: Mapping[tuple[str, int], int], replicated: Mapping[str, int],
                     begins: Mapping[tuple[str, int], int]) -> None:
        """Before anything is written: stop the flow if a topic of `mirrorflow.data-loss.fail.topics` lost records
        below where the batch resumes (only those topics' log starts are read, once per batch)."""
        watched = [tp for tp, end in ends.items() if tp[0] in replicated and self.flow.data_loss_fails.selects(tp[0])
                   and begins.get(tp, -1) >= 0 and end > begins[tp]]
        if not watched:
            return
        starts = admin_sync.offsets(self.link.source_admin, self.link.source.alias, watched,
                                    OffsetSpec.earliest())  # type: ignore[no-untyped-call]
        for tp in sorted(watched):
            if starts[tp] > begins[tp]:
                self._fail_on_loss(tp, begins[tp], min(starts[tp], ends[tp]))

    def _fail_on_loss(self, tp: tuple[str, int], position: int, end: int) -> None:
        line = _loss_line(self.flow, tp, position, end)
        self.metrics.set_state("failed", line)
        raise MirrorError(f"{line}; the flow stops, as mirrorflow.data-loss.fail.topics asks for "
                               f"{tp[0]} (to go on, take the topic out of it and start the flow: the loss is "
                               "recorded)")

    def losses(self, ends: Mapping[tuple[str, int], int], summaries: list[PartitionSummary],
                replicated: Mapping[str, int], begins: Mapping[tuple[str, int], int]) -> list[Loss]:
        """The partitions whose batch skipped records the source deleted before the flow read them (Spark's source,
        told not to fail, moves on to the log start): their updated loss records. Called before the positions
        move; raises (fatal) when a loss hits a topic of `mirrorflow.data-loss.fail.topics`."""
        first_read = {s.tp: s.first_offset for s in summaries if s.first_offset is not None}
        gaps = {}
        for tp, end in ends.items():
            position = begins.get(tp)
            if tp[0] in replicated and position is not None and position >= 0:
                resumed = first_read.get(tp, end)  # no record read: the batch ends where the partition resumes
                if resumed > position:  # a gap: transaction markers, compaction or deleted records
                    gaps[tp] = (position, resumed)
        starts = admin_sync.offsets(self.link.source_admin, self.link.source.alias, list(gaps),
                                    OffsetSpec.earliest()) if gaps else {}  # type: ignore[no-untyped-call]
        lost = [(tp, position, min(resumed, starts[tp])) for tp, (position, resumed) in sorted(gaps.items())]
        # Records deleted while a task read its range (the copier saw the log start pass it): exact ranges.
        lost += [(s.tp, b, e) for s in summaries if s.tp[0] in replicated for b, e in s.gaps]
        out: list[Loss] = []
        for tp, position, end in lost:
            if end <= position:
                continue
            if self.flow.data_loss_fails.selects(tp[0]):  # deleted after refuse_loss looked
                self._fail_on_loss(tp, position, end)
            loss = self.state.add_loss(tp, position, end)
            if loss is None:
                continue  # a replayed batch: already recorded
            log.warning("%s; mirroring goes on from %d (loss recorded in the offset syncs, status and metrics)",
                        _loss_line(self.flow, tp, position, end), end)
            self.metrics.observe_loss(tp, end - position)
            out = [o for o in out if (o.topic, o.partition) != tp] + [loss]
        return out


def _loss_line(flow: Flow, tp: tuple[str, int], position: int, end: int) -> str:
    return (f"flow {flow.name}: DATA LOSS on {flow.source} {tp[0]}-{tp[1]}: offsets {position}..{end - 1} "
            f"({end - position} records) were deleted on the source before the flow read them")


def _parts(counts: Mapping[str, int], partitions: int) -> Iterator[dict[str, int]]:
    """`counts` (topic -> partitions) cut in topic order into parts of about `partitions` partitions, at least one
    topic each."""
    part: dict[str, int] = {}
    for topic in sorted(counts):
        part[topic] = counts[topic]
        if sum(part.values()) >= partitions:
            yield part
            part = {}
    if part:
        yield part
