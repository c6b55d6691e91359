"""`mirrorflow takeover --from mm2|mm1`: take a flow over from the mirror that ran it, without a re-copy or a gap.

  1. the old mirror must be stopped, and the plan says how that is known: MM2's worker group on the target has no
     member and its newest heartbeat for the flow is older than STALE_S (MirrorMaker 1: its consumer group on the
     source has no member), and no remote partition grew for QUIET_S;
  2. MM2's committed offsets and offset syncs (kafka/mm2_state), the remote partitions' ends, then every remote
     partition's tail from its newest sync and the source records after that sync (one consumer per side);
     MirrorMaker 1: its group's committed offsets, and the copy of each partition's last consumed record searched
     for in the remote partition's last WINDOW records (rules/takeover K6);
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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import confluent_kafka
import xxhash
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, Message
from confluent_kafka.admin import OffsetSpec

from mirrorflow.errors import ConfigError, OperationalError
from mirrorflow.jobs import reset
from mirrorflow.kafka import admin_sync, heartbeats, mm2_state, offset_sync_log
from mirrorflow.kafka.internal_log import read_to_ends
from mirrorflow.kafka.link import FlowLink
from mirrorflow.rules import record_digest
from mirrorflow.rules.anchors import Anchor
from mirrorflow.rules.offset_syncs import AnchorRecord, Position
from mirrorflow.rules.policy import is_heartbeats_topic
from mirrorflow.rules.takeover import Content, PartitionPlan, TailMatch, find_last_copy, match_tail, plan_partition

log = logging.getLogger(__name__)
QUIET_S = 5.0  # the remote partitions' ends must hold still this long
STALE_S = 10.0  # at least; three heartbeat intervals when those are longer
WINDOW = 100_000  # the remote partition's last records searched for a group's last copy (MM1) or matched (MM2)
LOOK_BACK = 64  # source offsets read below a group's offset to find its last consumed record past markers
MIRRORS = {"mm2": "MirrorMaker 2", "mm1": "MirrorMaker 1 (or a Go mirror maker)"}
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

    def resumes(self) -> dict[str, int]:
        """Where each partition resumes, keyed `topic-partition`: what a person approves (a runbook's apply step
        refuses a plan that changed since)."""
        return {f"{p.topic}-{p.partition}": p.resume for p in self.partitions}

    def markdown(self) -> str:
        return "\n".join([f"### {self.lines()[0]}", "", *(f"- {line.strip()}" for line in self.lines()[1:])])

    def lines(self) -> list[str]:
        out = [f"flow {self.flow}: taking over from {self.mirror}"]
        out += [f"  {self.mirror} is stopped: {why}" for why in self.stopped]
        if self.running is not None:
            return [*out, f"  REFUSED: {self.mirror} is still running: {self.running}",
                    "  (no plan while it runs: what it copies meanwhile would change it)"]
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


def plan(link: FlowLink, mirror: str = "mm2", group: str | None = None, quiet_s: float = QUIET_S,
         window: int = WINDOW) -> Takeover:
    """What taking the flow over would do; reads the clusters, changes nothing. `group`: the consumer group of a
    MirrorMaker 1 or Go mirror maker (`mirror` mm1), whose committed offsets on the source say what it copied;
    `window`: how many of each remote partition's last records are searched for the copy of its last committed
    record (MirrorMaker 1), or matched from the oldest sync among them (MirrorMaker 2)."""
    if mirror not in MIRRORS:
        raise ConfigError(f"--from {mirror}: expected one of {', '.join(MIRRORS)}")
    if (mirror == "mm1") != (group is not None):
        raise ConfigError("--group: the consumer group of the MirrorMaker 1 or Go mirror maker, with --from mm1 only")
    flow = link.flow
    source_counts, _ = admin_sync.partition_counts(link.source_admin, flow.source)
    target_counts, _ = admin_sync.partition_counts(link.target_admin, flow.target)
    partitions = link.replicated_partitions(source_counts, heartbeats=True)
    remote = {tp: (link.remote_topic(tp[0]), tp[1]) for tp in partitions}
    present = [r for r in remote.values() if r[1] < target_counts.get(r[0], 0)]

    def ends() -> dict[TopicPartition, int]:
        return admin_sync.offsets(link.target_admin, flow.target, present,
                                  OffsetSpec.latest())  # type: ignore[no-untyped-call]

    before = ends()
    if group is None:
        names = mm2_state.MM2Names.of(link.config, link.flow)
        stopped, running = _mm2_stopped(link, names)
    else:
        stopped, running = _group_stopped(link, group)
    if running is None:
        running = _quiet(before, ends, quiet_s, stopped)
    if running is not None:  # nothing read that its next copies would change
        return Takeover(flow.name, MIRRORS[mirror], tuple(stopped), running, ())
    target_ends = ends()
    if group is None:
        committed = mm2_state.committed_offsets(link.settings("target", "consumer"), names.offsets_topic,
                                                target_counts.get(names.offsets_topic, 0), flow.source)
        syncs = mm2_state.offset_syncs(link.settings("target" if names.syncs_on_target else "source", "consumer"),
                                       names.syncs_topic)
        newest = {tp: max(s, key=lambda a: (a.downstream, a.upstream)) for tp, s in syncs.items() if s}
        # Matched from an older sync when one lies in the window: the longer the matched run, the more of MM2's
        # copies a group's checkpoint translates exactly in (K5); a tail that does not match from there (MM2
        # rewound past it) is matched from the newest.
        oldest = {tp: min((a for a in syncs[tp] if a.downstream >= target_ends.get(remote[tp], 0) - window
                           and a.upstream <= s.upstream and a.downstream <= s.downstream),
                          key=lambda a: (a.downstream, a.upstream), default=s) for tp, s in newest.items()}
        matches = _matches(link, partitions, remote, oldest, target_ends, committed)
        again = [tp for tp, m in matches.items() if m.refused is not None and oldest[tp] != newest[tp]]
        if again:
            matches |= _matches(link, again, remote, newest, target_ends, committed)
    else:
        committed = _group_committed(link, group, partitions)
        syncs, matches = _found(link, remote, committed, target_ends, window)
        committed |= {tp: found[0].upstream for tp, found in syncs.items()}  # its last consumed record
    reset_to = link.source.client_config("consumer").get("auto.offset.reset", "earliest").strip().lower()
    fallback = admin_sync.offsets(link.source_admin, flow.source, partitions,
                                  OffsetSpec.latest() if reset_to == "latest"  # type: ignore[no-untyped-call]
                                  else OffsetSpec.earliest())  # type: ignore[no-untyped-call]
    limit = flow.number("mirrorflow.offset-syncs.anchors.max")
    # MirrorMaker 1 never copied heartbeats: the flow's copies of them start at the source's end.
    beats = [tp for tp in partitions if group is not None and is_heartbeats_topic(flow.policy, tp[0])]
    beats_end = admin_sync.offsets(link.source_admin, flow.source, beats,
                                   OffsetSpec.latest())  # type: ignore[no-untyped-call]
    plans = [PartitionPlan(t, p, None, None, target_ends.get(remote[(t, p)], 0), beats_end[(t, p)], 0, 0, None)
             for t, p in beats]
    for t, p in (tp for tp in partitions if tp not in beats_end):
        found = group is None or (t, p) not in committed or (t, p) in matches
        plans.append(plan_partition(t, p, committed=committed.get((t, p)), syncs=syncs.get((t, p), []),
                                    target_end=target_ends.get(remote[(t, p)], 0), match=matches.get((t, p)),
                                    fallback=fallback[(t, p)], limit=limit) if found else
                     PartitionPlan(t, p, committed[(t, p)], None, target_ends.get(remote[(t, p)], 0), 0, 0, 0,
                                   f"the copy of source offset {committed[(t, p)]} (the group's last consumed "
                                   f"record) is not among the remote partition's last {window} records"))
    return Takeover(flow.name, MIRRORS[mirror], tuple(stopped), running, tuple(plans))


def _mm2_stopped(link: FlowLink, names: mm2_state.MM2Names) -> tuple[list[str], str | None]:
    """How MirrorMaker 2 is known to be stopped, and why it is not (None when it is)."""
    flow = link.flow
    stopped: list[str] = []
    state = mm2_state.worker_group_state(link.target_admin, names.worker_group, flow.target)
    if state is not None:
        return stopped, f"its worker group {names.worker_group} on {flow.target} has {state}; stop it first"
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
    return stopped, None


def _group_stopped(link: FlowLink, group: str) -> tuple[list[str], str | None]:
    """How a MirrorMaker 1 or Go mirror maker is known to be stopped: its consumer group on the source is empty."""
    flow = link.flow
    state = mm2_state.worker_group_state(link.source_admin, group, flow.source)
    if state is not None:
        return [], f"its consumer group {group} on {flow.source} has {state}; stop it first"
    return [f"its consumer group {group} on {flow.source} has no member"], None


def _quiet(before: Mapping[TopicPartition, int], ends: Callable[[], dict[TopicPartition, int]], quiet_s: float,
           stopped: list[str]) -> str | None:
    """None when no remote partition grows for `quiet_s` (said in `stopped`), else which one did."""
    time.sleep(quiet_s)
    after = ends()
    grown = [(tp, before.get(tp, 0), n) for tp, n in sorted(after.items()) if n != before.get(tp, 0)]
    if grown:
        (t, p), was, now = grown[0]
        return f"remote partition {t}-{p} went from {was} to {now} records within {quiet_s:.0f} s"
    stopped.append(f"no remote partition grew in {quiet_s:.0f} s")
    return None


def _group_committed(link: FlowLink, group: str, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
    """The source offset of the last record the group consumed, per partition it committed (its offset - 1)."""
    wanted = ConsumerGroupTopicPartitions(group, [confluent_kafka.TopicPartition(t, p) for t, p in partitions])
    try:
        answer = link.source_admin.list_consumer_group_offsets(
            [wanted], request_timeout=admin_sync.TIMEOUT_S)[group].result(admin_sync.TIMEOUT_S)
    except (KafkaException, TimeoutError) as exc:
        why = exc.args[0].str() if isinstance(exc, KafkaException) else "no answer"
        raise OperationalError(f"cannot read the offsets of consumer group {group} on {link.flow.source}: "
                               f"{why}") from None
    return {(tp.topic, tp.partition): tp.offset - 1 for tp in answer.topic_partitions or [] if tp.offset > 0}


def _matches(link: FlowLink, partitions: Sequence[TopicPartition], remote: Mapping[TopicPartition, TopicPartition],
             newest: Mapping[TopicPartition, Anchor], target_ends: Mapping[TopicPartition, int],
             committed: Mapping[TopicPartition, int]) -> dict[TopicPartition, TailMatch]:
    """Each partition's tail (from the sync given, `newest`, to its end) matched with the source after that sync."""
    starts = admin_sync.offsets(link.source_admin, link.flow.source, [tp for tp in partitions if tp in newest],
                                OffsetSpec.earliest())  # type: ignore[no-untyped-call]
    gone = {tp: TailMatch(newest[tp].upstream, None, 0, 0, 0, 0,
                          f"the source's log starts at {start}, past the newest offset sync's source offset "
                          f"{newest[tp].upstream}: the records to match the target's copies with are deleted")
            for tp, start in starts.items() if start > newest[tp].upstream}
    synced = [tp for tp in partitions if tp in newest and tp not in gone]
    spans = {tp: (newest[tp].downstream, target_ends.get(remote[tp], 0)) for tp in synced}
    with ThreadPoolExecutor(1) as pool:  # both clusters read at once (a tail holds at most its span's records)
        reading = pool.submit(_target_records, link, remote, spans)
        source, source_next = _source_records(link, {tp: newest[tp].upstream for tp in synced},
                                              {tp: max(0, end - start) for tp, (start, end) in spans.items()})
        tails = reading.result()
    return {**gone, **{tp: match_tail(tails[tp], source[tp], source_next[tp], committed.get(tp)) for tp in synced}}


def _found(link: FlowLink, remote: Mapping[TopicPartition, TopicPartition], committed: Mapping[TopicPartition, int],
           target_ends: Mapping[TopicPartition, int], window: int
           ) -> tuple[dict[TopicPartition, list[Anchor]], dict[TopicPartition, TailMatch]]:
    """K6 for every partition the group committed: the copy of its last consumed record in the remote partition's
    last `window` records, as a sync, and the tail matched from there."""
    ends = {tp: target_ends.get(remote[tp], 0) for tp in committed}
    windows = _target_records(link, remote, {tp: (max(0, end - window), end) for tp, end in ends.items()})
    # The group's offset minus one may be a transaction marker: read from a little before it and start at the last
    # record below the offset.
    source, source_next = _source_records(link, {tp: max(0, at - LOOK_BACK) for tp, at in committed.items()},
                                          {tp: len(windows[tp]) + LOOK_BACK + 1 for tp in committed})
    syncs, matches = {}, {}
    for tp, at in committed.items():
        below = [i for i, c in enumerate(source[tp]) if c.offset <= at]
        if not below:
            continue
        found = find_last_copy(windows[tp], source[tp][below[-1]:], source_next[tp], source[tp][below[-1]].offset)
        if found is not None:
            syncs[tp], matches[tp] = [found[0]], found[1]
    return syncs, matches


def _target_records(link: FlowLink, remote: Mapping[TopicPartition, TopicPartition],
                    spans: Mapping[TopicPartition, tuple[int, int]]) -> dict[TopicPartition, list[Content]]:
    """The remote partitions' records in [start, end), by source partition, read with one consumer."""
    on_target = {remote[tp]: span for tp, span in spans.items()}
    back = {remote[tp]: tp for tp in spans}
    out: dict[TopicPartition, list[Content]] = {tp: [] for tp in spans}
    for m in read_to_ends(link.settings("target", "consumer"), list(on_target), "remote partitions' tails",
                          spans=on_target):
        out[back[(m.topic() or "", m.partition() or 0)]].append(Content(m.offset() or 0, fingerprint(m)))
    return out


def _source_records(link: FlowLink, starts: Mapping[TopicPartition, int], wanted: Mapping[TopicPartition, int]
                    ) -> tuple[dict[TopicPartition, list[Content]], dict[TopicPartition, int]]:
    """At least `wanted` source records of each partition from its start (fewer where the partition ends), as the
    flow reads them, and the offset after the last one read."""
    source: dict[TopicPartition, list[Content]] = {tp: [] for tp in starts}
    source_next = dict(starts)
    source_ends = admin_sync.offsets(link.source_admin, link.flow.source, list(starts),
                                     OffsetSpec.latest())  # type: ignore[no-untyped-call]
    isolation = "read_committed" if link.reads_committed else "read_uncommitted"
    short = [tp for tp in starts if wanted[tp]]
    while short:  # a window at a time: transaction markers and compaction holes make offsets outrun records
        spans = {tp: (source_next[tp], source_next[tp] + 2 * (wanted[tp] - len(source[tp])) + 64) for tp in short}
        for m in read_to_ends(link.settings("source", "consumer"), short, "source records", spans=spans,
                              isolation=isolation):
            source[(m.topic() or "", m.partition() or 0)].append(Content(m.offset() or 0, fingerprint(m)))
        for tp in short:
            source_next[tp] = min(spans[tp][1], source_ends.get(tp, 0))
        short = [tp for tp in short if len(source[tp]) < wanted[tp] and source_next[tp] < source_ends.get(tp, 0)]
    return source, source_next


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
