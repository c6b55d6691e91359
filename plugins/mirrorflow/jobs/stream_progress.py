"""What the stream's driver learns of its running query and tells the operator, from its watch loop: Spark's
progress (the trigger's own time, the planner's reads of the source's ends), stalls named while they last, and
every `log_interval_s` the status file, the source view and a progress line (sooner when its shape changes)."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from py4j.protocol import Py4JError

from mirrorflow.kafka import source_view
from mirrorflow.kafka.flow_lease import DELIVERY_TIMEOUT_MS
from mirrorflow.kafka.link import FlowLink
from mirrorflow.model import selection
from mirrorflow.rules import offset_bases, source_reads
from mirrorflow.rules.flow_state import Settled
from mirrorflow.spark import offset_log
from mirrorflow.status import metrics

log = logging.getLogger(__name__)

STALL_MIN_S, STALL_FACTOR = 5.0, 5.0  # see stall_after_s
IDLE_STATUS_S = 30.0  # the status file's period while no batch runs (entry.flows_view calls a status fresh for 60 s)


def stall_after_s(batch_ms_mean: float, linger_ms: int = 0) -> float:
    """How long a batch may write before the flow is reported stalled: its linger, by design spent waiting for
    records, plus STALL_FACTOR times the recent mean batch's time past the linger, and never less than the linger
    plus STALL_MIN_S (a query's first batch, while Spark warms up, is never reported)."""
    past_linger_ms = max(0.0, batch_ms_mean - linger_ms)
    return linger_ms / 1000 + max(STALL_MIN_S, STALL_FACTOR * past_linger_ms / 1000)


class StreamProgress:
    def __init__(self, link: FlowLink, flow_metrics: metrics.FlowMetrics, linger_ms: int, log_interval_s: float,
                 quiet_log_interval_s: float, bases: Path | None = None) -> None:
        self.flow, self.metrics, self.linger_ms = link.flow, flow_metrics, linger_ms
        self.log_interval_s, self.quiet_log_interval_s = log_interval_s, quiet_log_interval_s
        self.batch_began: float | None = None  # monotonic start of the batch running now, None between batches
        self.stall_named = False  # the running batch's stall is reported (status, log)
        self.last_progress_batch: int | None = None  # the batch whose Spark timings the metrics last took
        self.last_report: Any = None  # the planner's report of its newest read, as the progress last held it
        self.bases = bases  # the planner's offset bases (spark/offset_log), which its reports may be against
        self.base: offset_bases.Base | None = None  # the base a report named last
        self.last_stamp: tuple[Any, Any] | None = None  # (batch id, timestamp) of the progress last observed
        self.batches_written: int | None = None  # the metrics' batch count when the status file was last written
        self.view = source_view.ViewWriter(link)
        self.last_status = self.last_log = time.monotonic()
        self.logged: tuple[Any, ...] | None = None  # the shape of the last progress line

    def settled(self, settled: Settled, position: Callable[[tuple[str, int]], int | None]) -> None:
        """A batch's settling (flow_state.FlowState.settle), named: one log line per partition stuck or taken
        again, one for all aborted with a stuck one; `position` says where a stuck partition is paused."""
        for tp, why, passed_over in settled.held_back:
            self.metrics.observe_stuck(tp, why, passed_over)
        for tp in settled.resumed:
            self.metrics.observe_stuck(tp, None, 0)
            log.info("flow %s: %s-%d: the target takes its records again; resumed", self.flow.name, *tp)
        for tp, why, pause in settled.newly_stuck:
            self.metrics.observe_stuck(tp, why, 0)
            log.warning("flow %s: %s-%d STUCK: %s did not take its records within %.0f s (%s); the partition is paused "
                        "at offset %s, every other partition goes on; tried again in %.0f s", self.flow.name, *tp,
                        self.flow.target, DELIVERY_TIMEOUT_MS / 1000, why, position(tp), pause)
        if settled.aborted:
            log.info("flow %s: %d partition(s) aborted with the transaction of a stuck one (they shared its task); "
                     "written again from their positions", self.flow.name, settled.aborted)

    def query_started(self) -> None:
        """A status file and a progress line a log interval into each query, whatever the last query logged."""
        self.last_status = self.last_log = time.monotonic()
        self.logged = None

    def batch_started(self) -> float:
        self.batch_began = time.monotonic()
        return self.batch_began

    def batch_ended(self, batch_id: int, began: float) -> None:
        """Names the end of a stall the batch was reported in."""
        self.batch_began = None
        if self.stall_named:
            self.stall_named = False
            log.info("flow %s: stall over: batch %d finished after %.0f s", self.flow.name, batch_id,
                     time.monotonic() - began)
            if self.metrics.state == "stalled":
                self.metrics.set_state("running")
            self.write_status()

    def tick(self, query: Any, first_batch_of_query: bool) -> None:
        """One turn of the watch loop."""
        self._check_stall(first_batch_of_query)
        self._observe(query)
        # An idle flow's status file changes only in its clocks: rewriting it (every partition's figures) every
        # log interval took a tenth of a core at 24,000 partitions; readers call it fresh for STATUS_FRESH_S.
        period = self.log_interval_s if self.metrics.batches != self.batches_written else IDLE_STATUS_S
        if time.monotonic() - self.last_status >= period:
            self.last_status = time.monotonic()
            self.batches_written = self.metrics.batches
            snapshot = self.write_status()
            self._write_view(snapshot)
            shape = metrics.progress_shape(snapshot)
            if shape != self.logged or time.monotonic() - self.last_log >= self.quiet_log_interval_s:
                self.logged, self.last_log = shape, time.monotonic()
                log.info(metrics.progress_line(snapshot))
                self._log_batch_timing(query)

    def write_status(self) -> Mapping[str, Any]:
        snapshot = self.metrics.snapshot()
        metrics.write_status(metrics.status_file(self.flow), snapshot, self.metrics.entry_texts())
        return snapshot

    def close(self) -> None:
        self.view.close()

    def _check_stall(self, first_batch_of_query: bool) -> None:
        """Name a batch that has been writing for longer than `stall_after_s` (the target not taking records: a
        leader moving, brokers down), in the status and the log, at once; `batch_ended` names its end."""
        began = self.batch_began
        if began is None or self.stall_named or first_batch_of_query:
            return
        limit = stall_after_s(self.metrics.batch_ms_mean(), self.linger_ms)
        if time.monotonic() - began < limit or self.metrics.state != "running":
            return
        self.stall_named = True
        why = (f"a batch has been writing to {self.flow.target} for more than {limit:.0f} s (a partition leader "
               "moving, brokers down?); it goes on by itself")
        log.warning("flow %s: STALLED: %s", self.flow.name, why)
        self.metrics.set_state("stalled", why)
        self.write_status()

    def _write_view(self, snapshot: Mapping[str, Any]) -> None:
        """The source's ends as last read, on the target for a runbook that finds the source gone (source_view)."""
        read = self.metrics.newest_read()
        if read is None or not read.ends:
            return
        self.view.offer(source_view.SourceView(read.as_of, read.ends, snapshot.get("mirrored-through"),
                                               read.complete))

    def _log_batch_timing(self, query: Any) -> None:
        progress = query.lastProgress
        if progress and progress.get("durationMs"):
            parts = ", ".join(f"{k} {v}" for k, v in sorted(progress["durationMs"].items()) if v)
            log.info("flow %s: last batch %s (%s rows) took ms: %s", self.flow.name, progress.get("batchId"),
                     progress.get("numInputRows"), parts)

    def _observe(self, query: Any) -> None:
        stamp = _progress_stamp(query)
        if stamp is not None and stamp == self.last_stamp:
            return  # the progress JSON crosses from the JVM only when it is new (it holds every partition's end)
        self.last_stamp = stamp
        progress = query.lastProgress
        if not progress or not progress.get("sources"):
            return
        durations = progress.get("durationMs") or {}
        if progress.get("batchId") != self.last_progress_batch and "triggerExecution" in durations:
            self.last_progress_batch = progress.get("batchId")
            self.metrics.observe_trigger_overhead(durations["triggerExecution"] - durations.get("addBatch", 0))
        latest = progress["sources"][0].get("latestOffset")
        if latest is None or latest == self.last_report:
            return
        self.last_report = latest
        try:
            read = source_reads.parse_report(json.loads(latest) if isinstance(latest, str) else latest,
                                             self._base_offsets)
        except ValueError:
            return
        if read is not None:
            # The pattern also matches topics the flow does not replicate (internal ones): not its partitions.
            mirrored = {t for t in {t for t, _ in read.ends} if selection.replicates(self.flow, t)}
            self.metrics.observe_read(dataclasses.replace(
                read, ends={tp: end for tp, end in read.ends.items() if tp[0] in mirrored}))

    def _base_offsets(self, number: int) -> Mapping[tuple[str, int], int] | None:
        """The planner's offset base `number` (its report names one), None when it cannot be read; the last one kept."""
        if self.bases is None:
            return None
        if self.base is None or self.base.number != number:
            try:
                self.base = offset_log.read_base(self.bases, number)
            except (OSError, ValueError) as exc:
                log.info("flow %s: the planner's report names offset base %d, not readable (%s); its next read is "
                         "taken", self.flow.name, number, exc)
                return None
        return self.base.offsets


def _progress_stamp(query: Any) -> tuple[Any, Any] | None:
    """The newest progress's batch id and time, asked of the JVM without its JSON; None when it cannot be asked."""
    try:
        progress = query._jsq.lastProgress()
        return None if progress is None else (progress.batchId(), progress.timestamp())
    except (AttributeError, Py4JError):  # no JVM handle, or the JVM going: read the progress whole
        return None
