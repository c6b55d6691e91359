"""The completeness audit: proof, record by record and by content, that a flow's target holds its source's records.

For the planned ranges (ranges.py; the flow's heartbeats topics included) a Spark job reads each side in the
executors with librdkafka, consumers of the audit's own (jobs/audit_task): the source range with the flow's
isolation level, and each remote partition from the range's target floor to its end (read_committed, so aborted
copies do not count). Each target record is attributed to its source record by the provenance header of this hop
(`{source}/{topic}/{partition}/{offset}`); records without one (another writer, provenance off) are not attributed.
Both sides are reduced to hashes of each record's fields in the task that read them, and compared there
(jobs/audit_tally: mirrored, missing, behind, duplicated, differing, refused, unexpected). Nothing of the stream's
own account is trusted: a record the copier never read, wrote twice or changed is named at its offset. Only one
PartitionAudit per range reaches the driver.
The audit is complete when nothing is missing or differs; duplicates are reported, and fail it only for an
exactly-once target, where they break the guarantee (at-least-once allows them by design).
"""

from __future__ import annotations

import functools
import time
from typing import Any

from mirrorflow.errors import ConfigError
from mirrorflow.jobs import audit_task, ranges
from mirrorflow.jobs.audit_report import AuditReport, PartitionAudit
from mirrorflow.jobs.ranges import Window
from mirrorflow.kafka.link import FlowLink
from mirrorflow.model.config import Flow
from mirrorflow.rules.policy import is_heartbeats_topic
from mirrorflow.spark import spark_session


def run(link: FlowLink, *, topics: str | None = None, window: Window = ranges.EVERYTHING,
        master: str = "local[*]", spark: Any = None) -> AuditReport:
    """Audit one flow over the window (every retained record by default): every record read on both sides."""
    flow = link.flow
    require_provenance(flow, "audit")
    begun = time.monotonic()
    # A scheduled audit of a flow whose source has no topic to mirror yet (a standby flow) has nothing to compare.
    planned = ranges.plan(link, topics=topics, window=window, allow_empty=topics is None, heartbeats=True)
    # A heartbeats topic with nothing in the window is no partition to audit (a standby flow's source holds the
    # active flow's heartbeats topic: that alone is still nothing to audit).
    planned = [r for r in planned if r.size > 0 or not is_heartbeats_topic(flow.policy, r.topic)]
    if not planned:
        return AuditReport(flow.name, flow.source, flow.target, window.label(), link.exactly_once,
                           (), time.monotonic() - begun, mode="nothing")
    spark = spark or spark_session.build(f"mirrorflow audit {flow.name}", master)
    spec = audit_task.AuditSpec(flow.name, flow.source, flow.target, link.settings("source", "consumer"),
                                link.settings("target", "consumer"), link.reads_committed)
    slots = audit_task.slots([r for r in planned if r.size > 0], spark.sparkContext.defaultParallelism * 2)
    found: list[PartitionAudit] = (
        spark.sparkContext.range(len(slots), numSlices=len(slots))
        .mapPartitions(functools.partial(audit_task.audit_slots, spec, slots)).collect()) if slots else []
    audited = {(p.topic, p.partition): p for p in found}
    partitions = tuple(audited.get((r.topic, r.partition)) or PartitionAudit(
        r.topic, r.partition, r.start, r.end, r.remote, r.mirrored, lost=r.lost, lost_ranges=r.lost_ranges)
        for r in planned)
    return AuditReport(flow.name, flow.source, flow.target, window.label(), link.exactly_once, partitions,
                       time.monotonic() - begun)


def require_provenance(flow: Flow, job: str) -> None:
    if not flow.flag("mirrorflow.provenance.header.enabled"):
        raise ConfigError(f"flow {flow.name}: the {job} attributes target records by their provenance header, "
                          "which this flow does not write (mirrorflow.provenance.header.enabled = false)")
