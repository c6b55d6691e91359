"""The completeness audit: proof, record by record and by content, that a flow's target holds its source's records.

For the planned ranges (ranges.py) a Spark job reads each side once: the source ranges, and each remote partition
from the range's target floor to its end (read_committed, so aborted copies do not count). Each target record is
attributed to its source record by the provenance header of this hop (`{source}/{topic}/{partition}/{offset}`);
records without one (another writer, provenance off) are not attributed. Both sides are reduced to digests at
once (64-bit xxhash of the key, of the value and of the headers without this hop's provenance header, plus the
timestamp and the partition), so no value crosses the shuffle. One shuffle groups both sides by source
partition, sorted by offset; a streaming pass per partition (`walk`) then classifies every source record:

  mirrored    it has a copy on the target;
  missing     no copy, and the flow's offset syncs say the flow has read past it;
  behind      no copy, and the flow has not read it yet (the stream is behind: not counted as missing);
  duplicated  more than one copy;
  differing   some copy's key, value, headers, timestamp or partition differs from the source;
  refused     a provenance hop names the target's very topic the record would be written to: the stream
              refuses it (it would loop), so it is counted here, not expected on the target.

Copies of offsets with no source record in the range (compacted or expired since) are counted as `unexpected`.

Digest pass first (digests.py): where the stream recorded digest units from a range's start on, one read of the
target counts each unit's copies and XORs their digests; a unit that matches is proven (its records mirrored once,
with identical content) without reading the source. The walk above then covers only what is left: the range from
the first unit that does not match (or from the start, when no unit holds it), so a mismatch is always named
record by record. The proven units may reach a little past the range on either side; the report's range says so.
The digest pass trusts that the stream's copier read every record of its batches: the units are the writer's own
account of what it wrote, so a record the copier never read is in no unit and the pass cannot see it. `full` reads
every record on both sides instead. Both sides are read with Spark's Kafka source.
Only per-partition tallies and the first examples reach the driver.
The audit is complete when nothing is missing or differs; duplicates are reported, and fail it only for an
exactly-once target, where they break the guarantee (at-least-once allows them by design).

Invariants of `walk`, each tested:
  A. every source record of a range is counted exactly once as mirrored, missing, behind or refused;
  B. missing and duplicated ranges are maximal runs of consecutive source records, in offset order.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa

from mirrorflow.errors import ConfigError
from mirrorflow.jobs import ranges
from mirrorflow.jobs.audit_report import EXAMPLES, AuditReport, Difference, PartitionAudit
from mirrorflow.jobs.ranges import SourceRange, Window
from mirrorflow.kafka import clients
from mirrorflow.kafka.link import FlowLink
from mirrorflow.model.config import Cluster, Flow
from mirrorflow.rules import digests, provenance
from mirrorflow.spark import spark_session
from mirrorflow.spark.schemas import ddl

_SOURCE, _COPY, _REFUSED = 0, 1, 2  # the `side` of a row: a source record, a target copy, a refused source record
_FIELDS = ("key", "value", "headers", "timestamp", "partition")
_DIGESTS = ("kd", "vd", "hd", "ts", "at_partition")
_COLUMNS = ("topic", "partition", "offset", "side", *_DIGESTS, "at_offset")
_RESULT = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("source_records", pa.int64()),
    ("mirrored_records", pa.int64()), ("copies", pa.int64()), ("unexpected", pa.int64()),
    ("missing", pa.int64()), ("missing_ranges", pa.string()), ("missing_range_count", pa.int64()),
    ("duplicated", pa.int64()), ("duplicated_ranges", pa.string()), ("duplicated_range_count", pa.int64()),
    ("differing", pa.int64()), ("differences", pa.string()), ("behind", pa.int64()), ("refused", pa.int64()),
])
_RESULT_DDL = ddl(_RESULT)


def run(link: FlowLink, *, topics: str | None = None, window: Window = ranges.EVERYTHING,
        master: str = "local[*]", spark: Any = None, full: bool = False) -> AuditReport:
    """Audit one flow over the window (every retained record by default). Ranges the stream recorded digest units
    for are proven from the target alone; the rest, and any unit whose copies do not match, are read on both sides
    (`full`: everything is)."""
    flow = link.flow
    require_provenance(flow, "audit")
    begun = time.monotonic()
    # A scheduled audit of a flow whose source has no topic to mirror yet (a standby flow) has nothing to compare.
    planned = ranges.plan(link, topics=topics, window=window, allow_empty=topics is None)
    if not planned:
        return AuditReport(flow.name, flow.source, flow.target, window.label(), link.exactly_once,
                           (), time.monotonic() - begun, mode="nothing")
    spark = spark or spark_session.build(f"mirrorflow audit {flow.name}", master)
    units = {} if full else _units(link, planned)
    proven, walked = _digest_pass(spark, link, planned, units)
    rows = {(r["topic"], r["partition"]): r for r in _tallies(spark, link, walked)}
    partitions = tuple(_partition_audit(r, rows.get((r.topic, r.partition)), proven.get((r.topic, r.partition), ()))
                       for r in planned)
    digest_records = sum(u.records + u.refused for chain in proven.values() for u in chain)
    return AuditReport(flow.name, flow.source, flow.target, window.label(), link.exactly_once, partitions,
                       time.monotonic() - begun, mode="digests" if digest_records else "full",
                       digest_records=digest_records)


def _units(link: FlowLink, planned: Sequence[SourceRange]) -> dict[tuple[str, int], list[digests.Unit]]:
    wanted = {(r.topic, r.partition) for r in planned if r.size > 0}
    found = digests.read(value for m in clients.read_to_end(
        link.settings("target", "consumer"), link.digests_topic, "digest units") if (value := m.value()))
    return {tp: units for tp, units in found.items() if tp in wanted}


def _digest_pass(spark: Any, link: FlowLink, planned: Sequence[SourceRange],
                 units: Mapping[tuple[str, int], list[digests.Unit]]
                 ) -> tuple[dict[tuple[str, int], tuple[digests.Unit, ...]], list[SourceRange]]:
    """The units proven per partition (a run from the range's start), and what is left to read on both sides."""
    chains: dict[tuple[str, int], list[digests.Unit]] = {}
    for r in planned:
        if r.size > 0 and r.mirrored is not None and (r.topic, r.partition) in units:
            stop = min(r.end, r.mirrored)
            run = [u for u in digests.chain(units[(r.topic, r.partition)], r.start) if u.first < stop]
            if run:
                chains[(r.topic, r.partition)] = run
    found = _unit_copies(spark, link, planned, chains) if chains else {}
    proven: dict[tuple[str, int], tuple[digests.Unit, ...]] = {}
    walked = []
    for r in planned:
        tp = (r.topic, r.partition)
        run = chains.get(tp, [])
        good: list[digests.Unit] = []
        for u in run:
            if not digests.matches(u, found.get((r.topic, r.partition, u.first))):
                break
            good.append(u)
        proven[tp] = tuple(good)
        if not good:
            walked.append(r)
            continue
        floors = [u.target_first for u in good if u.target_first is not None]
        # No copy of a record after a proven unit lies below that unit's first copy (batches write in order).
        floor = max(r.target_floor, floors[-1]) if floors and r.target_floor is not None else r.target_floor
        walked.append(replace(r, start=min(max(good[-1].next, r.start), r.end), target_floor=floor))
    return proven, walked


def _unit_copies(spark: Any, link: FlowLink, planned: Sequence[SourceRange],
                 chains: Mapping[tuple[str, int], list[digests.Unit]]) -> dict[tuple[str, int, int], dict[str, int]]:
    """Per unit (source topic, partition, first offset): how many copies the target holds of its offsets, and the
    XOR of their digests. One read of each remote partition from its units' first copy."""
    floors: dict[tuple[str, int], int] = {}
    for r in planned:
        run = chains.get((r.topic, r.partition))
        known = [u.target_first for u in run or () if u.target_first is not None]
        if run and r.target_floor is not None:
            floors[(r.remote, r.partition)] = min([r.target_floor, *known]) if known else r.target_floor
    if not floors:
        return {}
    copies = _attributed(spark, link, floors)
    bounds = spark.createDataFrame(
        [(u.topic, u.partition, u.cell, u.first, u.next) for run in chains.values() for u in run],
        "topic string, partition int, cell long, unit_first long, unit_next long")
    from pyspark.sql.functions import bit_xor, broadcast, count

    digest = digests.digest_sql(partition="at_partition")
    rows = (copies.selectExpr("topic", "partition", "offset", f"offset div {digests.CELL} AS cell",
                              f"{digest} AS digest")
            .join(broadcast(bounds), ["topic", "partition", "cell"])
            .where("offset >= unit_first AND offset < unit_next")
            .groupBy("topic", "partition", "unit_first")
            .agg(count("*").alias("records"), bit_xor("digest").alias("xor")).collect())
    return {(r["topic"], r["partition"], r["unit_first"]): {"records": r["records"], "xor": r["xor"]} for r in rows}


def require_provenance(flow: Flow, job: str) -> None:
    if not flow.flag("mirrorflow.provenance.header.enabled"):
        raise ConfigError(f"flow {flow.name}: the {job} attributes target records by their provenance header, "
                          "which this flow does not write (mirrorflow.provenance.header.enabled = false)")


def _partition_audit(r: SourceRange, row: Mapping[str, Any] | None,
                     proven: Sequence[digests.Unit] = ()) -> PartitionAudit:
    """The partition's tallies: the proven units' (every record mirrored once) and the walk's over the rest."""
    start = min(r.start, proven[0].first) if proven else r.start
    end = max(r.end, proven[-1].next) if proven else r.end
    written = sum(u.records for u in proven)
    refused = sum(u.refused for u in proven)
    base = PartitionAudit(r.topic, r.partition, start, end, r.remote, r.mirrored, source_records=written + refused,
                          mirrored_records=written, copies=written, refused=refused, lost=r.lost,
                          lost_ranges=r.lost_ranges)
    if row is None:
        return base
    differences = tuple(Difference(d[0], tuple(d[1]), d[2]) for d in json.loads(row["differences"]))
    return replace(
        base, source_records=base.source_records + row["source_records"],
        mirrored_records=written + row["mirrored_records"], copies=written + row["copies"],
        unexpected=row["unexpected"], missing=row["missing"],
        missing_ranges=tuple((x[0], x[1]) for x in json.loads(row["missing_ranges"])),
        missing_range_count=row["missing_range_count"], duplicated=row["duplicated"],
        duplicated_ranges=tuple((x[0], x[1]) for x in json.loads(row["duplicated_ranges"])),
        duplicated_range_count=row["duplicated_range_count"], differing=row["differing"],
        differences=differences, behind=row["behind"], refused=refused + row["refused"])


# -- the Spark job ------------------------------------------------------------------------------

def source_records(spark: Any, link: FlowLink, planned: Sequence[SourceRange]) -> Any:
    """The source records of the non-empty ranges the flow mirrors, as Spark's Kafka source gives them, and
    `refused`: a provenance hop names the flow's target and the remote topic, so the stream's writer refuses
    the record (it would loop back to where it came from); the audit counts it, never expects it.
    """
    wanted = [r for r in planned if r.size > 0]
    if not wanted:
        return None
    assign: dict[str, list[int]] = {}
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    for r in wanted:
        assign.setdefault(r.topic, []).append(r.partition)
        starting.setdefault(r.topic, {})[str(r.partition)] = r.start
        ending.setdefault(r.topic, {})[str(r.partition)] = r.end
    records = _read(spark, link.source, assign, json.dumps(starting), json.dumps(ending),
                    committed=link.reads_committed)
    returns = spark.createDataFrame(
        sorted({(r.topic, provenance.prefix(link.flow.target, r.remote).decode()) for r in wanted}),
        "topic string, returning_prefix string")
    from pyspark.sql.functions import broadcast

    hop = f"h.key = '{provenance.HEADER}' AND startswith(CAST(h.value AS STRING), returning_prefix)"
    return (records.join(broadcast(returns), "topic")
            .selectExpr("*", f"coalesce(exists(headers, h -> {hop}), false) AS refused")
            .drop("returning_prefix"))


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


def _digests(side: str, at_partition: str, at_offset: str) -> list[str]:
    headers = "IF(headers IS NULL OR size(headers) = 0, 0L, xxhash64(headers))"
    return ["topic", "partition", "offset", f"CAST({side} AS TINYINT) AS side",
            "xxhash64(key, key IS NULL) AS kd", "xxhash64(value, value IS NULL) AS vd", f"{headers} AS hd",
            "unix_millis(timestamp) AS ts", f"{at_partition} AS at_partition", f"{at_offset} AS at_offset"]


def _tallies(spark: Any, link: FlowLink, planned: Sequence[SourceRange]) -> list[dict[str, Any]]:
    source = source_records(spark, link, planned)
    if source is None:
        return []
    sides = source.selectExpr(*_digests(f"IF(refused, {_REFUSED}, {_SOURCE})", "partition", "offset"))
    copies = target_copies(spark, link, planned)
    if copies is not None:
        sides = sides.unionByName(copies.selectExpr(*_digests(str(_COPY), "at_partition", "at_offset")))
    bounds = {(r.topic, r.partition): (r.mirrored, r.remote) for r in planned}
    tasks = max(1, min(len(planned), spark.sparkContext.defaultParallelism * 2))
    rows = (sides.repartition(tasks, "topic", "partition")
            .sortWithinPartitions("topic", "partition", "offset", "side")
            .mapInArrow(functools.partial(walk, bounds), _RESULT_DDL).collect())
    return [r.asDict() for r in rows]


# -- the streaming pass -------------------------------------------------------------------------

class _Ranges:
    """Maximal runs of consecutive source records with one property; the first EXAMPLES kept, all counted."""

    def __init__(self) -> None:
        self.first: list[list[int]] = []
        self.count = 0
        self.open = False

    def add(self, offset: int) -> None:
        if self.open:
            if self.count <= EXAMPLES:
                self.first[-1][1] = offset
            return
        self.count += 1
        self.open = True
        if self.count <= EXAMPLES:
            self.first.append([offset, offset])

    def cut(self) -> None:
        self.open = False


class _Tally:
    def __init__(self, tp: tuple[str, int], mirrored: int | None, remote: str) -> None:
        self.tp, self.mirrored, self.remote = tp, mirrored, remote
        self.source_records = self.mirrored_records = self.copies = self.unexpected = 0
        self.missing = self.duplicated = self.differing = self.behind = self.refused = 0
        self.missing_ranges, self.duplicated_ranges = _Ranges(), _Ranges()
        self.differences: list[tuple[int, list[str], str]] = []

    def record(self, offset: int, source: tuple[Any, ...] | None, copies: list[tuple[Any, ...]],
               refused: bool = False) -> None:
        """Classify one source offset: its source digests (None: no source record) and its copies' digests."""
        if source is None:
            self.unexpected += len(copies)
            return
        self.source_records += 1
        if refused:
            self.refused += 1
            self.unexpected += len(copies)
            self.missing_ranges.cut()
            self.duplicated_ranges.cut()
            return
        self.copies += len(copies)
        if not copies:
            self.duplicated_ranges.cut()
            if self.mirrored is None or offset >= self.mirrored:
                self.behind += 1
                self.missing_ranges.cut()
            else:
                self.missing += 1
                self.missing_ranges.add(offset)
            return
        self.missing_ranges.cut()
        self.mirrored_records += 1
        if len(copies) > 1:
            self.duplicated += 1
            self.duplicated_ranges.add(offset)
        else:
            self.duplicated_ranges.cut()
        fields: list[str] = []
        for copy in copies:
            fields += [f for f, a, b in zip(_FIELDS, source, copy, strict=False) if a != b and f not in fields]
        if fields:
            self.differing += 1
            if len(self.differences) < EXAMPLES:
                at = next(c for c in copies if c[:len(_FIELDS)] != source[:len(_FIELDS)])
                self.differences.append((offset, fields, f"{self.remote}-{at[4]}@{at[5]}"))

    def row(self) -> dict[str, Any]:
        return {"topic": self.tp[0], "partition": self.tp[1], "source_records": self.source_records,
                "mirrored_records": self.mirrored_records, "copies": self.copies, "unexpected": self.unexpected,
                "missing": self.missing, "missing_ranges": json.dumps(self.missing_ranges.first),
                "missing_range_count": self.missing_ranges.count, "duplicated": self.duplicated,
                "duplicated_ranges": json.dumps(self.duplicated_ranges.first),
                "duplicated_range_count": self.duplicated_ranges.count, "differing": self.differing,
                "differences": json.dumps(self.differences), "behind": self.behind, "refused": self.refused}


def walk(bounds: Mapping[tuple[str, int], tuple[int | None, str]],
         batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: rows of both sides sorted by (topic, partition, offset, side) in, one tally per partition out.

    `bounds` gives each source partition's flow position and remote topic.
    """
    tallies: dict[tuple[str, int], _Tally] = {}
    tally: _Tally | None = None
    offset: int | None = None
    source: tuple[Any, ...] | None = None
    refused = False
    copies: list[tuple[Any, ...]] = []
    for batch in batches:
        cols = [batch.column(name).to_pylist() for name in _COLUMNS]
        topics, parts, offsets, sides = cols[0], cols[1], cols[2], cols[3]
        digests = list(zip(*cols[4:], strict=True))
        for i in range(batch.num_rows):
            tp = (topics[i], parts[i])
            if tally is None or tp != tally.tp or offsets[i] != offset:
                if tally is not None and offset is not None:
                    tally.record(offset, source, copies, refused)
                if tally is None or tp != tally.tp:
                    mirrored, remote = bounds[tp]
                    tally = tallies.setdefault(tp, _Tally(tp, mirrored, remote))
                offset, source, refused, copies = offsets[i], None, False, []
            if sides[i] == _COPY:
                copies.append(digests[i])
            else:
                source, refused = digests[i], sides[i] == _REFUSED
    if tally is not None and offset is not None:
        tally.record(offset, source, copies, refused)
    if tallies:
        yield pa.RecordBatch.from_pylist([t.row() for t in tallies.values()], schema=_RESULT)
