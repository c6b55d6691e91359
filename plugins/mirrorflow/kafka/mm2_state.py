"""What a MirrorMaker 2 running a flow A->B leaves on the clusters, read for a takeover (jobs/takeover).

MM2's dedicated mode runs one Connect worker per flow, connected to B (MirrorMakerConfig.workerConfig):
  worker group   `A-mm2` on B (`group.id` under B's prefix or at the top level overrides it)
  offsets topic  `mm2-offsets.A.internal` on B (`B.offset.storage.topic`, or the top-level key, overrides it); its
                 records are Connect's: key `["MirrorSourceConnector",{"cluster":"A","partition":P,"topic":"T"}]`,
                 value `{"offset":N}`, N the source offset of the last record copied (the task resumes at N + 1)
  offset syncs   `mm2-offset-syncs.B.internal` on A (`offset-syncs.topic.location = target`: `mm2-offset-syncs.A.
                 internal` on B); key {topic: string, partition: int32}, value {upstream: int64, downstream: int64}
  heartbeats     `heartbeats` on B, key (A, B), every `emit.heartbeats.interval.seconds` while the worker runs
Bound: the syncs read keep at most 2 x SYNCS_KEPT per partition while read, SYNCS_KEPT after (the oldest, the newest
half, the rest thinned: rules/takeover.thinned; MM2 itself keeps 64 in memory).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from mirrorflow.errors import OperationalError
from mirrorflow.kafka import admin_sync
from mirrorflow.kafka.internal_log import read_to_ends
from mirrorflow.model.config import Flow, MirrorConfig, Setting
from mirrorflow.rules import policy, wire
from mirrorflow.rules.anchors import Anchor
from mirrorflow.rules.takeover import thinned

SYNCS_KEPT = 64
CONNECTOR = "MirrorSourceConnector"
TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class MM2Names:
    """Where a flow's MirrorMaker 2 keeps its state."""

    worker_group: str  # on the target
    offsets_topic: str  # on the target
    syncs_topic: str
    syncs_on_target: bool

    @classmethod
    def of(cls, config: MirrorConfig, flow: Flow) -> MM2Names:
        source, target = flow.source, flow.target
        target_settings = config.cluster(target).settings

        def worker_key(given: Setting | None, default: str) -> str:
            return given.value.strip() if given is not None else default

        on_target = flow.value("offset-syncs.topic.location").strip().lower() == "target"
        # MM2's workerConfig: the target's keys, then the top-level worker keys over them (offset.storage.*, not
        # group.id, which only the target's prefix sets).
        return cls(worker_key(target_settings.get("group.id"), f"{source}-mm2"),
                   worker_key(config.top_level.get("offset.storage.topic") or target_settings.get(
                       "offset.storage.topic"), f"mm2-offsets.{source}.internal"),
                   policy.offset_syncs_topic(flow.policy, source if on_target else target), on_target)


def worker_group_state(admin: AdminClient, group: str, cluster: str) -> str | None:
    """Who is in a group on `cluster` when anyone is ("3 members: host, ..."), None when nobody is (empty, dead or
    never there). Kafka's group metadata request answers for any protocol: MM2's worker group is a Connect group,
    which the consumer-group admin calls skip. Fails closed: an OperationalError when the cluster does not answer."""
    try:
        listed = admin.list_groups(group, timeout=admin_sync.TIMEOUT_S)
    except KafkaException as exc:
        raise OperationalError(f"cannot tell whether group {group} on {cluster} has members: "
                               f"{exc.args[0].str()}") from None
    members = [m for g in listed if g.id == group for m in g.members]
    if not members:
        return None
    hosts = ", ".join(sorted({str(m.client_host).lstrip("/") for m in members}))
    return f"{len(members)} member(s): {hosts}"


def offset_key(source: str, topic: str, partition: int) -> bytes:
    """Connect's key for a MirrorSourceTask's source partition, byte for byte as its JsonConverter writes it."""
    return json.dumps([CONNECTOR, {"cluster": source, "partition": partition, "topic": topic}],
                      separators=(",", ":")).encode()


def parse_offset(key: bytes, value: bytes | None, source: str) -> tuple[TopicPartition, int | None] | None:
    """A record of MM2's offsets topic: the source partition and committed offset (None: a tombstone), or None when
    it is not the source connector's for `source` (heartbeats, checkpoints, another flow's)."""
    try:
        connector, partition = json.loads(key)
        if connector != CONNECTOR or partition.get("cluster") != source:
            return None
        tp = (str(partition["topic"]), int(partition["partition"]))
        offset = None if value is None else json.loads(value).get("offset")
        return tp, None if offset is None else int(offset)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def committed_offsets(target_consumer: Mapping[str, Any], topic: str, partitions: int, source: str
                      ) -> dict[TopicPartition, int]:
    """The source offset MM2 last committed per source partition (the last copied record's)."""
    out: dict[TopicPartition, int] = {}
    for msg in read_to_ends(target_consumer, [(topic, p) for p in range(partitions)], f"MM2 offsets {topic}"):
        parsed = parse_offset(msg.key() or b"", msg.value(), source)
        if parsed is None:
            continue
        tp, offset = parsed
        if offset is None or offset < 0:
            out.pop(tp, None)
        else:
            out[tp] = offset
    return out


def decode_sync(key: bytes, value: bytes) -> tuple[TopicPartition, Anchor]:
    topic, at = wire.read_string(key, 0)
    (partition,) = struct.unpack_from(">i", key, at)
    upstream, downstream = struct.unpack_from(">qq", value, 0)
    return (topic, partition), Anchor(upstream, downstream)


def offset_syncs(consumer: Mapping[str, Any], topic: str) -> dict[TopicPartition, list[Anchor]]:
    """MM2's offset syncs per source partition, at most SYNCS_KEPT of each (thinned), oldest first."""
    kept: dict[TopicPartition, list[Anchor]] = {}
    for msg in read_to_ends(consumer, [(topic, 0)], f"MM2 offset syncs {topic}"):
        value = msg.value()
        if value is None:
            continue
        try:
            tp, sync = decode_sync(msg.key() or b"", value)
        except (ValueError, struct.error):
            continue
        syncs = kept.setdefault(tp, [])
        syncs.append(sync)
        if len(syncs) > 2 * SYNCS_KEPT:
            kept[tp] = thinned(syncs, SYNCS_KEPT)
    return {tp: thinned(syncs, SYNCS_KEPT) for tp, syncs in kept.items()}


def murmur2(key: bytes) -> int:
    """Kafka's murmur2 of `key` (org.apache.kafka.common.utils.Utils.murmur2), as a signed 32-bit number."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    length = len(key)
    h = (0x9747B28C ^ length) & mask
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = (int.from_bytes(key[i:i + 4], "little") * m) & mask
        k = ((k ^ (k >> 24)) * m) & mask
        h = ((h * m) & mask) ^ k
    tail = key[whole:]
    for i in reversed(range(len(tail))):
        h ^= tail[i] << (8 * i)
    if tail:
        h = (h * m) & mask
    h = ((h ^ (h >> 13)) * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def murmur2_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's Java producer gives `key` (its default partitioner: murmur2, made positive, modulo the
    count): where MM2's worker wrote a source partition's offsets, so a record written there replaces them."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def offset_value(offset: int) -> bytes:
    """Connect's value for a committed source offset: MM2 resumes at `offset` + 1."""
    return json.dumps({"offset": offset}, separators=(",", ":")).encode()


def encode_sync(topic: str, partition: int, sync: Anchor) -> tuple[bytes, bytes]:
    """An MM2 offset sync's key and value (the inverse of `decode_sync`)."""
    return wire.string(topic) + struct.pack(">i", partition), struct.pack(">qq", sync.upstream, sync.downstream)
