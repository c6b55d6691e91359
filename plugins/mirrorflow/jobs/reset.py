"""`mirrorflow reset`: move where a flow resumes a topic's partitions, on purpose and on the record.

Only while the flow's stream is stopped (the command takes the flow's lease for the time it writes). Each
partition's position in the offset syncs moves to the wanted source offset: earlier re-mirrors records (the
stream's first batch after a reset is a replay, so translation stays exact), later skips them. The anchors
stay: they name copies that exist on the target. A reset record tells the next stream that its Spark
checkpoint is older than the positions, so it starts a new checkpoint at them. Every move is logged.

A topic whose remote topic was deleted or re-created on the target (the stream holds it) is released by a
reset of all its partitions: its anchors are tombstoned and its positions say nothing was written there yet,
so the stream creates the remote topic again (if missing) and writes its copies from the remote's end.
"""

from __future__ import annotations

import getpass
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import OffsetSpec

from mirrorflow.errors import ConfigError, OperationalError
from mirrorflow.kafka import admin_sync, offset_sync_log, writers
from mirrorflow.kafka.flow_lease import DELIVERY_TIMEOUT_MS, FlowLease, LeaseGuard
from mirrorflow.kafka.link import FlowLink
from mirrorflow.model import selection
from mirrorflow.rules.offset_syncs import AnchorRecord, Position, Release, Reset

log = logging.getLogger(__name__)
EARLIEST, LATEST = "earliest", "latest"


@dataclass(frozen=True)
class PartitionReset:
    topic: str
    partition: int
    before: int | None  # the position before; None: the flow had never read the partition
    after: int

    def line(self) -> str:
        before = "never read" if self.before is None else str(self.before)
        return f"{self.topic}-{self.partition}: {before} -> {self.after}"


def parse_to(text: str) -> str | int:
    """`--to`: earliest, latest, or a non-negative source offset."""
    value = text.strip().lower()
    if value in (EARLIEST, LATEST):
        return value
    if value.isdigit():
        return int(value)
    raise ConfigError(f"reset position {text!r}: expected earliest, latest or a source offset")


def reset(link: FlowLink, topic: str, to: str | int, partitions: list[int] | None = None,
          reason: str = "") -> list[PartitionReset]:
    """Move the flow's positions of `topic` (all partitions, or `partitions`) to `to`; the moves made."""
    flow, source = link.flow, link.source
    source_admin = link.source_admin
    counts, _ = admin_sync.partition_counts(source_admin, source.alias)
    if topic not in counts:
        raise ConfigError(f"topic {topic}: no such topic on {flow.source}")
    if not selection.replicates(flow, topic):
        raise ConfigError(f"topic {topic}: flow {flow.name} does not replicate it")
    wanted = sorted(set(partitions)) if partitions is not None else list(range(counts[topic]))
    beyond = [p for p in wanted if not 0 <= p < counts[topic]]
    if beyond:
        raise ConfigError(f"partition {beyond[0]}: {flow.source} topic {topic} has {counts[topic]} partitions")
    tps = [(topic, p) for p in wanted]
    starts = admin_sync.offsets(source_admin, source.alias, tps, OffsetSpec.earliest())  # type: ignore[no-untyped-call]
    ends = admin_sync.offsets(source_admin, source.alias, tps, OffsetSpec.latest())  # type: ignore[no-untyped-call]
    targets = {tp: _resolve(to, starts[tp], ends[tp], tp) for tp in tps}

    remote_gone = ""
    moves: list[PartitionReset] = []

    def records(syncs: offset_sync_log.SyncsState) -> list[SyncsWrite]:
        nonlocal remote_gone, moves
        positions = syncs.positions
        remote_gone = _remote_gone(link, topic, counts[topic], syncs)
        if remote_gone and len(tps) < counts[topic]:
            raise ConfigError(f"{remote_gone}: reset every partition of {topic}, not some")
        moves = [PartitionReset(t, p, positions[(t, p)].upstream_next if (t, p) in positions else None,
                                targets[(t, p)]) for t, p in tps]
        out: list[SyncsWrite] = [
            Position(m.topic, m.partition, m.after, positions[(m.topic, m.partition)].downstream_next
                     if (m.topic, m.partition) in positions and not remote_gone else None) for m in moves]
        if remote_gone:  # the anchors name copies in a topic that is no more
            out += [AnchorRecord(t, p, slot, None) for t, p in tps for slot in syncs.anchors.get((t, p), {})]
        return out

    write_positions(link, "reset", records)
    who = getpass.getuser()
    if remote_gone:
        log.warning("flow %s: %s: its copies start again in a new remote topic", flow.name, remote_gone)
    for m in moves:
        log.warning("flow %s: reset by %s%s: %s", flow.name, who, f" ({reason})" if reason else "", m.line())
    return moves


SyncsWrite = Position | Reset | Release | AnchorRecord


def write_positions(link: FlowLink, what: str,
                    records: Callable[[offset_sync_log.SyncsState], list[SyncsWrite]]) -> None:
    """Write what `records` makes of the flow's offset syncs, with a reset and a release record, in one transaction of
    the stream driver's id, while the flow's stream is stopped: the command holds the flow's lease meanwhile (it
    raises while a stream runs: a move under a running stream would be undone), waits out a stream that did not stop
    cleanly and fences its task slots' ids, then reads the offset syncs whole and hands them to `records`."""
    flow = link.flow
    syncs_topic = link.syncs_topic
    lease = link.lease()
    lease.acquire(wait_s=10.0)
    try:
        # In transactions of the stream driver's id: initialising it fences a frozen stream's driver (W4).
        producer = link.driver_producer()
        syncs = offset_sync_log.read(link.settings("target", "consumer"), syncs_topic)
        clean = syncs.release is not None or (not syncs.positions and syncs.writers is None)  # or never ran
        lease.wait_out_previous_writer(clean)  # a stream that did not stop cleanly: its last writes land or expire
        _confirm(lease, link)
        try:
            producer.init_transactions(admin_sync.TIMEOUT_S)
        except KafkaException as exc:
            raise OperationalError(f"flow {flow.name}: cannot initialise the stream driver's transactional id on "
                                   f"{flow.target}: {exc.args[0].str()}; run the {what} again") from None
        if not clean:
            # W4: the stream's transactions abort, none commits after these positions. The slots a frozen driver
            # recorded while this command waited count too.
            before = syncs.writers.slots if syncs.writers is not None else 0
            syncs = offset_sync_log.read(link.settings("target", "consumer"), syncs_topic)
            slots = max(before, syncs.writers.slots if syncs.writers is not None else 0)

            def still_held() -> bool:  # W1 while fencing: never fence the slots of a stream that took over
                _confirm(lease, link)
                return lease.keep()

            _confirm(lease, link)
            writers.fence(flow.name, flow.target, link.settings("target", "producer"),
                          [writers.transactional_id(flow.source, flow.target, i) for i in range(slots)], still_held)
            syncs = offset_sync_log.read(link.settings("target", "consumer"), syncs_topic)
        writes = records(syncs)
        writes.append(Reset(int(time.time() * 1000)))
        writes.append(Release(int(time.time() * 1000)))  # all of it acknowledged, or the command fails
        _confirm(lease, link)
        failed: list[str] = []
        try:
            producer.begin_transaction()
            for record in writes:
                producer.produce(syncs_topic, record.value(), record.key(), partition=0,
                                 on_delivery=lambda err, _msg: failed.append(err.str()) if err is not None else None)
            if producer.flush(admin_sync.TIMEOUT_S) > 0 or failed:
                raise OperationalError(f"flow {flow.name}: the {what} was not acknowledged by {flow.target} within "
                                       f"{DELIVERY_TIMEOUT_MS / 1000:.0f} s" + (f" ({failed[0]})" if failed else "")
                                       + "; run it again")
            producer.commit_transaction(admin_sync.TIMEOUT_S)
        except KafkaException as exc:
            raise OperationalError(f"flow {flow.name}: the {what} was not committed on {flow.target}: "
                                   f"{exc.args[0].str()}; run it again") from None
    finally:
        lease.release()


def _remote_gone(link: FlowLink, topic: str, partitions: int, syncs: offset_sync_log.SyncsState) -> str:
    """Why the topic's remote topic no longer holds the flow's copies (deleted, or re-created / truncated: it
    ends below where the next copy would land), or "" when it does."""
    flow, target_admin = link.flow, link.target_admin
    remote = link.remote_topic(topic)
    next_at = {p: syncs.positions[(topic, p)].downstream_next for p in range(partitions)
               if (topic, p) in syncs.positions}
    written = {p: at for p, at in next_at.items() if at is not None}
    if not written:
        return ""
    counts, _ = admin_sync.partition_counts(target_admin, flow.target)
    if remote not in counts:
        return f"remote topic {remote} was deleted on {flow.target}"
    present = [(remote, p) for p in written if p < counts[remote]]
    ends = admin_sync.offsets(target_admin, flow.target, present, OffsetSpec.latest())  # type: ignore[no-untyped-call]
    behind = [p for p in written if (remote, p) in ends and ends[(remote, p)] < written[p]]
    if behind:
        return f"remote topic {remote} was re-created or truncated on {flow.target}"
    return ""


def _confirm(lease: FlowLease, link: FlowLink) -> None:
    """W1: the reset writes or initialises a transactional id only while it holds the lease."""
    if lease.member_id is not None:
        LeaseGuard.confirm(link.name, lease.member_id, link.settings("target", "admin"))


def _resolve(to: str | int, start: int, end: int, tp: tuple[str, int]) -> int:
    if to == EARLIEST:
        return start
    if to == LATEST:
        return end
    assert isinstance(to, int)
    if not start <= to <= end:
        raise ConfigError(f"reset position {to}: {tp[0]}-{tp[1]} holds offsets {start}..{end} (its log start to its "
                          "end)")
    return to


def requested_since(syncs: offset_sync_log.SyncsState, marker: str | None) -> bool:
    """True when the offset syncs hold a reset the stream's Spark checkpoint (its `marker`) does not know."""
    return syncs.reset is not None and marker != str(syncs.reset.at_ms)
