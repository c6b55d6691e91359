"""Backfill: copy a bounded source range to the target once, with the stream's fidelity.

The records go through the stream's own copier and writer (spark/copier, spark/stream_writer): same partition,
key, value, headers and timestamp, a provenance header, source order within each partition, no record through the
JVM. What the target already holds is skipped: every source offset that this hop's provenance header attributes to
a copy on the target (the audit's attribution, read by Spark) is left out of the ranges read or skipped by the
writer (batch_plan P5), so a second run over the same range writes nothing.

Hand-over with the stream, enforced rather than advised:
  - the backfill holds the flow's lease while it writes, so the stream cannot run at the same time (a running
    stream makes the backfill refuse; `pause` stops it cleanly first and asks it to run again after);
  - a partition the flow has read (it has a position in the offset syncs) is the stream's from that position
    on: the backfill writes only below it (a repair). Repaired records are appended after later ones, so they
    get no offset syncs: translation stays monotonic, and those offsets translate as before;
  - a partition the flow has never read is seeded: its records are written in order, with offset syncs, and
    its position is set to the range's end, so the stream continues exactly there (no gap, no duplicate).
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from confluent_kafka.admin import OffsetSpec

from mirrorflow.errors import ConfigError, OperationalError
from mirrorflow.jobs import audit, lifecycle, ranges
from mirrorflow.jobs.audit_report import aligned
from mirrorflow.jobs.ranges import SourceRange, Window
from mirrorflow.kafka import admin_sync, flow_lease
from mirrorflow.kafka.flow_lease import FlowLease
from mirrorflow.kafka.link import FlowLink
from mirrorflow.model.config import Cluster
from mirrorflow.rules import batch_plan, provenance
from mirrorflow.rules.anchors import PartitionAnchors
from mirrorflow.rules.offset_syncs import AnchorRecord, Position
from mirrorflow.rules.partition_report import PartitionReport
from mirrorflow.spark import copier, spark_session
from mirrorflow.spark.writer_spec import WriterSpec

log = logging.getLogger(__name__)
SEED, REPAIR = "seed", "repair"


@dataclass(frozen=True)
class PartitionBackfill:
    topic: str
    partition: int
    start: int
    end: int  # exclusive: what was covered
    requested_end: int  # the request's end; beyond `end` the offsets are the stream's
    mode: str  # seed: the flow had never read it (syncs written, position set); repair: below the position
    written: int
    refused: int = 0  # records that came from the target topic they would be written to (never written)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True)
class BackfillReport:
    flow: str
    window: str
    partitions: tuple[PartitionBackfill, ...]
    seconds: float
    paused: bool

    @property
    def written(self) -> int:
        return sum(p.written for p in self.partitions)

    @property
    def refused(self) -> int:
        return sum(p.refused for p in self.partitions)

    def summary(self) -> str:
        covered = sum(p.end - p.start for p in self.partitions)
        left = [p for p in self.partitions if p.requested_end > p.end]
        tail = (f"; offsets from the flow's position on left to the stream in {len(left)} partitions "
                f"(e.g. {left[0].name} from {left[0].end})" if left else "")
        if self.refused:
            tail += f"; {self.refused} refused: they came from the target topic they would be written to"
        return (f"backfill {self.flow} ({self.window}): wrote {self.written} records over {covered} offsets in "
                f"{len(self.partitions)} partitions in {self.seconds:.1f} s; everything else was already on the "
                f"target{tail}")

    def table(self) -> str:
        rows = [("partition", "mode", "range", "written", "refused")]
        rows += [(p.name, p.mode, f"{p.start}-{p.end}", str(p.written), str(p.refused)) for p in self.partitions]
        return "\n".join([*aligned(rows, left=(0, 1, 2)), "", self.summary()])

    def as_dict(self) -> dict[str, Any]:
        as_json: dict[str, Any] = json.loads(json.dumps({**asdict(self), "written": self.written,
                                                         "refused": self.refused, "summary": self.summary()}))
        return as_json


def run(link: FlowLink, *, topics: str | None = None, window: Window = ranges.EVERYTHING,
        from_offsets: Mapping[str, Mapping[int, int]] | None = None, pause: bool = False,
        master: str = "local[*]", spark: Any = None) -> BackfillReport:
    """Backfill the requested range of one flow; see the module's contract for the hand-over with the stream."""
    flow = link.flow
    audit.require_provenance(flow, "backfill")
    if from_offsets is None and window.from_ms is None:
        raise ConfigError("backfill needs where to start: start offsets or a from time")
    # The stream's copier and writer: what they refuse, refused before anything is paused or written.
    link.check_clients()
    link.ensure_syncs_topic()
    begun = time.monotonic()
    resume = _pause(link, pause)
    lease = link.lease()
    holding: _Holding | None = None
    try:
        lease.acquire(wait_s=10.0)
        holding = _Holding(lease)
        planned = ranges.plan(link, topics=topics, window=window, from_offsets=from_offsets)
        jobs = [(r if r.mirrored is None else ranges.below(r, r.mirrored), r) for r in planned]
        written = _write(link, [j for j, _ in jobs], spark, master)
        if lease.lost:
            raise OperationalError(f"flow {flow.name}: the backfill lost the flow's lease while writing (target "
                                   "unreachable for a session?): a stream may have run meanwhile; audit the range")
        _set_seed_positions(link, [j for j, _ in jobs if j.mirrored is None], written)
    finally:
        if holding is not None:
            holding.stop()
        lease.release()
        if resume:
            lifecycle.start(link, "backfill finished")
    partitions = tuple(PartitionBackfill(j.topic, j.partition, j.start, j.end, r.end,
                                         SEED if j.mirrored is None else REPAIR,
                                         w.records if (w := written.get((j.topic, j.partition))) else 0,
                                         w.refused if w else 0)
                       for j, r in jobs)
    return BackfillReport(flow.name, _label(window, from_offsets), partitions, time.monotonic() - begun, resume)


def _label(window: Window, from_offsets: Mapping[str, Mapping[int, int]] | None) -> str:
    if from_offsets is None:
        return window.label()
    return "from the offsets given" + ("" if window.to_ms is None else f" to {ranges.clock(window.to_ms)}")


def _pause(link: FlowLink, pause: bool) -> bool:
    """Make sure no stream of the flow runs; True when it was stopped here and should run again after."""
    flow = link.flow
    holders = flow_lease.holders(link.target_admin, flow.name)
    if not holders:
        return False
    if not pause:
        raise OperationalError(f"flow {flow.name} is running ({', '.join(holders)}): a backfill writes only while "
                               f"the stream is stopped; stop it (mirrorflow stop --flow {flow.name}) or pass --pause")
    wanted = lifecycle.requested(link)
    lifecycle.stop(link, "paused for a backfill")
    log.info("flow %s: stream stopped for the backfill", flow.name)
    return wanted.state == lifecycle.RUNNING


class _Holding:
    """Serves the lease's group protocol while the job runs (a consumer that stops polling leaves its group)."""

    def __init__(self, lease: FlowLease) -> None:
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(lease,), name="mirrorflow-backfill-lease",
                                        daemon=True)
        self._thread.start()

    def _serve(self, lease: FlowLease) -> None:
        while not self._done.wait(1.0):
            if not lease.keep():
                log.error("backfill: the flow's lease was lost (target unreachable for a session?)")
                return

    def stop(self) -> None:
        self._done.set()
        self._thread.join(5)


def _write(link: FlowLink, jobs: Sequence[SourceRange], spark: Any, master: str
           ) -> dict[tuple[str, int], PartitionReport]:
    """Write every source record of the jobs the target does not hold, with the stream's copier (one task per
    slot, no record through the JVM); the writer's summary per partition."""
    todo = [j for j in jobs if j.size > 0]
    if not todo:
        return {}
    flow = link.flow
    counts, _ = admin_sync.partition_counts(link.source_admin, flow.source)
    admin_sync.ensure_remote_topics(flow, link.source_admin, link.target_admin,
                                    {j.topic: counts[j.topic] for j in todo})
    spark = spark or spark_session.build(f"mirrorflow backfill {flow.name}", master)
    copied = copied_intervals(spark, link, todo)
    starts, ends = {}, {}
    for j in todo:
        tp = (j.topic, j.partition)
        span = batch_plan.uncovered_span(j.start, j.end, copied.get(tp, ()))
        if span is not None:
            starts[tp], ends[tp] = span
    slots = batch_plan.slot_ranges(starts, ends, spark.sparkContext.defaultParallelism)
    if not slots:
        return {}
    # At-least-once, the backfill's records are idempotent, not fenced: it holds the lease, no stream writes.
    spec = WriterSpec.of(
        link, remote={j.topic: j.remote for j in todo}, upstream_next={}, downstream_next={},
        ends={(j.topic, j.partition): j.end for j in todo}, provenance=True, transactional=link.exactly_once,
        replay=True, exact_reports=True,
        unsynced=frozenset((j.topic, j.partition) for j in todo if j.mirrored is not None),
        copied={tp: tuple(c) for tp, c in copied.items() if tp in starts}, fenced=time.time_ns())
    reports: list[PartitionReport] = (spark.sparkContext.range(len(slots), numSlices=len(slots))
                                      .mapPartitions(functools.partial(copier.copy_slots, spec, slots)).collect())
    return {r.tp: r for r in reports}


def _set_seed_positions(link: FlowLink, seeds: Sequence[SourceRange],
                        written: Mapping[tuple[str, int], PartitionReport]) -> None:
    """A seeded partition's position moves to its range's end: the stream starts there."""
    if not seeds:
        return
    flow, target, admin, syncs_topic = link.flow, link.target, link.target_admin, link.syncs_topic
    counts, _ = admin_sync.partition_counts(admin, target.alias)  # remote topics may be new since the plan
    remote = [(s.remote, s.partition) for s in seeds if s.partition < counts.get(s.remote, 0)]
    ends = admin_sync.offsets(admin, target.alias, remote, OffsetSpec.latest())  # type: ignore[no-untyped-call]
    producer = link.durable_producer()
    for s in seeds:
        position = Position(s.topic, s.partition, s.end, ends.get((s.remote, s.partition)))
        producer.produce(syncs_topic, position.value(), position.key(), partition=0)
        report = written.get((s.topic, s.partition))
        if report is not None and report.first is not None and report.last is not None:
            # The seed is the partition's first write: its origin, and a barrier (a retried task may repeat).
            store = PartitionAnchors(flow.number("mirrorflow.offset-syncs.anchors.max"),
                                     flow.number("mirrorflow.offset-syncs.anchors.spacing"))
            store.record_batch(report.first, report.last, replay=True, fresh=True, records=report.records)
            for slot, anchor in store.drain():
                record = AnchorRecord(s.topic, s.partition, slot, anchor)
                producer.produce(syncs_topic, record.value(), record.key(), partition=0)
    if producer.flush(60) > 0:
        raise OperationalError(f"flow {flow.name}: offset syncs not acknowledged by {target.alias}")


# -- what the target holds already (Spark's Kafka source) -------------------------------------------

def _hop_of(cluster: str) -> str:
    """SQL: header `h` is a provenance hop that started on `cluster`."""
    start = provenance.prefix(cluster).decode().replace("'", "\\'")
    return f"h.key = '{provenance.HEADER}' AND startswith(CAST(h.value AS STRING), '{start}')"


def target_copies(spark: Any, link: FlowLink, planned: Sequence[SourceRange]) -> Any:
    """Every target record from the ranges' floors on that this flow's provenance attributes to a record in a range.

    Columns: the source `topic`, `partition`, `offset`; the copy's `key`, `value`, `timestamp`, its own `headers`
    (this hop's provenance header removed), and where it is (`at_topic`, `at_partition`, `at_offset`).
    """
    floors: dict[tuple[str, int], int] = {}
    for r in planned:
        if r.target_floor is not None and r.size > 0:
            key = (r.remote, r.partition)
            floors[key] = min(floors.get(key, r.target_floor), r.target_floor)
    if not floors:
        return None
    copies = _attributed(spark, link, floors)
    bounds = spark.createDataFrame([(r.topic, r.partition, r.start, r.end) for r in planned if r.size > 0],
                                   "topic string, partition int, range_start long, range_end long")
    from pyspark.sql.functions import broadcast

    return (copies.join(broadcast(bounds), ["topic", "partition"])
            .where("offset >= range_start AND offset < range_end").drop("range_start", "range_end"))


def copied_intervals(spark: Any, link: FlowLink, planned: Sequence[SourceRange]
                     ) -> dict[tuple[str, int], list[tuple[int, int]]]:
    """Per source partition, the offsets of the ranges that have a copy on the target (target_copies), as ascending
    [from, until) intervals: consecutive offsets are numbered in one island (offset minus its rank)."""
    copies = target_copies(spark, link, planned)
    if copies is None:
        return {}
    from pyspark.sql.functions import expr

    rows = (copies.select("topic", "partition", "offset").distinct()
            .selectExpr("*", "offset - row_number() OVER (PARTITION BY topic, partition ORDER BY offset) AS island")
            .groupBy("topic", "partition", "island").agg(expr("min(offset) AS first"), expr("count(*) AS copies"))
            .collect())
    out: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for r in sorted(rows, key=lambda r: (r["topic"], r["partition"], r["first"])):
        out.setdefault((r["topic"], r["partition"]), []).append((r["first"], r["first"] + r["copies"]))
    return out


def _attributed(spark: Any, link: FlowLink, floors: Mapping[tuple[str, int], int]) -> Any:
    """Every record of the remote partitions from their floors on that this flow's provenance attributes to a
    source record: its `topic`, `partition`, `offset`, the copy's `key`, `value`, `timestamp`, its own `headers`
    (this hop's header removed), and where it is (`at_topic`, `at_partition`, `at_offset`)."""
    assign: dict[str, list[int]] = {}
    starting: dict[str, dict[str, int]] = {}
    for (t, p), floor in sorted(floors.items()):
        assign.setdefault(t, []).append(p)
        starting.setdefault(t, {})[str(p)] = floor
    raw = _read(spark, link.target, assign, json.dumps(starting), "latest", committed=True)
    attributed = raw.selectExpr(
        "topic AS at_topic", "partition AS at_partition", "offset AS at_offset", "key", "value", "timestamp",
        "headers", f"try_element_at(filter(headers, h -> {_hop_of(link.flow.source)}), -1) AS hop",
    ).where("hop IS NOT NULL").selectExpr(
        "*", "split(CAST(hop.value AS STRING), '/') AS hop_parts")
    return attributed.selectExpr(
        "try_element_at(hop_parts, -3) AS topic", "try_cast(try_element_at(hop_parts, -2) AS INT) AS partition",
        "try_cast(try_element_at(hop_parts, -1) AS BIGINT) AS offset", "key", "value", "timestamp",
        # The stream appends this hop's header last: what is left are the source record's own headers.
        "IF(try_element_at(headers, -1) = hop, slice(headers, 1, size(headers) - 1), headers) AS headers",
        "at_topic", "at_partition", "at_offset")


def _read(spark: Any, cluster: Cluster, assign: Mapping[str, list[int]], starting: str, ending: str,
          committed: bool = False) -> Any:
    overrides = {"isolation.level": "read_committed"} if committed else {}
    reader = spark.read.format("kafka")
    options = {**spark_session.kafka_options(cluster, **overrides), "assign": json.dumps(assign),
               "startingOffsets": starting, "endingOffsets": ending, "includeHeaders": "true",
               # Retention may remove the oldest records between planning and reading: read what is there.
               "failOnDataLoss": "false"}
    # A batch read wants large fetches: with 1 MiB per partition and a 64 KiB socket buffer a 1 KiB-record read
    # ran at about 100k records/s here, at about 130k with these (the cluster's own consumer settings win).
    for key, value in _BATCH_FETCH.items():
        options.setdefault(key, value)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


_BATCH_FETCH = {"kafka.max.partition.fetch.bytes": str(16 << 20), "kafka.fetch.max.bytes": str(64 << 20),
                "kafka.receive.buffer.bytes": str(4 << 20)}
