"""`mirrorflow takeover --from mm2`: take a flow over from the MirrorMaker 2 that ran it, without a re-copy or a gap.

  1. the old mirror must be stopped, and the plan says how that is known: its worker group on the target has no
     member, its newest heartbeat for the flow is older than STALE_S, and no remote partition grew for QUIET_S;
  2. MM2's committed offsets and offset syncs (kafka/mm2_state), the remote partitions' ends, then every remote
     partition's tail from its newest sync and the source records after that sync (one consumer per side);
  3. a plan per partition (rules/takeover): where the stream resumes, copies past MM2's last commit, records MM2
     wrote twice; a partition that cannot be taken over refuses the whole takeover (nothing is written);
  4. unless a dry run: the flow's offset syncs get the positions (the next copy of each partition lands at its
     remote partition's end) and MM2's syncs as imported anchors, in one transaction under the flow's lease
     (jobs/reset.write_positions). Consumer groups keep their checkpoints: the flow's rounds write the same
     `A.checkpoints.internal` MM2 wrote and never move one back while its group did not move back.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import xxhash
from confluent_kafka import Message
from confluent_kafka.admin import OffsetSpec

from mirrorflow.errors import ConfigError, OperationalError
from mirrorflow.jobs import reset
from mirrorflow.kafka import admin_sync, heartbeats, mm2_state, offset_sync_log
from mirrorflow.kafka.internal_log import read_to_ends
from mirrorflow.kafka.link import FlowLink
from mirrorflow.rules import record_digest
from mirrorflow.rules.anchors import Anchor
from mirrorflow.rules.offset_syncs import AnchorRecord, Position
from mirrorflow.rules.takeover import Content, PartitionPlan, TailMatch, match_tail, plan_partition

log = logging.getLogger(__name__)
QUIET_S = 5.0  # the remote partitions' ends must hold still this long
STALE_S = 10.0  # at least; three heartbeat intervals when those are longer
MIRRORS = {"mm2": "MirrorMaker 2"}
_NULL = 0x9E3779B97F4A7C15
TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class Takeover:
    flow: str
    mirror: str  # the old mirror's name, for the operator
    stopped: tuple[str, ...]  # how the old mirror is known to be stopped
    running: str | None  # why it is not: the takeover refuses
    partitions: tuple[PartitionPlan, ...]

    @property
    def refused(self) -> list[PartitionPlan]:
        return [p for p in self.partitions if p.refused is not None]

    @property
    def allowed(self) -> bool:
        return self.running is None and not self.refused

    def lines(self) -> list[str]:
        out = [f"flow {self.flow}: taking over from {self.mirror}"]
        out += [f"  {self.mirror} is stopped: {why}" for why in self.stopped]
        if self.running is not None:
            out.append(f"  REFUSED: {self.mirror} is still running: {self.running}")
        out += [f"  {p.line()}" for p in self.partitions]
        since = sum(p.since_commit for p in self.partitions)
        repeats = sum(p.repeats for p in self.partitions)
        out.append(f"  {len(self.partitions)} partition(s), {len(self.refused)} refused; {since} record(s) copied "
                   f"after {self.mirror}'s last commit stay and are not copied again; {repeats} written twice by "
                   f"{self.mirror}; mirrorflow copies none twice and skips none")
        return out


def fingerprint(m: Message) -> int:
    """What a copy keeps of a record, as one number: key, value (None apart from empty), headers, timestamp."""
    key, value = m.key(), m.value()
    try:
        headers = record_digest.headers_hash(m.headers())  # type: ignore[arg-type]
    except UnicodeDecodeError:
        headers = _NULL  # the same on both sides: the copy keeps the bytes the client cannot decode
    return xxhash.xxh64_intdigest(struct.pack(">QQQq", _NULL if key is None else xxhash.xxh64_intdigest(key),
                                              _NULL if value is None else xxhash.xxh64_intdigest(value), headers,
                                              m.timestamp()[1]))


def plan(link: FlowLink, mirror: str = "mm2", quiet_s: float = QUIET_S) -> Takeover:
    """What taking the flow over would do; reads the clusters, changes nothing."""
    if mirror not in MIRRORS:
        raise ConfigError(f"--from {mirror}: expected one of {', '.join(MIRRORS)}")
    flow, names = link.flow, mm2_state.MM2Names.of(link.config, link.flow)
    target_consumer = link.settings("target", "consumer")
    source_counts, _ = admin_sync.partition_counts(link.source_admin, flow.source)
    target_counts, _ = admin_sync.partition_counts(link.target_admin, flow.target)
    partitions = link.replicated_partitions(source_counts, heartbeats=True)
    remote = {tp: (link.remote_topic(tp[0]), tp[1]) for tp in partitions}
    present = [r for r in remote.values() if r[1] < target_counts.get(r[0], 0)]

    def ends() -> dict[TopicPartition, int]:
        return admin_sync.offsets(link.target_admin, flow.target, present,
                                  OffsetSpec.latest())  # type: ignore[no-untyped-call]

    before = ends()
    stopped, running = _stopped(link, names, before, ends, quiet_s)
    target_ends = ends()
    committed = mm2_state.committed_offsets(target_consumer, names.offsets_topic,
                                            target_counts.get(names.offsets_topic, 0), flow.source)
    syncs = mm2_state.offset_syncs(link.settings("target" if names.syncs_on_target else "source", "consumer"),
                                   names.syncs_topic)
    newest = {tp: max(s, key=lambda a: (a.downstream, a.upstream)) for tp, s in syncs.items() if s}
    matches = _matches(link, partitions, remote, newest, target_ends, committed)
    reset_to = link.source.client_config("consumer").get("auto.offset.reset", "earliest").strip().lower()
    fallback = admin_sync.offsets(link.source_admin, flow.source, partitions,
                                  OffsetSpec.latest() if reset_to == "latest"  # type: ignore[no-untyped-call]
                                  else OffsetSpec.earliest())  # type: ignore[no-untyped-call]
    limit = flow.number("mirrorflow.offset-syncs.anchors.max")
    plans = tuple(plan_partition(t, p, committed=committed.get((t, p)), syncs=syncs.get((t, p), []),
                                 target_end=target_ends.get(remote[(t, p)], 0), match=matches.get((t, p)),
                                 fallback=fallback[(t, p)], limit=limit) for t, p in partitions)
    return Takeover(flow.name, MIRRORS[mirror], tuple(stopped), running, plans)


def _stopped(link: FlowLink, names: mm2_state.MM2Names, before: Mapping[TopicPartition, int],
             ends: Callable[[], dict[TopicPartition, int]], quiet_s: float) -> tuple[list[str], str | None]:
    """How the old mirror is known to be stopped, and why it is not (None when it is)."""
    flow = link.flow
    stopped: list[str] = []
    state = mm2_state.worker_group_state(link.target_admin, names.worker_group, flow.target)
    if state is not None:
        return stopped, f"its worker group {names.worker_group} on {flow.target} is {state}; stop it first"
    stopped.append(f"its worker group {names.worker_group} on {flow.target} has no member")
    beats = heartbeats.newest(link.settings("target", "consumer"), "heartbeats").get((flow.source, flow.target))
    stale_s = max(STALE_S, 3 * flow.number("emit.heartbeats.interval.seconds"))
    if beats is not None:
        age = heartbeats.age_s(beats.timestamp_ms, time.time())
        if age < stale_s:
            return stopped, f"its newest heartbeat {flow.source}->{flow.target} on {flow.target} is {age:.0f} s old"
        stopped.append(f"its newest heartbeat {flow.source}->{flow.target} is {age:.0f} s old")
    else:
        stopped.append(f"no heartbeat {flow.source}->{flow.target} on {flow.target}")
    time.sleep(quiet_s)
    after = ends()
    grown = [(tp, before.get(tp, 0), n) for tp, n in sorted(after.items()) if n != before.get(tp, 0)]
    if grown:
        (t, p), was, now = grown[0]
        return stopped, f"remote partition {t}-{p} went from {was} to {now} records within {quiet_s:.0f} s"
    stopped.append(f"no remote partition grew in {quiet_s:.0f} s")
    return stopped, None


def _matches(link: FlowLink, partitions: Sequence[TopicPartition], remote: Mapping[TopicPartition, TopicPartition],
             newest: Mapping[TopicPartition, Anchor], target_ends: Mapping[TopicPartition, int],
             committed: Mapping[TopicPartition, int]) -> dict[TopicPartition, TailMatch]:
    """Each partition's tail (from its newest sync to its end) matched with the source after that sync."""
    synced = [tp for tp in partitions if tp in newest]
    spans = {remote[tp]: (newest[tp].downstream, target_ends.get(remote[tp], 0)) for tp in synced}
    tails: dict[TopicPartition, list[Content]] = {tp: [] for tp in synced}
    back = {r: tp for tp, r in remote.items()}
    for m in read_to_ends(link.settings("target", "consumer"), list(spans), "remote partitions' tails", spans=spans):
        tails[back[(m.topic() or "", m.partition() or 0)]].append(Content(m.offset() or 0, fingerprint(m)))
    source: dict[TopicPartition, list[Content]] = {tp: [] for tp in synced}
    source_next = {tp: newest[tp].upstream for tp in synced}
    source_ends = admin_sync.offsets(link.source_admin, link.flow.source, synced,
                                     OffsetSpec.latest())  # type: ignore[no-untyped-call]
    isolation = "read_committed" if link.reads_committed else "read_uncommitted"
    short = [tp for tp in synced if tails[tp]]
    while short:  # a window at a time: transaction markers and compaction holes make offsets outrun records
        spans = {tp: (source_next[tp], source_next[tp] + 2 * (len(tails[tp]) - len(source[tp])) + 64) for tp in short}
        for m in read_to_ends(link.settings("source", "consumer"), short, "source records after the syncs",
                              spans=spans, isolation=isolation):
            tp = (m.topic() or "", m.partition() or 0)
            source[tp].append(Content(m.offset() or 0, fingerprint(m)))
        for tp in short:
            source_next[tp] = min(spans[tp][1], source_ends.get(tp, 0))
        short = [tp for tp in short if len(source[tp]) < len(tails[tp]) and source_next[tp] < source_ends.get(tp, 0)]
    return {tp: match_tail(tails[tp], source[tp], source_next[tp], committed.get(tp)) for tp in synced}


def apply(link: FlowLink, takeover: Takeover) -> None:
    """Write the plan into the flow's offset syncs (see the module's step 4); OperationalError if it is refused."""
    if not takeover.allowed:
        raise OperationalError(f"flow {takeover.flow}: the takeover is refused (see the plan); nothing was written")
    taken = {(p.topic, p.partition): p for p in takeover.partitions}
    remote_ends = {(p.topic, p.partition): p.target_end for p in takeover.partitions}

    def records(syncs: offset_sync_log.SyncsState) -> list[reset.SyncsWrite]:
        held = syncs.anchors
        out: list[reset.SyncsWrite] = []
        for tp, p in taken.items():
            out += [AnchorRecord(*tp, slot, None) for slot in held.get(tp, {}) if slot >= len(p.anchors)]
            out += [AnchorRecord(*tp, slot, a) for slot, a in enumerate(p.anchors)]
            out.append(Position(*tp, p.resume, remote_ends[tp] or None))
        return out

    link.ensure_syncs_topic()  # a flow mirrorflow never ran has none yet
    reset.write_positions(link, "takeover", records)
    for p in takeover.partitions:
        log.warning("flow %s: taken over from %s: %s", takeover.flow, takeover.mirror, p.line())
