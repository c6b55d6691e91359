"""The mirror stream's driver: one Structured Streaming query per flow, supervised until stopped.

Per micro-batch (the flow's range source: Spark plans per-partition ranges, rules/batch_plan):
  1. read the batch's end offsets from the query's offset log (stream_checkpoint);
  2. create or grow the remote topics of partitions not seen before, before any record is written; hold topics
     whose remote topic went, drop the state of source topics re-created (topic_changes);
  3. copy the batch in one task per slot, consumer to producer inside the Python worker (spark/copier), one
     summary row back per partition;
  4. fold the summaries into the flow's state (rules/flow_state: positions, anchors, losses, stuck partitions)
     and metrics; write the offset-sync records it returns. Every minute, drop the anchors no offset still on
     the source needs and the state of topics deleted on the source.
Data loss (records the source deleted before the flow read them: retention during an outage, deleteRecords
on a Kafka Streams repartition topic) does not fail the query: a partition whose batch starts past its
position, with the source's log start past it too, lost [position, log start). The loss is recorded (a loss
record in the offset syncs, metrics, status, one log line) and the partition goes on; for the topics of
`mirrorflow.data-loss.fail.topics` it stops the flow instead, before the batch counts as done. Spark commits the
batch only after step 3 returned, and step 3 returns only after the target acknowledged every record.

A partition the target does not take within the delivery timeout (stream_writer: no leader, a quota, a full
disk) is *stuck*: the driver names it with its cause, pauses it (its records are not written, its position
stays) and every other partition goes on; after a growing pause (30 s, doubling up to 5 min) a new Spark
checkpoint at the positions tries it again. Nothing is skipped: a paused partition resumes at its position.
With transactional records, its task's transaction aborts with it: the task's other partitions come back
*aborted* and are written again at once, from a new Spark checkpoint at the positions with the stuck one left out.

A failed query is restarted from its checkpoint with a growing pause (a target outage, a broker restart); a fatal
error (a record too large, a fenced writer, a lease another instance holds) or repeated failures before any batch
completes stop the flow with one line (QueryEnd). Every write to the target is fenced by the lease (flow_lease,
W1-W4): in both modes the offset syncs commit in transactions the next holder fences.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import signal
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from py4j.protocol import Py4JError

from mirrorflow.errors import OperationalError
from mirrorflow.jobs import lifecycle, reset
from mirrorflow.jobs.driver_writes import DriverWrites
from mirrorflow.jobs.query_end import QueryEnd, query_end
from mirrorflow.jobs.stream_checkpoint import StreamCheckpoint
from mirrorflow.jobs.stream_digests import StreamDigests
from mirrorflow.jobs.stream_progress import StreamProgress
from mirrorflow.jobs.topic_changes import TopicChanges
from mirrorflow.kafka import admin_sync, offset_sync_log, writers
from mirrorflow.kafka.flow_lease import FlowLease, LeaseTakenOver
from mirrorflow.kafka.heartbeats import HeartbeatEmitter
from mirrorflow.kafka.link import FlowLink
from mirrorflow.model import selection
from mirrorflow.model.config import StreamSettings
from mirrorflow.rules import batch_plan, digests
from mirrorflow.rules.filters import java_regex_to_python
from mirrorflow.rules.flow_state import FlowState, PartitionSummary
from mirrorflow.rules.offset_syncs import Release, Writers
from mirrorflow.rules.partition_report import PartitionReport
from mirrorflow.spark import copier, range_source, spark_session, writer_seats
from mirrorflow.spark.writer_spec import WriterSpec
from mirrorflow.status import metrics

log = logging.getLogger(__name__)

_GIVE_UP_AFTER = 5  # consecutive failed starts with no completed batch
STOP_WAIT_S = 60.0  # how long a stop waits for the running batch past its linger's end (its writes' acknowledgements)
_LOCAL_CHECKPOINT_MANAGER = ("org.apache.spark.sql.execution.streaming.checkpointing."
                             "FileSystemBasedCheckpointFileManager")


@dataclass(frozen=True)
class StreamOptions:
    """One run's overrides; None: the flow's setting (its `mirrorflow.stream.*` and `mirrorflow.metrics.*`)."""

    master: str | None = None
    checkpoint: Path | None = None
    metrics_port: int | None = None
    metrics_host: str | None = None
    max_records_per_batch: int | None = None
    trigger_ms: int | None = None
    linger_ms: int | None = None
    log_interval_s: float = 10.0  # the status file's period
    quiet_log_interval_s: float = 300.0  # a progress line at least this often; sooner when its state changes
    driver_memory: str | None = None

    def over(self, settings: StreamSettings) -> StreamSettings:
        """The flow's stream settings with this run's overrides."""
        return StreamSettings(self.master or settings.spark_master, self.driver_memory or settings.driver_memory,
                              settings.max_records_per_batch if self.max_records_per_batch is None
                              else self.max_records_per_batch,
                              settings.trigger_ms if self.trigger_ms is None else self.trigger_ms,
                              settings.linger_ms if self.linger_ms is None else self.linger_ms)


def run(link: FlowLink, options: StreamOptions = StreamOptions()) -> None:
    """Mirror one flow until SIGTERM/SIGINT (returns) or a fatal error (raises)."""
    driver = _Driver(link, options)
    driver.install_signal_handlers()
    try:
        driver.prepare()
        driver.supervise()
    finally:
        driver.close()


class _Background:
    """A call run in a thread of its own; `result` waits for it and returns or raises what it did."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self._call = call
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="mirrorflow-spark-start", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._call()
        except BaseException as exc:  # handed to whoever waits for the result
            self._error = exc

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value


class _Driver:
    def __init__(self, link: FlowLink, options: StreamOptions) -> None:
        self.link, self.flow, self.options = link, link.flow, options
        self.settings = options.over(link.flow.stream)
        self.checkpoint = StreamCheckpoint(options.checkpoint or metrics.flow_home(self.flow) / "checkpoint",
                                           self.flow.name)
        self.pattern = selection.subscription_pattern(self.flow)
        self.metrics = metrics.FlowMetrics(self.flow.name, self.flow.source, self.flow.target)
        link.check_clients()
        # Bounded (flow_state F2): `mirrorflow.offset-syncs.anchors.max` anchors per source partition the flow mirrors.
        self.state = FlowState(self.flow.number("mirrorflow.offset-syncs.anchors.max"),
                               self.flow.number("mirrorflow.offset-syncs.anchors.spacing"))
        self.first_batch_of_query = True
        # WriterSpec.exact_reports of a query's first batch: after another query or an uncommitted batch (None: none)
        self.exact_first_batch: bool | None = None
        self.digests = StreamDigests(link)
        self.progress = StreamProgress(link, self.metrics, self.settings.linger_ms, options.log_interval_s,
                                       options.quiet_log_interval_s, self.checkpoint.bases)
        self.writer_slots: int | None = None  # task slots whose transactional ids were used (syncs)
        self.query_slots = 1  # task slots the running query's batches are cut into
        self.fenced = 0  # when the slots' ids were last fenced (ns); workers' older producers are stale
        self.clean_stop = False  # the last query stopped with no batch running: every write acknowledged
        self.running_batch: WriterSpec | None = None  # the spec of the batch whose tasks are copying, if one is
        self.batches_begun = 0  # batches handed to _batch by Spark, the one running included
        self.in_batch = False  # Spark's thread is in _batch
        self.ending_query = False  # the query is to stop: its batches no longer linger
        self.stop_requested = threading.Event()
        self.lease: FlowLease | None = None
        self.server: Any = None
        self.spark: Any = None
        self.writes = DriverWrites(link, lambda: self.lease)
        self.topics = TopicChanges(link, self.state, self.metrics, self.writes, self.digests.forget,
                                   self.stop_requested.wait)
        self.heartbeats: HeartbeatEmitter | None = None
        self.stop_watch: lifecycle.StopWatch | None = None

    def prepare(self) -> None:
        created = self.link.ensure_syncs_topic()
        admin_sync.ensure_internal_topic(self.link.target_admin, self.link.target.alias, self.link.digests_topic,
                                         self.flow.number("offset-syncs.topic.replication.factor"),
                                         {"cleanup.policy": "delete", "retention.ms": str(digests.RETENTION_MS)})
        # Watching before the lease is held: whoever sees the lease held can stop the stream.
        self.stop_watch = lifecycle.StopWatch(self.link, self._stop_requested)
        self.stop_watch.start()
        self.lease = self.link.lease()
        self.lease.acquire()
        # The JVM starts while the take-over waits out the previous holder and fences it (W3, W4): a restart after
        # a crash copies again a Spark start-up sooner.
        building = _Background(lambda: spark_session.build(f"mirrorflow {self.flow.name}", self.settings.spark_master,
                                                           self.settings.driver_memory, records_in_jvm=False))
        self._take_over(fresh=created)
        self.topics.create_ahead()
        self.metrics.observe_source_ends({})
        if self.flow.flag("emit.heartbeats.enabled"):
            self.heartbeats = HeartbeatEmitter(self.flow, self.link.target)
            self.heartbeats.start()
        port = self.flow.metrics_port if self.options.metrics_port is None else self.options.metrics_port
        if port is not None:
            host = self.options.metrics_host or self.flow.value("mirrorflow.metrics.host")
            try:
                self.server = metrics.serve(port, [self.metrics], host)
            except OSError as exc:  # the mirror matters more than its metrics: say so loudly and go on
                log.error("flow %s: cannot serve metrics on %s:%s (%s); mirroring without them",
                          self.flow.name, host, port, exc)
        self.spark = building.result()
        self.checkpoint.spark = self.spark
        self.metrics.spark_ui = self.spark.sparkContext.uiWebUrl
        threading.Thread(target=self._warm_workers, name="mirrorflow-warm-workers", daemon=True).start()
        mode = ("exactly-once" if self.link.exactly_once else
                "at-least-once" if self.link.transactional else "at-least-once, idempotent records (not fenced)")
        log.info("flow %s: %s, %d partitions known from the offset syncs, checkpoint %s", self.flow.name, mode,
                 len(self.state.upstream_next), self.checkpoint)

    def _warm_workers(self) -> None:
        try:
            spark_session.warm_python_workers(self.spark, self._task_slots())
        except Exception as exc:  # only a head start: the first batch starts the workers itself
            log.info("flow %s: Python workers not started ahead of the first batch: %s", self.flow.name, exc)

    def _take_over(self, fresh: bool) -> None:
        """With the lease just held (at start, or regained): unless the previous holder stopped cleanly or there
        was none (`fresh`: the offset-syncs topic was just created), wait out its writes (W3), then fence and load."""
        assert self.lease is not None
        syncs = offset_sync_log.read(self.link.settings("target", "consumer"), self.link.syncs_topic)
        clean = fresh or syncs.release is not None
        self.lease.wait_out_previous_writer(clean, fenced=self.link.transactional)
        self.writes.take_over()  # W4: the previous holder's driver writes nothing more
        if syncs.release is not None:
            self.writes.write([Release(None)])  # a crash of this instance must not look clean to the next one
        self.writer_slots = syncs.writers.slots if syncs.writers is not None else None
        self._fence(upgraded=self.link.exactly_once and syncs.writers is None and not fresh)
        if not clean:  # read again now that every id is fenced: the state is whole
            syncs = offset_sync_log.read(self.link.settings("target", "consumer"), self.link.syncs_topic)
            if syncs.writers is not None and syncs.writers.slots > (self.writer_slots or 0):
                self.writer_slots = syncs.writers.slots  # slots the previous holder recorded after the first read
                self._fence()
        self._load_syncs(syncs)

    def _fence(self, upgraded: bool = False) -> None:
        """Fence every transactional id of the flow's task slots (at start, after the lease was
        regained, and before a restarted query, whose tasks may have died mid-transaction), serving the lease
        meanwhile; `upgraded`: the ids of a version before slots too, one per source partition (then recorded as
        done). Only under a confirmed lease (W1): a zombie that initialised the ids would fence the owner."""
        self.writes.confirm_lease()
        slots = max(self.writer_slots or 0, self._task_slots())
        ids = [writers.transactional_id(self.flow.source, self.flow.target, i) for i in range(slots)]
        if upgraded:
            ids += [writers.partition_transactional_id(self.flow.source, self.flow.target, tp)
                    for tp in self._source_partitions()]
        writers.fence(self.flow.name, self.flow.target, self.link.settings("target", "producer"), ids,
                      self.lease.keep if self.lease is not None else lambda: True)
        self.fenced = time.time_ns()
        if slots != self.writer_slots:
            self.writes.write([Writers(slots)])
            self.writer_slots = slots

    def _task_slots(self) -> int:
        """How many tasks write a micro-batch: one per core of the Spark session (the options' before it starts)."""
        if self.spark is not None:
            return max(1, int(self.spark.sparkContext.defaultParallelism))
        return spark_session.local_cores(self.settings.spark_master) or os.cpu_count() or 1

    def _load_syncs(self, syncs: offset_sync_log.SyncsState | None = None) -> None:
        """Positions and anchors from the offset syncs (as just read, or read now); runs of older versions become
        anchors (and tombstones)."""
        syncs = syncs or offset_sync_log.read(self.link.settings("target", "consumer"), self.link.syncs_topic)
        records, migrated = self.state.load(syncs)
        if reset.requested_since(syncs, self.checkpoint.reset_seen()):
            assert syncs.reset is not None
            if self.checkpoint.has_batches():
                self.checkpoint.replace()
                log.warning("flow %s: reset at %s: a new Spark checkpoint, at the offset syncs' positions",
                            self.flow.name, time.strftime("%Y-%m-%d %H:%M:%S UTC",
                                                          time.gmtime(syncs.reset.at_ms / 1000)))
            self.checkpoint.mark_reset(syncs.reset.at_ms)
        behind = sorted(tp for tp, end in self.checkpoint.committed_ends().items()
                        if (at := self.state.position(tp)) is not None and at < end
                        and selection.replicates(self.flow, tp[0]))
        if behind:  # a topic held by the last run (its batches passed over it), or a checkpoint from elsewhere
            self.checkpoint.replace()
            log.warning("flow %s: the Spark checkpoint is past the offset syncs' positions of %d partition(s) (e.g. "
                        "%s-%d): a new Spark checkpoint, at the positions", self.flow.name, len(behind), *behind[0])
        for tp, loss in self.state.losses.items():
            self.metrics.observe_loss(tp, loss.lost)
        self.writes.write(records)
        known = {t for t, _ in self.state.upstream_next} | set(self.state.incarnations)
        if self.topics.incarnations(known) and self.checkpoint.exists():
            self.checkpoint.replace()  # Spark's checkpoint holds the old incarnation's offsets
        if migrated:
            log.info("flow %s: %d offset-sync runs of an older version turned into anchors", self.flow.name, migrated)

    def _deleted_topics_reset(self) -> bool:
        """After a failed query: if topics the query read were deleted on the source (Spark fails on every restart
        from a checkpoint that names them), they are forgotten (topic_changes) and a new Spark checkpoint starts from
        the offset syncs' positions, which say exactly where each partition resumes. True if it did."""
        gone = self.topics.forget_deleted(set(self.checkpoint.topics()))
        if gone:
            self.checkpoint.replace()
            log.warning("flow %s: source topic(s) %s deleted: new Spark checkpoint, resuming every other partition "
                        "from its offset-sync position", self.flow.name, ", ".join(sorted(gone)))
        return bool(gone)

    def _stop_requested(self, wanted: lifecycle.Requested) -> None:
        log.info("flow %s: %s; finishing the running batch, then stopping", self.flow.name, wanted.line())
        self.stop_requested.set()

    def close(self) -> None:
        if self.stop_watch is not None:
            self.stop_watch.stop()
        self.digests.close()
        if self.heartbeats is not None:
            self.heartbeats.stop()
        if self.lease is not None:
            if self.clean_stop and self.lease.keep():
                try:
                    self.writes.write([Release(int(time.time() * 1000))])
                except OperationalError as exc:  # the next start waits out this instance's writes instead
                    log.warning("flow %s: could not record a clean stop: %s", self.flow.name, exc)
            self.lease.release()
        if self.server is not None:
            self.server.shutdown()
        if self.metrics.state == "running":
            self.metrics.set_state("stopped")
        self.progress.write_status()
        self.progress.close()

    # -- supervision ---------------------------------------------------------------------------

    def supervise(self) -> None:
        failures, pause = 0, 2.0
        while not self.stop_requested.is_set():
            batches_before = self.metrics.batches
            query = self._start_query()
            self.metrics.set_state("running")
            end = self._watch(query)
            if end.kind == "stopped":
                return
            if end.kind == "lease regained":
                continue
            if end.kind == "new checkpoint":
                pause = self._recover(pause)  # the stop may have cut a batch short
                self.checkpoint.replace()
                continue
            if end.kind == "fatal":
                self.metrics.set_state("failed", end.detail)
                raise OperationalError(end.detail)
            if self._deleted_topics_reset():
                pause = self._recover(pause)
                continue
            failures = failures + 1 if self.metrics.batches == batches_before else 1
            if failures >= _GIVE_UP_AFTER:
                self.metrics.set_state("failed", end.detail)
                raise OperationalError(f"flow {self.flow.name}: stopped after {failures} failed starts: {end.detail}")
            self.metrics.set_state("restarting", end.detail)
            log.warning("flow %s: query failed (%s); restarting from its checkpoint in %.0f s",
                        self.flow.name, end.detail, pause)
            self.stop_requested.wait(pause)
            self.topics.look_again()  # the failure may be a topic gone on either side
            pause = self._recover(pause)
            pause = min(pause * 2, 60.0) if self.metrics.batches == batches_before else 2.0

    def _recover(self, pause: float) -> float:
        """Before a query starts again after one that failed or was cut short: fence (no task of it still has a
        transaction open or can commit one), then take the positions its tasks committed that the driver
        never saw, so that the replay skips them. Tried again while the target is unreachable; the next pause."""
        while not self.stop_requested.is_set():
            try:
                if self.lease is not None and not self.lease.keep():  # lost meanwhile: regained, then a take-over
                    self.metrics.set_state("paused", "lease lost")
                    self.lease.regain()
                    self._take_over(fresh=False)
                else:
                    self._fence()
                    self._reload_positions()
                break
            except LeaseTakenOver:
                raise  # another instance runs the flow: this one stops, as from the watch
            except (OperationalError, KafkaException) as exc:  # the target may still be down, as for a failed start
                end = query_end(str(exc))
                if end.kind == "fatal":  # another instance holds the lease
                    self.metrics.set_state("failed", end.detail)
                    raise OperationalError(end.detail) from None
                log.warning("%s; trying again in %.0f s", exc, pause)
                self.stop_requested.wait(pause)
                pause = min(pause * 2, 60.0)
        return pause

    def _reload_positions(self) -> None:
        """Positions in the offset syncs ahead of the driver's: written by tasks of a batch whose summaries never
        came back. Adopted with where their next record lands, and their batch's first record as an anchor."""
        syncs = offset_sync_log.read(self.link.settings("target", "consumer"), self.link.syncs_topic)
        self.writes.write(self.state.adopt_positions(syncs.positions))

    def _watch(self, query: Any) -> QueryEnd:
        """Wait until the query fails, a stop is requested, the lease was lost (and is held again), or paused
        partitions are due (a new checkpoint at the positions tries them)."""
        while not self.stop_requested.is_set():
            if self.lease is not None and not self.lease.keep():
                self._stop(query)
                log.warning("flow %s: lease lost (target unreachable for a session?); paused until it is "
                            "held again", self.flow.name)
                self.metrics.set_state("paused", "lease lost")
                self.lease.regain()
                self._take_over(fresh=False)  # another instance or a reset may have held it meanwhile
                self.state.retry_stuck_now()  # the target is back: try paused partitions at once
                return QueryEnd("lease regained")
            due = self.state.stuck_due(time.monotonic())
            if due:
                log.info("flow %s: trying %d paused partition(s) again (e.g. %s-%d)", self.flow.name, len(due),
                         *due[0])
                self._stop(query)  # no batch of this query may write them: its checkpoint is past their positions
                return QueryEnd("new checkpoint")
            if not query.isActive:
                exc = query.exception()
                return query_end(str(exc) if exc is not None else "the query stopped")
            self.progress.tick(query, self.first_batch_of_query)
            time.sleep(0.5)
        self.clean_stop = self._stop(query)
        self.metrics.set_state("stopped")
        return QueryEnd("stopped")

    def _stop(self, query: Any) -> bool:
        """Let a running batch finish so that its records and syncs are complete, its linger ended early where its
        tasks can be told (else waited out), then stop; True if no batch was running when the query stopped."""
        self.ending_query = True
        running = self.running_batch
        # With no batch running yet, one about to start sees `ending_query` (a local master) or lingers its full time.
        told = self._local_master() if running is None else writer_seats.end_linger(running)
        wait_s = STOP_WAIT_S + (0 if told else self.settings.linger_ms / 1000)
        deadline = time.monotonic() + wait_s
        try:
            while self._trigger_active(query) and time.monotonic() < deadline:
                time.sleep(0.1)
            # Spark starts the next trigger as soon as one ends: one found idle may be busy again by the stop. Only
            # a batch of ours running or begun by then makes the stop an unclean one (a planning trigger writes
            # nothing of the flow's).
            seen, ended = self.batches_begun, not self.in_batch
            query.stop()
            began = ended and (self.in_batch or self.batches_begun != seen)
            if not ended or began:
                why = "a batch began as the query stopped" if began else \
                    f"the running batch did not end within {wait_s:.0f} s"
                log.warning("flow %s: %s; stopped during it (the next start waits out its writes)", self.flow.name, why)
            return ended and not began
        except (Py4JError, ConnectionError):
            log.warning("flow %s: Spark's JVM is gone (stopped with the process group?)", self.flow.name)
            return False

    def _trigger_active(self, query: Any) -> bool:
        return self.in_batch or bool(query.isActive and query.status.get("isTriggerActive"))

    def install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stop_requested.set())

    # -- the query -----------------------------------------------------------------------------

    def _start_query(self) -> Any:
        self.first_batch_of_query = True
        self.exact_first_batch = self.exact_first_batch is not None or self.checkpoint.uncommitted()
        self.ending_query = False
        self.progress.query_started()
        if self._task_slots() > (self.writer_slots or 0):
            self._recover(2.0)  # more cores than when the ids were last fenced (a cluster's executors joined)
        # One task per core, each copying several partitions in turn; a slot's id is fenced and recorded first.
        reset = self.link.source.client_config("consumer").get("auto.offset.reset", "earliest")
        starting = self._starting_offsets(reset)
        self.query_slots = min(self._task_slots(), self.writer_slots or 1)
        plan = range_source.SourcePlan(
            self.flow.name, self.flow.source, self.link.settings("source", "admin"),
            java_regex_to_python(self.pattern), self.link.reads_committed,
            slots=self.query_slots, max_records=self.settings.max_records_per_batch,
            starting=starting if starting in ("earliest", "latest") else json.loads(starting),
            initial_path=str(self.checkpoint.initial_offsets), positions_path=str(self.checkpoint.positions),
            discovery_s=(float(self.flow.number("refresh.topics.interval.seconds"))
                         if self.flow.given("refresh.topics.interval.seconds") else range_source.DISCOVERY_S),
            watch_settings=self.link.settings("source", "consumer"), bases_path=str(self.checkpoint.bases))
        source = range_source.source_class(plan)
        self.spark.dataSource.register(source)
        # The checkpoint is a local directory: Spark's default manager renames through Hadoop's FileContext, which
        # runs `readlink` in a new process per file (about 50 ms for each of a batch's two log entries); a plain
        # rename is as atomic on a local file system.
        self.spark.conf.set("spark.sql.streaming.checkpointFileManagerClass", _LOCAL_CHECKPOINT_MANAGER)
        return (self.spark.readStream.format(source.name()).load().writeStream
                .queryName(f"mirrorflow_{self.flow.source}_{self.flow.target}")
                .foreachBatch(self._batch)
                .option("checkpointLocation", str(self.checkpoint.path))
                .trigger(processingTime=f"{self.settings.trigger_ms} milliseconds")
                .start())

    def _source_partitions(self) -> list[tuple[str, int]]:
        """Every partition of the source topics the flow replicates now."""
        counts, _ = admin_sync.partition_counts(self.link.source_admin, self.link.source.alias)
        return [(t, p) for t, n in sorted(counts.items()) if selection.replicates(self.flow, t) for p in range(n)]

    def _starting_offsets(self, reset: str) -> str:
        """Used only when the checkpoint is new: resume from the offset syncs if the target has any."""
        if self.checkpoint.has_batches() or not (self.state.upstream_next or self.topics.recreated):
            return "latest" if reset.strip().lower() == "latest" else "earliest"
        matches = re.compile(java_regex_to_python(self.pattern)).fullmatch
        counts, _ = admin_sync.partition_counts(self.link.source_admin, self.link.source.alias)
        default = -1 if reset.strip().lower() == "latest" else -2
        offsets: dict[str, dict[str, int]] = {}
        for topic, n in counts.items():
            if matches(topic):
                fallback = -2 if topic in self.topics.recreated else default
                offsets[topic] = {str(p): self.state.upstream_next.get((topic, p), fallback) for p in range(n)}
        return json.dumps(offsets)

    def _batch(self, df: Any, batch_id: int) -> None:
        began = self.progress.batch_started()
        self.batches_begun += 1
        self.in_batch = True
        try:
            self._mirror_batch(df, batch_id)
        finally:
            self.in_batch = False
            self.progress.batch_ended(batch_id, began)

    def _mirror_batch(self, df: Any, batch_id: int) -> None:
        begun = time.monotonic()
        self.writes.confirm_lease()
        ends = self.checkpoint.batch_ends(batch_id)
        starts = self._lingered(self._batch_starts(batch_id))
        flow_topics, replicated = self.topics.prepare_batch(ends, starts)
        # Where the batch starts: the previous batch's end, the same when a batch is replayed after a crash (the
        # tasks' positions may already have moved past a gap the driver had not recorded yet).
        begins = self._lingered({**self.state.upstream_next, **self.checkpoint.previous_ends(batch_id)})
        self.topics.refuse_loss(ends, replicated, begins)
        # A stuck partition is written only by a batch that starts at its position (a query from a new checkpoint).
        paused = self.state.paused(begins)
        # The subscription pattern also matches topics the flow does not replicate (internal ones): not its partitions.
        read = sum(max(end - begins.get(tp, 0), 0) for tp, end in ends.items() if tp[0] in flow_topics)
        shifting = sum(1 for tp, end in ends.items() if tp[0] in flow_topics and end > begins.get(tp, 0))
        behind = batch_plan.full(read, self.settings.max_records_per_batch, shifting)  # the source had more
        # One task per slot, each copying its ranges (rules/batch_plan: a replayed batch is cut the same way).
        # Lingering tasks read quiet partitions too (their empty ranges), unless the batch is full: P6 then moves a
        # turn of partitions, and the others' records would only be held past their ranges, or dropped past what a
        # worker may hold (copier).
        lingering = bool(self.settings.linger_ms) and not self.ending_query
        slots = batch_plan.slot_ranges(starts, ends, self.query_slots,
                                       empty=lingering and not behind)
        spec = self._spec({t: self.flow.policy.remote_topic(self.flow.source, t) for t in replicated}, ends, paused,
                          behind, lingering, {(r.topic, r.partition) for ranges in slots for r in ranges})
        writing = time.monotonic()
        self.running_batch = spec
        try:
            if self.ending_query:  # _stop looked before this batch was running
                writer_seats.end_linger(spec)
            rows: list[PartitionReport] = (
                self.spark.sparkContext.range(len(slots), numSlices=len(slots))
                .mapPartitions(functools.partial(copier.copy_slots, spec, slots)).collect()) if slots else []
        finally:
            self.running_batch = None
            writer_seats.drop_seat_claims(spec)
        written = time.monotonic()
        self.metrics.count_producer_inits(sum(r.producer_inits for r in rows))
        self.metrics.count_consumer_inits(sum(r.consumer_inits for r in rows), sum(r.consumer_uses for r in rows))
        for r in rows:
            if r.topic in self.state.held:
                self.metrics.hold(r.topic, self.state.held[r.topic], r.filtered)
        rows = [r for r in rows if r.topic not in self.state.held]
        summaries = [PartitionSummary.of(r) for r in rows]
        lost = self.topics.losses(ends, summaries, replicated, begins)
        settled = self.state.settle(summaries, spec.paused, time.monotonic(), time.time())
        self.progress.settled(settled, self.state.position)
        moving = {s.tp for s in settled.moving}
        rows = [r for r in rows if r.tp in moving]
        self.state.fold(settled.moving)
        # Batches that held no visible record (markers, aborted ones) move on too, and so does a stuck partition
        # tried again whose batch held nothing visible (it is not paused again); before a prune drops any topic.
        quiet_positions, released = self.state.move_quiet(ends, replicated, spec.paused)
        records = self.topics.prune() + self.state.anchor_writes() + lost + settled.first_positions
        for tp in released:
            self.metrics.observe_stuck(tp, None, 0)  # tried again: nothing to write, nothing held back
        quiet = {(p.topic, p.partition): p.upstream_next for p in quiet_positions}
        self.writes.write([*records, *quiet_positions])
        if spec.linger_until is not None:  # range_source S4: the next batch is admitted from where this one got to
            self.checkpoint.write_positions({
                tp: at for tp, end in ends.items() if (at := self.state.upstream_next.get(tp, end)) > end})
        self.digests.record(rows, begins, ends, quiet)
        self.first_batch_of_query = False
        self.checkpoint.done(batch_id, ends)
        for r in rows:
            if r.refused and not self.metrics.refused(r.tp):
                log.warning("flow %s: %s-%d: %d record(s) refused from offset %d on: a provenance header says they "
                            "came from %s's topic %s, where they would be written (an active/active loop); every "
                            "one is counted as refused (status, metrics, audit)", self.flow.name, r.topic,
                            r.partition, r.refused, r.first_refused, self.flow.target, spec.remote[r.topic])
        self.metrics.observe([r for r in rows if r.topic in flow_topics])
        self.metrics.observe_positions(self.state.upstream_next)
        done = time.monotonic()
        self.metrics.observe_batch_time((done - begun) * 1000, (written - writing) * 1000)

    def _spec(self, remote: Mapping[str, str], ends: Mapping[tuple[str, int], int],
              paused: frozenset[tuple[str, int]], behind: bool, lingering: bool,
              read: AbstractSet[tuple[str, int]]) -> WriterSpec:
        """The batch's WriterSpec; its positions and ends only of the partitions its tasks `read` (a turn of a
        flow of 24,000 partitions moves 2,400: every task unpickles what the spec holds)."""
        local = self._local_master()

        def of(offsets: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], int]:
            return {tp: offsets[tp] for tp in read if tp in offsets}

        return WriterSpec.of(
            self.link, remote=dict(remote), upstream_next=of(self.state.upstream_next), ends=of(ends),
            downstream_next=of(self.state.downstream_next), fence_syncs=True, replay=self.first_batch_of_query,
            exact_reports=self.first_batch_of_query and bool(self.exact_first_batch),
            lease_member=self.lease.member_id if self.lease is not None else None,
            lease_own_ids=tuple(self.lease.own_ids) if self.lease is not None else (), paused=paused,
            fenced=self.fenced, keep_producers=local, behind=behind,
            linger_until=time.time() + self.settings.linger_ms / 1000 if lingering else None,
            batch_key=f"{self.fenced}-{uuid.uuid4().hex}" if local else None)

    def _local_master(self) -> bool:
        """Whether the executors are this host's processes, seeing the driver's files (seat claims, a linger's end)."""
        return str(self.spark.sparkContext.master).startswith("local")

    def _batch_starts(self, batch_id: int) -> dict[tuple[str, int], int]:
        """Where the batch reads from: Spark's start of it (the previous batch's ends, or the first batch's kept
        start), and for a partition Spark has no start of, its position (a checkpoint of an older version), else
        none: it is new, and its first batch ends at its log start (batch_plan P2)."""
        return {**self.state.upstream_next, **self.checkpoint.spark_starts(batch_id)}

    def _lingered(self, starts: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """`starts` moved up to the positions the previous batch's lingering tasks reached past its ends (copier
        C6). Not for a query's first batch: positions reloaded from the offset syncs may be past a gap the driver
        has not recorded yet (the writer skips what the target holds)."""
        return dict(starts) if self.first_batch_of_query else batch_plan.resumed(starts, self.state.upstream_next)
