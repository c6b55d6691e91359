"""Consumer-group checkpoints: translated group offsets in MM2's `{source}.checkpoints.internal` topic.

One round for a flow A->B:
  1. list A's consumer groups that pass `groups`/`groups.exclude`, and their committed offsets;
  2. read the flow's offset syncs on B, after the offsets, so that they cover as much as possible. For
     topics that came from B (failback), read the reverse flow's syncs, which are on A;
  3. translate every partition (see translation.py). "Start" and offsets lost to retention on B resolve
     to B's log start;
  4. hold a checkpoint that would move backwards while the group itself did not move back;
  5. write every checkpoint to `A.checkpoints.internal` on B, so MM2's own `RemoteClusterUtils` reads them;
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from mirrorflow import admin_sync, clients, metrics, offset_syncs, selection, wire
from mirrorflow.config import Flow, MirrorConfig
from mirrorflow.errors import OperationalError
from mirrorflow.policy import checkpoints_topic
from mirrorflow.translation import (
    PartitionSyncs,
    Translation,
    mm2_offset_syncs_of_runs,
    mm2_target_offset,
    source_offset,
    target_offset,
)

log = logging.getLogger(__name__)
_VERSION = 0
_IDLE_STATES = (ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD)
TopicPartitionKey = tuple[str, int]


class _Pending(NamedTuple):
    source_topic: str
    partition: int
    source_offset: int
    metadata: str
    target_topic: str
    translation: Translation
    mm2_offset: int | None


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
    """Translates a flow's consumer groups; one instance per round, so the syncs are read once."""

    def __init__(self, cfg: MirrorConfig, flow: Flow) -> None:
        self.flow, self.policy = flow, flow.policy
        self.source, self.target = cfg.cluster(flow.source), cfg.cluster(flow.target)
        self.source_admin: AdminClient = clients.admin(self.source)
        self.target_admin: AdminClient = clients.admin(self.target)
        self._syncs: dict[str, tuple[dict[TopicPartitionKey, PartitionSyncs], set[str]]] = {}
        self._mm2: dict[TopicPartitionKey, list[tuple[int, int]]] = {}

    def groups(self) -> list[str]:
        listed = admin_sync.wait({"groups": self.source_admin.list_consumer_groups()},
                                 f"cannot list the consumer groups of {self.source.alias}:")["groups"]
        selected = self.flow.group_filter
        return sorted(g.group_id for g in listed.valid if selected.selects(g.group_id))

    def committed(self, group: str) -> dict[TopicPartitionKey, tuple[int, str]]:
        request = [ConsumerGroupTopicPartitions(group)]
        result = admin_sync.wait(self.source_admin.list_consumer_group_offsets(request, require_stable=True),
                                 f"cannot read the offsets of group {group} on {self.source.alias}:")[group]
        return {(tp.topic, tp.partition): (tp.offset, tp.metadata or "")
                for tp in result.topic_partitions if tp.offset >= 0 and tp.error is None}

    def translate(self, group: str, committed: Mapping[TopicPartitionKey, tuple[int, str]]
                  ) -> list[PartitionTranslation]:
        """Every partition of the group that the flow mirrored, or that came from the target (failback)."""
        planned: list[_Pending] = []
        for (topic, partition), (offset, metadata) in sorted(committed.items()):
            forward = selection.replicates(self.flow, topic)
            came_back = not forward and self.policy.topic_source(topic) == self.flow.target
            if not (forward or came_back):
                continue
            if forward:
                syncs, mirrored = self._read_syncs(self.flow.source)
                target_topic, key = self.policy.remote_topic(self.flow.source, topic), topic
            else:
                syncs, mirrored = self._read_syncs(self.flow.target)
                target_topic = key = self.policy.upstream_topic(topic) or topic
            if key not in mirrored:
                continue  # no record of this topic was ever mirrored: MM2 writes no checkpoint either
            part = syncs.get((key, partition), PartitionSyncs(()))
            if forward:
                mm2 = mm2_target_offset(self._mm2_syncs(key, partition, part), offset)
                planned.append(_Pending(topic, partition, offset, metadata, target_topic,
                                        target_offset(part, offset), mm2))
            else:
                planned.append(_Pending(topic, partition, offset, metadata, target_topic,
                                        source_offset(part, offset), None))
        starts = self._log_starts([(p.target_topic, p.partition) for p in planned])
        out = []
        for topic, partition, offset, metadata, target_topic, t, mm2 in planned:
            start = starts.get((target_topic, partition))
            if start is None:
                log.warning("flow %s group %s: %s-%d has no partition %d on %s; skipped", self.flow.name, group,
                            topic, partition, partition, self.target.alias)
                continue
            wanted = start if t.offset is None else t.offset
            resolved, note = max(wanted, start), t.reason
            if wanted < start:
                note = f"records before {start} are gone from {self.target.alias} (retention)"
            out.append(PartitionTranslation(group, topic, target_topic, partition, offset, resolved,
                                            t.exact and resolved == wanted, note, metadata, mm2))
        return out

    def _mm2_syncs(self, topic: str, partition: int, syncs: PartitionSyncs) -> list[tuple[int, int]]:
        """The syncs MM2 would have kept for the same writes (for comparison), once per partition and round."""
        if (topic, partition) not in self._mm2:
            in_write_order = sorted(syncs.runs, key=lambda r: r.downstream)
            self._mm2[(topic, partition)] = mm2_offset_syncs_of_runs(in_write_order, self.flow.number("offset.lag.max"))
        return self._mm2[(topic, partition)]

    def _read_syncs(self, upstream_alias: str) -> tuple[dict[TopicPartitionKey, PartitionSyncs], set[str]]:
        """The syncs of flow {upstream_alias}->x (the flow's own on the target, or the reverse's on the source),
        and the topics with at least one mirrored record."""
        if upstream_alias not in self._syncs:
            on = self.target if upstream_alias == self.flow.source else self.source
            topic = offset_syncs.topic_name(upstream_alias, self.policy.separator)
            positions, runs = offset_syncs.read_all(clients.settings(on, "consumer"), topic)
            by_tp = {tp: PartitionSyncs(tuple(runs.get(tp, {}).values()), positions.get(tp))
                     for tp in set(positions) | set(runs)}
            self._syncs[upstream_alias] = by_tp, {t for (t, _), by_start in runs.items() if by_start}
        return self._syncs[upstream_alias]

    def _log_starts(self, partitions: Sequence[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        if not partitions:
            return {}
        request = {TopicPartition(t, p): OffsetSpec.earliest() for t, p in set(partitions)}  # type: ignore[no-untyped-call]
        out = {}
        for tp, future in self.target_admin.list_offsets(request).items():
            try:
                out[(tp.topic, tp.partition)] = future.result(timeout=admin_sync.TIMEOUT_S).offset
            except KafkaException as exc:
                if exc.args[0].code() not in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION):
                    raise OperationalError(f"cannot read the log start of {tp.topic}-{tp.partition} on "
                                           f"{self.target.alias}: {exc.args[0].str()}") from None
        return out

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


def translate_group(cfg: MirrorConfig, flow: Flow, group: str) -> list[PartitionTranslation]:
    """Where `group` would resume on the flow's target, per partition; changes nothing."""
    offsets = GroupOffsets(cfg, flow)
    return offsets.translate(group, offsets.committed(group))


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


def run_round(cfg: MirrorConfig, flow: Flow) -> list[GroupCheckpoints]:
    """One checkpoint round for a flow (see the module docstring); writes the flow's checkpoint status."""
    offsets = GroupOffsets(cfg, flow)
    topic = checkpoints_topic(offsets.policy, flow.source)
    admin_sync.ensure_internal_topic(offsets.target_admin, flow.target, topic,
                                     flow.number("checkpoints.topic.replication.factor"),
                                     {"cleanup.policy": "compact"})
    previous = read_checkpoints(clients.settings(offsets.target, "consumer"), topic)
    read_at: dict[str, float] = {}
    committed = {}
    for group in offsets.groups():
        read_at[group] = time.time()
        committed[group] = offsets.committed(group)
    results = []
    for group, by_tp in committed.items():
        translated = [held(previous.get((p.group, p.target_topic, p.partition)), p)
                      for p in offsets.translate(group, by_tp)]
        if translated:
            results.append(GroupCheckpoints(group, translated))
    _write(offsets, topic, results, read_at)
    if flow.flag("sync.group.offsets.enabled"):
        for result in results:
            result.group_sync = offsets.sync_to_target(result.group, result.partitions)
    _record_status(flow, results)
    return results


def _write(offsets: GroupOffsets, topic: str, results: Sequence[GroupCheckpoints], read_at: Mapping[str, float]
           ) -> None:
    producer = clients.producer(offsets.target, **{"acks": "all", "enable.idempotence": True})
    failures: list[str] = []

    def acked(result: GroupCheckpoints, key: TopicPartitionKey) -> Any:
        def on_delivery(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                failures.append(err.str())
            else:
                result.latency_ms[key] = (time.time() - read_at[result.group]) * 1000
        return on_delivery

    for result in results:
        for p in result.partitions:
            c = p.checkpoint
            producer.produce(topic, c.value(), c.key(), partition=0,
                             on_delivery=acked(result, (p.source_topic, p.partition)))
            producer.poll(0)
    if producer.flush(admin_sync.TIMEOUT_S) > 0 or failures:
        cause = failures[0] if failures else f"not acknowledged within {admin_sync.TIMEOUT_S:.0f} s"
        raise OperationalError(f"cannot write checkpoints to {offsets.target.alias} {topic}: {cause}")


def _record_status(flow: Flow, results: Sequence[GroupCheckpoints]) -> None:
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
                  inexact=[f"{r.group}/{p.source_topic}-{p.partition}: {p.note}"
                           for r in results for p in r.partitions if not p.exact])
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
    while not stop.is_set():
        for flow in flows:
            if time.monotonic() < due[flow.name]:
                continue
            due[flow.name] = time.monotonic() + flow.number("emit.checkpoints.interval.seconds")
            try:
                report(flow, run_round(cfg, flow))
            except OperationalError as exc:
                log.error("flow %s: checkpoint round failed: %s", flow.name, exc)
        stop.wait(max(0.1, min(due.values()) - time.monotonic()))
