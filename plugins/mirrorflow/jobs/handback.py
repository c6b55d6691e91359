"""`mirrorflow handback --to mm2`: give a flow back to MirrorMaker 2 exactly where mirrorflow stopped.

  1. mirrorflow's stream must be stopped (the command holds the flow's lease while it writes: it refuses while a
     stream runs) and so must MM2 (its worker group has no member: a running MM2 overwrites its offsets at its next
     flush, from what it copied itself);
  2. for each source partition with a position in the flow's offset syncs, MM2's committed offset becomes the position
     minus one (MM2 resumes one past it), written to MM2's offsets topic in the partition MM2's worker puts that key
     in (murmur2), so it supersedes MM2's older commit; the flow's anchors become MM2 offset syncs (each an exact
     (upstream, downstream) pair), so MM2's checkpoints translate from the copies mirrorflow made;
  3. the flow is recorded stopped ("handed back to MirrorMaker 2"), so mirrorflow's supervisors leave it alone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import NewTopic

from mirrorflow.errors import ConfigError, OperationalError
from mirrorflow.jobs import lifecycle
from mirrorflow.kafka import admin_sync, mm2_state, offset_sync_log, writers
from mirrorflow.kafka.link import FlowLink, Side
from mirrorflow.rules.anchors import Anchor

log = logging.getLogger(__name__)
OFFSETS_PARTITIONS = 25  # Connect's offset.storage.partitions default: MM2's offsets topic when it creates it
MIRRORS = {"mm2": "MirrorMaker 2"}


@dataclass(frozen=True)
class PartitionHandback:
    topic: str
    partition: int
    position: int  # the flow's: every source record below it is on the target
    mm2_committed: int | None  # MM2's commit before the hand-back; None: none
    syncs: tuple[Anchor, ...]  # what MM2's offset syncs get

    @property
    def commit(self) -> int:
        return self.position - 1  # MM2 resumes at its commit + 1

    def line(self) -> str:
        before = "none" if self.mm2_committed is None else str(self.mm2_committed)
        return (f"{self.topic}-{self.partition}: MM2 resumes at {self.position} (its commit {before} -> "
                f"{self.commit}); {len(self.syncs)} offset sync(s)")


def handback(link: FlowLink, mirror: str = "mm2", dry_run: bool = False) -> list[PartitionHandback]:
    """Plan, and unless `dry_run` write, the hand-back; the partitions it covers."""
    if mirror not in MIRRORS:
        raise ConfigError(f"--to {mirror}: expected one of {', '.join(MIRRORS)}")
    flow, names = link.flow, mm2_state.MM2Names.of(link.config, link.flow)
    state = mm2_state.worker_group_state(link.target_admin, names.worker_group, flow.target)
    if state is not None:
        raise OperationalError(f"flow {flow.name}: MirrorMaker 2 runs (its worker group {names.worker_group} on "
                               f"{flow.target} has {state}): stop it before the hand-back, or it overwrites its "
                               "offsets at its next flush")
    lease = link.lease()
    lease.acquire(wait_s=10.0)  # raises while mirrorflow's stream runs
    try:
        syncs = offset_sync_log.read(link.settings("target", "consumer"), link.syncs_topic)
        if syncs.release is None:  # its last writes may still land past the positions read now
            raise OperationalError(f"flow {flow.name}: its stream did not stop cleanly; start it again and stop it "
                                   f"with `mirrorflow stop --flow {flow.name}`, then hand it back")
        counts, _ = admin_sync.partition_counts(link.target_admin, flow.target)
        committed = mm2_state.committed_offsets(link.settings("target", "consumer"), names.offsets_topic,
                                                counts.get(names.offsets_topic, 0), flow.source)
        plan = [PartitionHandback(t, p, pos.upstream_next, committed.get((t, p)),
                                  tuple(a for _, a in sorted(syncs.anchors.get((t, p), {}).items(),
                                                             key=lambda sa: sa[1].downstream)))
                for (t, p), pos in sorted(syncs.positions.items())]
        if not dry_run:
            _write(link, names, plan, counts.get(names.offsets_topic))
            lifecycle.request(link, lifecycle.STOPPED, f"handed back to {MIRRORS[mirror]}")
    finally:
        lease.release()
    for h in plan:
        log.warning("flow %s: %s to %s: %s", flow.name, "would hand back" if dry_run else "handed back",
                    MIRRORS[mirror], h.line())
    return plan


def _write(link: FlowLink, names: mm2_state.MM2Names, plan: list[PartitionHandback], partitions: int | None) -> None:
    flow = link.flow
    if partitions is None:  # MM2 never ran against this target: its offsets topic as its worker would create it
        partitions = OFFSETS_PARTITIONS
        _, brokers = admin_sync.partition_counts(link.target_admin, flow.target)
        rf = admin_sync.replication_factor(3, brokers, f"{flow.target} {names.offsets_topic}")
        admin_sync.wait(link.target_admin.create_topics([NewTopic(names.offsets_topic, partitions, rf,
                                                                  config={"cleanup.policy": "compact"})]),
                        f"cannot create MirrorMaker 2's offsets topic on {flow.target}:",
                        tolerate=(KafkaError.TOPIC_ALREADY_EXISTS,))
    syncs_side: Side = "target" if names.syncs_on_target else "source"
    admin_sync.ensure_internal_topic(link.admin(syncs_side), link.cluster(syncs_side).alias, names.syncs_topic,
                                     flow.number("offset-syncs.topic.replication.factor"), admin_sync.COMPACTED)
    failed: list[str] = []

    def acked(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            failed.append(err.str())

    sync_producer = link.durable_producer() if names.syncs_on_target else \
        Producer({**link.settings("source", "producer"), **writers.DURABLE})
    for h in plan:
        for sync in h.syncs:
            key, value = mm2_state.encode_sync(h.topic, h.partition, sync)
            sync_producer.produce(names.syncs_topic, value, key, partition=0, on_delivery=acked)
    offsets_producer = link.durable_producer()
    for h in plan:
        key = mm2_state.offset_key(flow.source, h.topic, h.partition)
        offsets_producer.produce(names.offsets_topic, mm2_state.offset_value(h.commit), key,
                                 partition=mm2_state.murmur2_partition(key, partitions), on_delivery=acked)
    unsent = sync_producer.flush(admin_sync.TIMEOUT_S) + offsets_producer.flush(admin_sync.TIMEOUT_S)
    if unsent or failed:
        why = failed[0] if failed else f"{unsent} record(s) unsent"
        raise OperationalError(f"flow {flow.name}: the hand-back was not acknowledged ({why}); run it again before "
                               "starting MirrorMaker 2")
