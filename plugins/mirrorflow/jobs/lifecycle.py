"""A flow's stream lifecycle: the state an operator asked for, whether the stream is alive, how far behind.

The requested state of flow A->B lives on B, in the compacted topic `mirrorflow-flow-states.internal`
(key: the flow's name; value: JSON `{"state": "running"|"stopped", "reason", "at"}`), beside the flow's
lease and offset syncs. Every host reads the same answer, and the stream's driver watches the topic, so a
stop reaches the driver wherever Spark runs it. No record means running: an enabled flow runs.

Alive means a stream instance holds the flow's lease (flow_lease.py), which also makes a second instance
impossible. Lag is measured from the clusters themselves: the source's end offsets (last stable offsets
under `read_committed`) minus the positions the flow's offset syncs record as mirrored.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from mirrorflow.errors import OperationalError
from mirrorflow.kafka import admin_sync, clients, flow_lease, heartbeats, offset_sync_log, source_view
from mirrorflow.kafka.link import FlowLink
from mirrorflow.rules.policy import HEARTBEATS_TOPIC

log = logging.getLogger(__name__)
STATES_TOPIC = "mirrorflow-flow-states.internal"
RUNNING, STOPPED = "running", "stopped"
# What the flows view calls a flow (FlowHealth.verdict): one word, and why in a sentence.
HEALTHY, BEHIND, TROUBLE = "healthy", "behind", "trouble"
# A running flow whose oldest record not mirrored, or whose newest heartbeat on the target, is older is behind.
BEHIND_AFTER_S = 60.0
_NOT_YET_KNOWN = (KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART)


@dataclass(frozen=True)
class Requested:
    """The state an operator (or a runbook) asked a flow to be in."""

    flow: str
    state: str = RUNNING
    reason: str = ""
    at_ms: int = 0

    def key(self) -> bytes:
        return self.flow.encode()

    def value(self) -> bytes:
        return json.dumps({"state": self.state, "reason": self.reason, "at": self.at_ms}).encode()

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> Requested:
        data = json.loads(value)
        return cls(key.decode(), str(data["state"]), str(data.get("reason", "")), int(data.get("at", 0)))

    def line(self) -> str:
        since = f" since {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(self.at_ms / 1000))} UTC" if self.at_ms else ""
        return f"requested {self.state}{since}" + (f" ({self.reason})" if self.reason else "")


def _ensure_states_topic(link: FlowLink) -> None:
    admin_sync.ensure_internal_topic(link.target_admin, link.flow.target, STATES_TOPIC,
                                     link.flow.number("offset-syncs.topic.replication.factor"),
                                     admin_sync.COMPACTED)


def requested(link: FlowLink) -> Requested:
    """The newest request for the flow, read from its target; running if there is none."""
    flow = link.flow
    newest = Requested(flow.name)
    for msg in clients.read_to_end(link.settings("target", "consumer"), STATES_TOPIC, "flow states"):
        if msg.key() == flow.name.encode() and msg.value() is not None:
            try:
                newest = Requested.decode(msg.key() or b"", msg.value() or b"")
            except (ValueError, KeyError) as exc:
                log.warning("flow %s: unreadable state record at offset %s: %s", flow.name, msg.offset(), exc)
    return newest


def request(link: FlowLink, state: str, reason: str) -> Requested:
    """Record that the flow should be `state` (running or stopped); acknowledged by the target when this returns."""
    if state not in (RUNNING, STOPPED):
        raise ValueError(state)
    flow = link.flow
    _ensure_states_topic(link)
    wanted = Requested(flow.name, state, reason, int(time.time() * 1000))
    producer = link.durable_producer()
    producer.produce(STATES_TOPIC, wanted.value(), wanted.key(), partition=0)
    if producer.flush(admin_sync.TIMEOUT_S) > 0:
        raise OperationalError(f"cannot record flow {flow.name} as {state} on {flow.target}: "
                               f"not acknowledged within {admin_sync.TIMEOUT_S:.0f} s")
    log.info("flow %s: %s", flow.name, wanted.line())
    return wanted


class StopWatch:
    """Calls `on_stop` when a stop is requested for the flow after the watch started (a driver's thread)."""

    def __init__(self, link: FlowLink, on_stop: Callable[[Requested], None]) -> None:
        self.link, self.flow, self.on_stop = link, link.flow, on_stop
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Returns once the watch reads from the states topic's end as it is now: a stop requested after this
        returns is seen, however slowly the watch's thread gets going."""
        _ensure_states_topic(self.link)
        consumer = self.link.reader("target", "mirrorflow-stop-watch", **{"isolation.level": "read_committed"})
        deadline = time.monotonic() + admin_sync.TIMEOUT_S
        while True:
            try:
                _, end = consumer.get_watermark_offsets(TopicPartition(STATES_TOPIC, 0),
                                                        timeout=admin_sync.TIMEOUT_S)
                break
            except KafkaException as exc:
                # A topic just created reaches each broker's metadata in turn: the one asked may not know it yet.
                if exc.args[0].code() in _NOT_YET_KNOWN and time.monotonic() < deadline:
                    time.sleep(0.5)
                    continue
                consumer.close()
                raise OperationalError(f"flow {self.flow.name}: cannot read {STATES_TOPIC} on {self.flow.target} "
                                       f"to watch for stop requests: {exc.args[0].str()}") from None
        consumer.assign([TopicPartition(STATES_TOPIC, 0, end)])
        self._thread = threading.Thread(target=self._run, args=(consumer,), name="mirrorflow-stop-watch",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self, consumer: Consumer) -> None:
        key = self.flow.name.encode()
        try:
            while not self._stop.is_set():
                msg = consumer.poll(0.5)
                if msg is None or msg.error() is not None or msg.key() != key or msg.value() is None:
                    continue
                try:
                    wanted = Requested.decode(key, msg.value() or b"")
                except (ValueError, KeyError):
                    continue
                if wanted.state == STOPPED:
                    self.on_stop(wanted)
        finally:
            consumer.close()


@dataclass(frozen=True)
class PartitionLag:
    """How far the flow's target is behind one source partition."""

    topic: str
    partition: int
    source_end: int
    mirrored: int  # the next source offset the flow has not mirrored
    oldest_unmirrored_ms: int | None = None  # CreateTime of the first record not mirrored yet
    lost: int = 0  # deleted on the source before the flow read them: recorded, and below the log start already

    @property
    def records(self) -> int:
        return max(self.source_end - self.mirrored, 0)


@dataclass(frozen=True)
class Unmirrored:
    """What the target holds against the stream's last view of the source (source_view V1-V3)."""

    view: source_view.SourceView
    records: int  # at least this many records were not mirrored; those appended after `view.as_of`: unknown
    through: float | None  # V3: every record the source acknowledged before it is on the target; None: unknown

    def line(self) -> str:
        return (f"at least {self.records} records not mirrored by the stream's last view of the source, at "
                f"{utc_time(self.view.as_of)} UTC"
                + ("" if self.through is None else
                   f"; every record the source acknowledged before {utc_time(self.through)} UTC mirrored"))


def utc_time(seconds: float) -> str:
    """HH:MM:SS of a wall-clock time, in UTC (the RPO lines: the day is the runbook's)."""
    return time.strftime("%H:%M:%S", time.gmtime(seconds))


def unmirrored(link: FlowLink) -> Unmirrored | None:
    """From the target alone: the stream's last view of the source against the offset syncs' positions; None when
    the stream left no view."""
    view = source_view.newest(link)
    if view is None:
        return None
    read = offset_sync_log.read(link.settings("target", "consumer"), link.syncs_topic).positions
    positions = {tp: p.upstream_next for tp, p in read.items()}
    return Unmirrored(view, view.not_mirrored(positions), view.acknowledged_through(positions))


@dataclass(frozen=True)
class FlowHealth:
    flow: str
    requested: Requested
    holders: tuple[str, ...]  # hosts whose instance holds the lease: () when the stream is down
    heartbeat_age_s: float | None  # newest heartbeat of the flow on its target
    lags: tuple[PartitionLag, ...] | None  # None when the source could not be read
    source_error: str = ""
    measured_at: float = field(default_factory=time.time)
    lease_error: str = ""  # the lease group could not be described: running or not is unknown
    # The source not read: what the target says instead (the stream's last view of the source, source_view V2)
    unmirrored: Unmirrored | None = None

    @property
    def alive(self) -> bool:
        return bool(self.holders)

    @property
    def lag_records(self) -> int | None:
        return None if self.lags is None else sum(lag.records for lag in self.lags)

    @property
    def lag_seconds(self) -> float | None:
        """Age of the oldest record not mirrored yet (0 when nothing is behind); None without the source."""
        if self.lags is None:
            return None
        oldest = [lag.oldest_unmirrored_ms for lag in self.lags if lag.records and lag.oldest_unmirrored_ms]
        return max(self.measured_at - min(oldest) / 1000, 0.0) if oldest else 0.0

    def behind(self) -> list[PartitionLag]:
        return [lag for lag in self.lags or () if lag.records]

    def losing(self) -> list[PartitionLag]:
        return [lag for lag in self.lags or () if lag.lost]

    def line(self) -> str:
        running = (f"running on {', '.join(self.holders)}" if self.alive
                   else f"running or not: unknown ({self.lease_error})" if self.lease_error else "not running")
        beat = "no heartbeat" if self.heartbeat_age_s is None else f"heartbeat {self.heartbeat_age_s:.0f} s ago"
        if self.lags is None:
            lag = "lag unknown" + (f" ({self.source_error})" if self.source_error else " (source not read)")
            if self.unmirrored is not None:
                lag += f"; {self.unmirrored.line()}"
        else:
            lag = f"lag {self.lag_records} records / {self.lag_seconds:.1f} s over {len(self.lags)} partitions"
            lost = self.losing()
            if lost:
                named = ", ".join(f"{x.topic}-{x.partition} ({x.lost})" for x in lost[:3])
                lag += (f", {sum(x.lost for x in lost)} records LOST on the source before mirrored: {named}"
                        + (f" and {len(lost) - 3} more" if len(lost) > 3 else ""))
        return f"flow {self.flow}: {running}, {self.requested.line()}, {beat}, {lag}"

    def verdict(self) -> tuple[str, str]:
        """(healthy | behind | stopped | trouble, why). Trouble: the flow is not as requested, or cannot be
        measured; behind: it runs, but its oldest record not mirrored or its newest heartbeat is over
        BEHIND_AFTER_S old. A record lost long ago is no verdict: the view shows it beside."""
        reason = f" ({self.requested.reason})" if self.requested.reason else ""
        if self.lease_error:
            return TROUBLE, f"running or not is unknown: {self.lease_error}"
        if not self.alive:
            if self.requested.state == RUNNING:
                return TROUBLE, f"requested running{reason}, but no stream holds the flow's lease"
            return STOPPED, f"requested stopped{reason}"
        if self.requested.state != RUNNING:
            return TROUBLE, f"requested stopped{reason}, still running on {', '.join(self.holders)}"
        if self.lags is None:
            return TROUBLE, f"lag unknown: {self.source_error or 'the source was not read'}"
        seconds = self.lag_seconds or 0.0
        if seconds > BEHIND_AFTER_S:
            return BEHIND, (f"{self.lag_records:,} records not mirrored, the oldest {seconds:,.0f} s old "
                            f"(behind after {BEHIND_AFTER_S:.0f} s)")
        if self.heartbeat_age_s is not None and self.heartbeat_age_s > BEHIND_AFTER_S:
            return BEHIND, f"the newest heartbeat on the target is {self.heartbeat_age_s:,.0f} s old"
        return HEALTHY, f"{self.lag_records:,} records not mirrored, the oldest {seconds:.1f} s old"

    def as_dict(self) -> dict[str, Any]:
        return {"flow": self.flow, "line": self.line(), "requested": self.requested.state,
                "reason": self.requested.reason,
                "alive": self.alive, "holders": list(self.holders), "lease_error": self.lease_error,
                "heartbeat_age_s": self.heartbeat_age_s,
                "lag_records": self.lag_records, "lag_seconds": self.lag_seconds, "source_error": self.source_error,
                "unmirrored_at_least": None if self.unmirrored is None else self.unmirrored.records,
                "unmirrored_as_of": None if self.unmirrored is None else self.unmirrored.view.as_of,
                "behind": [{"topic": b.topic, "partition": b.partition, "records": b.records} for b in self.behind()],
                "lost": [{"topic": x.topic, "partition": x.partition, "records": x.lost} for x in self.losing()]}


def lags(link: FlowLink, syncs: offset_sync_log.SyncsState | None = None) -> list[PartitionLag]:
    """Per replicated source partition (heartbeats topics aside): its end and what the flow has mirrored of it.

    `syncs`: a long-lived view of the flow's offset syncs, refreshed with what is new (else read once)."""
    source = link.source
    source_admin = link.admin("source", **{"socket.timeout.ms": 10_000})  # a source away: say so within seconds
    counts, _ = admin_sync.partition_counts(source_admin, source.alias)
    partitions = link.replicated_partitions(counts)
    committed = link.reads_committed
    ends = admin_sync.offsets(source_admin, source.alias, partitions, OffsetSpec.latest(),  # type: ignore[no-untyped-call]
                              IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED)
    starts = admin_sync.offsets(source_admin, source.alias, partitions, OffsetSpec.earliest())  # type: ignore[no-untyped-call]
    if syncs is None:
        syncs = offset_sync_log.read(link.settings("target", "consumer"), link.syncs_topic)
    else:
        syncs.refresh()
    positions = syncs.positions
    # Recorded by the stream, plus what the source deleted below a position the stream has not moved past yet.
    lost = {tp: (syncs.losses[tp].lost if tp in syncs.losses else 0)
            + (max(starts[tp] - positions[tp].upstream_next, 0) if tp in positions else 0) for tp in partitions}
    mirrored = {tp: max(positions[tp].upstream_next if tp in positions else 0, starts[tp]) for tp in partitions}
    behind = [tp for tp in partitions if ends[tp] > mirrored[tp]]
    oldest = _first_timestamps(link, {tp: mirrored[tp] for tp in behind})
    return [PartitionLag(t, p, ends[(t, p)], mirrored[(t, p)], oldest.get((t, p)), lost[(t, p)]) for t, p in partitions]


def _first_timestamps(link: FlowLink, at: Mapping[tuple[str, int], int],
                      timeout_s: float = 15.0) -> dict[tuple[str, int], int]:
    """The timestamp of the first readable record at or after each offset (for the age of the lag)."""
    if not at:
        return {}
    consumer = link.reader("source", "mirrorflow-lag-reader")
    out: dict[tuple[str, int], int] = {}
    try:
        consumer.assign([TopicPartition(t, p, o) for (t, p), o in at.items()])
        deadline = time.monotonic() + timeout_s
        while len(out) < len(at) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            tp = (msg.topic() or "", msg.partition() or 0)
            if tp not in out:
                out[tp] = msg.timestamp()[1]
                consumer.pause([TopicPartition(tp[0], tp[1])])
    finally:
        consumer.close()
    return out


def health(link: FlowLink, *, with_lag: bool = True, syncs: offset_sync_log.SyncsState | None = None
           ) -> FlowHealth:
    """The flow as the clusters see it. Needs the target; the source only for the lag. `syncs`: a long-lived reader
    of the flow's offset syncs (see `lags`)."""
    flow = link.flow
    wanted = requested(link)
    try:
        holders, lease_error = tuple(flow_lease.holders(link.target_admin, flow.name)), ""
    except OperationalError as exc:
        holders, lease_error = (), str(exc)
    beat = heartbeats.newest(link.settings("target", "consumer"), HEARTBEATS_TOPIC).get((flow.source, flow.target))
    age = None if beat is None else heartbeats.age_s(beat.timestamp_ms, time.time())
    measured, error, instead = None, "", None
    if with_lag:
        try:
            measured = tuple(lags(link, syncs))
        except OperationalError as exc:
            error = str(exc)
            instead = unmirrored(link)
    return FlowHealth(flow.name, wanted, holders, age, measured, error, lease_error=lease_error, unmirrored=instead)


def wait_until(check: Callable[[], bool], timeout_s: float, interval_s: float = 1.0) -> bool:
    """Whether `check` holds within `timeout_s`, asked every `interval_s`. A check that cannot be answered (an
    OperationalError: a cluster slow to answer while a stream stops) is asked again; if the last one before the
    deadline could not be answered either, its error is raised."""
    deadline = time.monotonic() + timeout_s
    while True:
        failed: OperationalError | None = None
        try:
            if check():
                return True
        except OperationalError as exc:
            failed = exc
        if time.monotonic() >= deadline:
            if failed is not None:
                raise failed
            return False
        time.sleep(interval_s)


def stop(link: FlowLink, reason: str, timeout_s: float = 120.0) -> Requested:
    """Ask the flow to stop and wait until no instance holds its lease (its running batch finishes first)."""
    flow, admin = link.flow, link.target_admin
    wanted = request(link, STOPPED, reason)
    if not wait_until(lambda: not flow_lease.holders(admin, flow.name), timeout_s):
        raise OperationalError(f"flow {flow.name} still runs {timeout_s:.0f} s after the stop request "
                               f"(holder: {', '.join(flow_lease.holders(admin, flow.name))})")
    return wanted


def start(link: FlowLink, reason: str, wait_s: float = 0.0) -> bool:
    """Ask the flow to run; with `wait_s`, wait that long for an instance to hold its lease. True if it runs."""
    request(link, RUNNING, reason)
    return wait_until(lambda: bool(flow_lease.holders(link.target_admin, link.name)), wait_s)


def launch_decision(link: FlowLink) -> tuple[bool, str]:
    """Whether a supervisor should launch the flow's stream now, and why (one line)."""
    flow = link.flow
    wanted = requested(link)
    if wanted.state != RUNNING:
        return False, f"flow {flow.name} is {wanted.line()}: not started"
    holders = flow_lease.holders(link.target_admin, flow.name)
    if holders:
        return False, f"flow {flow.name} already runs on {', '.join(holders)}"
    return True, f"flow {flow.name} is {wanted.line()} and no instance holds its lease: starting it"


def wait_caught_up(link: FlowLink, timeout_s: float,
                   progress: Callable[[list[PartitionLag]], None] = lambda _: None) -> list[PartitionLag]:
    """Wait until every replicated partition's lag is 0; raises naming the partitions still behind."""
    deadline = time.monotonic() + timeout_s
    flow = link.flow
    syncs = offset_sync_log.SyncsState(link.settings("target", "consumer"), link.syncs_topic)
    try:
        while True:
            measured = lags(link, syncs)
            behind = [lag for lag in measured if lag.records]
            if not behind:
                return measured
            progress(behind)
            if time.monotonic() >= deadline:
                named = ", ".join(f"{b.topic}-{b.partition} ({b.records} behind)" for b in behind[:5])
                more = f" and {len(behind) - 5} more" if len(behind) > 5 else ""
                raise OperationalError(f"flow {flow.name}: still behind after {timeout_s:.0f} s: {named}{more}")
            time.sleep(2)
    finally:
        syncs.close()

