"""Consumer-group checkpoints: translated group offsets in MM2's `{source}.checkpoints.internal` topic.

One round for a flow A->B:
  1. list A's consumer groups that pass `groups`/`groups.exclude`, and their committed offsets;
  2. read the flow's offset syncs on B, after the offsets, so that they cover as much as possible. For
     topics that came from B (failback), read the reverse flow's syncs, which are on A. A long-lived
     `CheckpointRounds` reads only what is new since its last round;
  3. translate every partition (see translation.py), each distinct offset once, all offsets of a partition
     in one pass over its anchors. "Start" and offsets lost to retention on B resolve to B's log start;
  4. hold a checkpoint that would move backwards while the group itself did not move back;
  5. write every checkpoint that changed to `A.checkpoints.internal` on B, so MM2's own `RemoteClusterUtils`
     reads them;
  6. with `sync.group.offsets.enabled`, commit the offsets to B's group of the same name if that group is
     empty or absent there, and never backwards.

Wire format (checked against MM2's Checkpoint class; Kafka protocol types, strings are int16 length + UTF-8):
  key    {group: string, topic: string (on the target), partition: int32}
  value  {version: int16 = 0, upstream offset: int64, downstream offset: int64, metadata: string}
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from mirrorflow.errors import OperationalError
from mirrorflow.kafka import admin_sync, clients, flow_lease, offset_sync_log
from mirrorflow.kafka.internal_log import InternalLog
from mirrorflow.kafka.link import FlowLink
from mirrorflow.kafka.target_reader import Search, TargetRecords
from mirrorflow.model import selection
from mirrorflow.model.config import Flow, MirrorConfig
from mirrorflow.rules import offset_syncs, wire
from mirrorflow.rules.translation import (
    PartitionSyncs,
    TargetReader,
    Translation,
    mm2_comparison,
    source_offsets_steps,
    target_offsets_steps,
)
from mirrorflow.status import metrics

log = logging.getLogger(__name__)
_VERSION = 0
_IDLE_STATES = (ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD)
TopicPartitionKey = tuple[str, int]


@dataclass(frozen=True)
class Checkpoint:
    group: str
    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int
    metadata: str = ""

    def key(self) -> bytes:
        return wire.string(self.group) + wire.string(self.topic) + struct.pack(">i", self.partition)

    def value(self) -> bytes:
        return (struct.pack(">hqq", _VERSION, self.upstream_offset, self.downstream_offset)
                + wire.string(self.metadata))

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> Checkpoint:
        group, at = wire.read_string(key, 0)
        topic, at = wire.read_string(key, at)
        (partition,) = struct.unpack_from(">i", key, at)
        _, upstream, downstream = struct.unpack_from(">hqq", value, 0)
        metadata, _ = wire.read_string(value, 18)
        return cls(group, topic, partition, upstream, downstream, metadata)


@dataclass(frozen=True)
class PartitionTranslation:
    """One partition of a group: its source offset and where it resumes on the target."""

    group: str
    source_topic: str
    target_topic: str
    partition: int
    source_offset: int
    target_offset: int
    exact: bool
    note: str = ""
    metadata: str = ""
    mm2_offset: int | None = None  # MM2's rule on the same writes, for comparison (forward only)

    @property
    def checkpoint(self) -> Checkpoint:
        return Checkpoint(self.group, self.target_topic, self.partition, self.source_offset, self.target_offset,
                          self.metadata)


@dataclass
class GroupCheckpoints:
    group: str
    partitions: list[PartitionTranslation]
    group_sync: str = ""
    latency_ms: dict[TopicPartitionKey, float] = field(default_factory=dict)

    def line(self, flow: Flow) -> str:
        exact = sum(p.exact for p in self.partitions)
        text = (f"flow {flow.name} group {self.group}: {len(self.partitions)} partition(s) checkpointed, "
                f"{exact} exact")
        inexact = [f"{p.source_topic}-{p.partition} ({p.note})" for p in self.partitions if not p.exact]
        if inexact:
            text += "; inexact: " + ", ".join(inexact)
        return text + (f"; {self.group_sync}" if self.group_sync else "")


class GroupOffsets:
    """Translates a flow's consumer groups. Holds the flow's offset syncs (and the reverse flow's, for failback)
    and one reader of the mirrored records on each side; a long-lived instance refreshes the syncs
    incrementally at each `refresh()`."""

    def __init__(self, link: FlowLink) -> None:
        self.link, self.flow, self.policy = link, link.flow, link.flow.policy
        self.source, self.target = link.source, link.target
        self.source_admin: AdminClient = link.source_admin
        self.target_admin: AdminClient = link.target_admin
        self._syncs: dict[str, offset_sync_log.SyncsState] = {}
        self._readers: dict[str, TargetRecords] = {}
        self.unread: dict[str, str] = {}  # groups whose offsets the last read could not get, and why

    def close(self) -> None:
        for state in self._syncs.values():
            state.close()
        for reader in self._readers.values():
            reader.close()

    def refresh(self) -> None:
        for state in self._syncs.values():
            state.refresh()

    def groups(self) -> list[str]:
        listed = admin_sync.wait({"groups": self.source_admin.list_consumer_groups()},
                                 f"cannot list the consumer groups of {self.source.alias}:")["groups"]
        selected = self.flow.group_filter
        return sorted(g.group_id for g in listed.valid
                      if selected.selects(g.group_id) and not flow_lease.is_lease_group(g.group_id))

    def committed(self, group: str) -> dict[TopicPartitionKey, tuple[int, str]]:
        found = self.committed_many([group])
        if group not in found:
            raise OperationalError(f"cannot read the offsets of group {group} on {self.source.alias}: "
                                   f"{self.unread[group]}")
        return found[group]

    def committed_many(self, groups: Sequence[str], window: int = 256
                       ) -> dict[str, dict[TopicPartitionKey, tuple[int, str]]]:
        """Each group's committed offsets, `window` requests in flight at a time. A group whose offsets cannot be
        read (or only partly) is left out of the answer and named in `self.unread` with the reason."""
        out: dict[str, dict[TopicPartitionKey, tuple[int, str]]] = {}
        self.unread = {}
        for at in range(0, len(groups), window):
            futures = {g: self.source_admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(g)],
                                                                        require_stable=True)[g]
                       for g in groups[at:at + window]}
            for group, future in futures.items():
                try:
                    result = future.result(timeout=admin_sync.TIMEOUT_S)
                except (KafkaException, TimeoutError) as exc:
                    self.unread[group] = exc.args[0].str() if isinstance(exc, KafkaException) else "no answer"
                    continue
                failed = [f"{tp.topic}-{tp.partition} ({tp.error.str()})" for tp in result.topic_partitions
                          if tp.error is not None]
                if failed:
                    self.unread[group] = "cannot read " + ", ".join(failed[:5])
                    continue
                out[group] = {(tp.topic, tp.partition): (tp.offset, tp.metadata or "")
                              for tp in result.topic_partitions if tp.offset >= 0}
        for group, reason in sorted(self.unread.items()):
            log.error("flow %s group %s: offsets on %s not read, not checkpointed this round: %s", self.flow.name,
                      group, self.source.alias, reason)
        return out

    def translate(self, group: str, committed: Mapping[TopicPartitionKey, tuple[int, str]]
                  ) -> list[PartitionTranslation]:
        """Every partition of the group that the flow mirrored, or that came from the target (failback)."""
        return self.translate_many({group: committed}).get(group, [])

    def translate_many(self, committed: Mapping[str, Mapping[TopicPartitionKey, tuple[int, str]]]
                       ) -> dict[str, list[PartitionTranslation]]:
        """Like `translate`, for many groups: each partition's offsets are resolved together, once per offset."""
        planned: list[tuple[str, str, int, int, str, str, str]] = []  # group, topic, partition, offset, ...
        wanted: dict[tuple[str, str, int], set[int]] = {}  # (direction, key topic, partition) -> offsets
        mirrored: dict[str, set[str]] = {}
        for group, by_tp in committed.items():
            for (topic, partition), (offset, metadata) in sorted(by_tp.items()):
                forward = selection.replicates(self.flow, topic)
                came_back = not forward and self.policy.topic_source(topic) == self.flow.target
                if not (forward or came_back):
                    continue
                upstream = self.flow.source if forward else self.flow.target
                if upstream not in mirrored:
                    mirrored[upstream] = self._state(upstream).mirrored_topics()
                key = topic if forward else self.policy.upstream_topic(topic) or topic
                if key not in mirrored[upstream]:
                    continue  # no record of this topic was ever mirrored: MM2 writes no checkpoint either
                target_topic = self.policy.remote_topic(self.flow.source, topic) if forward else key
                planned.append((group, topic, partition, offset, metadata, target_topic, upstream))
                wanted.setdefault((upstream, key, partition), set()).add(offset)
        forward_parts = [(key, partition) for upstream, key, partition in wanted if upstream == self.flow.source]
        source_starts = admin_sync.offsets(self.source_admin, self.source.alias, forward_parts,
                                           OffsetSpec.earliest())  # type: ignore[no-untyped-call]
        searches: dict[str, dict[tuple[str, str, int], Search[dict[int, Translation]]]] = {}
        readable = self.flow.flag("mirrorflow.provenance.header.enabled")
        for (upstream, key, partition), offsets in wanted.items():
            part = self._partition_syncs(upstream, key, partition)
            if upstream == self.flow.source:
                steps = target_offsets_steps(part, {max(o, source_starts[(key, partition)]) for o in offsets},
                                             readable)
            else:
                steps = source_offsets_steps(part, offsets, readable)
            searches.setdefault(upstream, {})[(upstream, key, partition)] = Search(
                self.policy.remote_topic(upstream, key), key, partition, steps)
        answers: dict[tuple[str, str, int], dict[int, Translation]] = {}
        for upstream, by_partition in searches.items():
            answers.update(self._records(upstream).search(by_partition))
        for (upstream, key, partition), offsets in wanted.items():
            if upstream == self.flow.source:
                answers[(upstream, key, partition)] = _clamped(
                    answers[(upstream, key, partition)], offsets, source_starts[(key, partition)],
                    f"{key}-{partition}", self.source.alias)
        starts = self._log_starts([(p[5], p[2]) for p in planned])
        out: dict[str, list[PartitionTranslation]] = {}
        for group, topic, partition, offset, metadata, target_topic, upstream in planned:
            key = topic if upstream == self.flow.source else target_topic
            t = answers[(upstream, key, partition)][offset]
            start = starts.get((target_topic, partition))
            if start is None:
                log.warning("flow %s group %s: %s-%d has no partition %d on %s; skipped", self.flow.name, group,
                            topic, partition, partition, self.target.alias)
                continue
            wanted_offset = start if t.offset is None else t.offset
            resolved, note = max(wanted_offset, start), t.reason
            if wanted_offset < start:
                note = f"records before {start} are gone from {self.target.alias} (retention)"
            out.setdefault(group, []).append(PartitionTranslation(
                group, topic, target_topic, partition, offset, resolved, t.exact and resolved == wanted_offset, note,
                metadata))
        return out

    def mm2_offset(self, p: PartitionTranslation) -> int | None:
        """MM2's answer for a forward partition, for comparison (`mirrorflow translate`)."""
        if not selection.replicates(self.flow, p.source_topic):
            return None
        syncs = self._partition_syncs(self.flow.source, p.source_topic, p.partition)
        reader = self._reader(self.flow.source, p.target_topic, p.source_topic, p.partition)
        if reader is None:
            return None
        return mm2_comparison(syncs, p.source_offset, reader, self.flow.number("offset.lag.max"))

    def _state(self, upstream_alias: str) -> offset_sync_log.SyncsState:
        """The syncs of flow {upstream_alias}->x: the flow's own on the target, or the reverse's on the source."""
        if upstream_alias not in self._syncs:
            on = self.target if upstream_alias == self.flow.source else self.source
            topic = offset_syncs.topic_name(upstream_alias, self.policy.separator)
            self._syncs[upstream_alias] = offset_sync_log.SyncsState(clients.settings(on, "consumer"), topic).refresh()
        return self._syncs[upstream_alias]

    def _partition_syncs(self, upstream_alias: str, topic: str, partition: int) -> PartitionSyncs:
        state = self._state(upstream_alias)
        anchors = state.anchor_list((topic, partition))
        position = state.positions.get((topic, partition))
        if position is not None and position.batch_first is not None and (
                not anchors or position.batch_first.downstream > anchors[-1].downstream):
            anchors.append(position.batch_first)  # a batch whose anchor the driver has not written yet
        return PartitionSyncs(tuple(anchors), position)

    def _reader(self, upstream_alias: str, remote_topic: str, topic: str, partition: int) -> TargetReader | None:
        if not self.flow.flag("mirrorflow.provenance.header.enabled"):
            return None
        return self._records(upstream_alias).partition(remote_topic, topic, partition)

    def _records(self, upstream_alias: str) -> TargetRecords:
        """The reader of the mirrors flow {upstream_alias}->x wrote: on the target, or the reverse's on the source."""
        if upstream_alias not in self._readers:
            on = self.target if upstream_alias == self.flow.source else self.source
            self._readers[upstream_alias] = TargetRecords(clients.settings(on, "consumer"), upstream_alias)
        return self._readers[upstream_alias]

    def _log_starts(self, partitions: Sequence[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        """The target's log start of each partition it has (one missing there is left out)."""
        return admin_sync.offsets(self.target_admin, self.target.alias, sorted(set(partitions)),
                                  OffsetSpec.earliest(), missing_ok=True)  # type: ignore[no-untyped-call]

    def sync_to_target(self, group: str, partitions: Sequence[PartitionTranslation]) -> str:
        """Commit the translated offsets to the target's group, if it is idle there; never backwards."""
        described = admin_sync.wait(self.target_admin.describe_consumer_groups([group]),
                                    f"cannot describe group {group} on {self.target.alias}:")[group]
        if described.state not in _IDLE_STATES:
            return f"group is active on {self.target.alias} ({described.state.name.lower()}): offsets not synced"
        current = self.target_committed(group)
        moves = [TopicPartition(p.target_topic, p.partition, p.target_offset) for p in partitions
                 if current.get((p.target_topic, p.partition), -1) < p.target_offset]
        if moves:
            request = [ConsumerGroupTopicPartitions(group, moves)]
            admin_sync.wait(self.target_admin.alter_consumer_group_offsets(request),
                            f"cannot commit the offsets of group {group} on {self.target.alias}:")
        return f"{len(moves)} partition(s) committed to {self.target.alias}"

    def target_committed(self, group: str) -> dict[TopicPartitionKey, int]:
        result = admin_sync.wait(self.target_admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]),
                                 f"cannot read the offsets of group {group} on {self.target.alias}:")[group]
        return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions if tp.error is None}


def _clamped(answers: Mapping[int, Translation], offsets: Iterable[int], log_start: int, partition: str,
             alias: str) -> dict[int, Translation]:
    """A group below the source's log start resumes as it would on the source, at the log start: inexact."""
    out = {}
    for o in offsets:
        t = answers[max(o, log_start)]
        if o < log_start:
            t = Translation(t.offset, False, f"the group is at {o}, below {partition}'s log start {log_start} on "
                                             f"{alias}: resumed from there")
        out[o] = t
    return out


def translate_group(link: FlowLink, group: str, *, compare_mm2: bool = False) -> list[PartitionTranslation]:
    """Where `group` would resume on the flow's target, per partition; changes nothing. `compare_mm2` adds what
    MirrorMaker 2's rule would answer on the same writes."""
    offsets = GroupOffsets(link)
    try:
        translated = offsets.translate(group, offsets.committed(group))
        if compare_mm2:
            translated = [replace(p, mm2_offset=offsets.mm2_offset(p)) for p in translated]
        return translated
    finally:
        offsets.close()


def held(previous: Checkpoint | None, new: PartitionTranslation) -> PartitionTranslation:
    """Checkpoints never move back unless the group did: a lower target offset for a group that did not rewind
    keeps the previous one."""
    if (previous is not None and new.source_offset >= previous.upstream_offset
            and new.target_offset < previous.downstream_offset):
        return replace(new, target_offset=previous.downstream_offset,
                       note=new.note or "held at the previous checkpoint")
    return new


def read_checkpoints(consumer_settings: Mapping[str, Any], topic: str) -> dict[tuple[str, str, int], Checkpoint]:
    """The newest checkpoint per (group, target topic, partition)."""
    out = {}
    for msg in clients.read_to_end(consumer_settings, topic, "checkpoints"):
        value = msg.value()
        if value is None:
            continue
        c = Checkpoint.decode(msg.key() or b"", value)
        out[(c.group, c.topic, c.partition)] = c
    return out


def newest_checkpoint_ms(consumer_settings: Mapping[str, Any], topic: str) -> int | None:
    """When the newest checkpoint in the topic was written (its record timestamp), or None if there is none."""
    times = [msg.timestamp()[1] for msg in clients.read_to_end(consumer_settings, topic, "checkpoints")]
    return max(times, default=None)


def newest_checkpoint_age_s(link: FlowLink) -> float | None:
    """Seconds since the flow's newest checkpoint was written (never negative), or None if there is none."""
    newest = newest_checkpoint_ms(link.settings("target", "consumer"), link.checkpoints_topic)
    return None if newest is None else round(max(time.time() - newest / 1000, 0.0), 1)


class CheckpointRounds:
    """A flow's checkpoint rounds in one process: the offset syncs and the checkpoints topic are read once, then
    only what is new (at most one checkpoint per group-partition and the syncs' bounded state are kept)."""

    def __init__(self, link: FlowLink) -> None:
        self.flow = flow = link.flow
        self.offsets = GroupOffsets(link)
        self.topic = link.checkpoints_topic
        admin_sync.ensure_internal_topic(self.offsets.target_admin, flow.target, self.topic,
                                         flow.number("checkpoints.topic.replication.factor"),
                                         admin_sync.COMPACTED)
        self._log = InternalLog(link.settings("target", "consumer"), self.topic, "checkpoints")
        self.previous: dict[tuple[str, str, int], Checkpoint] = {}
        self.written = 0  # checkpoint records written by the last round (unchanged ones are not rewritten)

    def close(self) -> None:
        self._log.close()
        self.offsets.close()

    def run(self) -> list[GroupCheckpoints]:
        """One round (see the module docstring); writes the flow's checkpoint status."""
        offsets = self.offsets
        for msg in self._log.catch_up():
            if msg.value() is not None:
                c = Checkpoint.decode(msg.key() or b"", msg.value() or b"")
                self.previous[(c.group, c.topic, c.partition)] = c
        groups = offsets.groups()
        read_at = time.time()
        committed = offsets.committed_many(groups)
        offsets.refresh()
        results = []
        for group, translated in offsets.translate_many(committed).items():
            held_back = [held(self.previous.get((p.group, p.target_topic, p.partition)), p) for p in translated]
            if held_back:
                results.append(GroupCheckpoints(group, held_back))
        changed = [(r, p) for r in results for p in r.partitions
                   if self.previous.get((p.group, p.target_topic, p.partition)) != p.checkpoint]
        _write(offsets, self.topic, changed, read_at)
        for _, p in changed:
            c = p.checkpoint
            self.previous[(c.group, c.topic, c.partition)] = c
        self.written = len(changed)
        if self.flow.flag("sync.group.offsets.enabled"):
            for result in results:
                result.group_sync = offsets.sync_to_target(result.group, result.partitions)
        _record_status(self.flow, results, offsets.unread)
        return results


def run_round(link: FlowLink) -> list[GroupCheckpoints]:
    """One checkpoint round for a flow, in a process of its own (a command, an Airflow task)."""
    rounds = CheckpointRounds(link)
    try:
        return rounds.run()
    finally:
        rounds.close()


def _write(offsets: GroupOffsets, topic: str, changed: Sequence[tuple[GroupCheckpoints, PartitionTranslation]],
           read_at: float) -> None:
    if not changed:
        return
    producer = offsets.link.durable_producer()
    failures: list[str] = []

    def acked(result: GroupCheckpoints, key: TopicPartitionKey) -> Any:
        def on_delivery(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                failures.append(err.str())
            else:
                result.latency_ms[key] = (time.time() - read_at) * 1000
        return on_delivery

    for result, p in changed:
        c = p.checkpoint
        _produce(producer, topic, c.value(), c.key(), acked(result, (p.source_topic, p.partition)))
    if producer.flush(admin_sync.TIMEOUT_S) > 0 or failures:
        cause = failures[0] if failures else f"not acknowledged within {admin_sync.TIMEOUT_S:.0f} s"
        raise OperationalError(f"cannot write checkpoints to {offsets.target.alias} {topic}: {cause}")


def _produce(producer: Any, topic: str, value: bytes, key: bytes, on_delivery: Any) -> None:
    while True:
        try:
            producer.produce(topic, value, key, partition=0, on_delivery=on_delivery)
            producer.poll(0)
            return
        except BufferError:
            producer.poll(0.1)


def _record_status(flow: Flow, results: Sequence[GroupCheckpoints], unread: Mapping[str, str]) -> None:
    """Merge the round into the flow's checkpoint status: `checkpoint-latency-ms` min/max/avg per partition."""
    path = metrics.checkpoint_status_file(flow)
    status = metrics.read_status(path) or {"partitions": {}}
    now = time.time()
    stats: dict[str, Any] = status["partitions"]
    for result in results:
        for (topic, partition), ms in result.latency_ms.items():
            key = f"{result.group}/{topic}/{partition}"
            s = stats.get(key) or {"min": ms, "max": ms, "sum": 0.0, "count": 0}
            s.update(min=min(s["min"], ms), max=max(s["max"], ms), sum=s["sum"] + ms, count=s["count"] + 1)
            s["avg"] = s["sum"] / s["count"]
            stats[key] = s
    status.update(flow=flow.name, updated=now, groups=len(results),
                  partitions_checkpointed=sum(len(r.partitions) for r in results),
                  inexact=[metrics.InexactCheckpoint(r.group, p.source_topic, p.partition, p.note).row()
                           for r in results for p in r.partitions if not p.exact],
                  unread={g: unread[g] for g in sorted(unread)[:100]}, unread_groups=len(unread))
    if results:
        status["newest_checkpoint"] = now
    metrics.write_status(path, status)



def loop(cfg: MirrorConfig, flows: Sequence[Flow], report: Callable[[Flow, list[GroupCheckpoints]], None],
         stop: threading.Event) -> None:
    """Run each flow's rounds every `emit.checkpoints.interval.seconds` until `stop` is set.

    A failed round (a cluster down) is logged in one line and retried at the next interval: checkpoints
    resume by themselves after an outage.
    """
    due = dict.fromkeys((f.name for f in flows), 0.0)
    rounds: dict[str, CheckpointRounds] = {}
    try:
        while not stop.is_set():
            for flow in flows:
                if time.monotonic() < due[flow.name]:
                    continue
                due[flow.name] = time.monotonic() + flow.number("emit.checkpoints.interval.seconds")
                try:
                    if flow.name not in rounds:
                        rounds[flow.name] = CheckpointRounds(FlowLink.of(cfg, flow))
                    report(flow, rounds[flow.name].run())
                except OperationalError as exc:
                    log.error("flow %s: checkpoint round failed: %s", flow.name, exc)
                    failed = rounds.pop(flow.name, None)
                    if failed is not None:
                        failed.close()
            stop.wait(max(0.1, min(due.values()) - time.monotonic()))
    finally:
        for r in rounds.values():
            r.close()
