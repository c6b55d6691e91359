"""Per flow, topic and partition metrics with MM2's names, a Prometheus endpoint and a status file.

MM2 names kept: record-count, record-rate, byte-count, byte-rate, record-age-ms and
replication-latency-ms (min/avg/max, plus p99 here). Added: replication lag in records (source end
offset minus mirrored offset) and in seconds (age of the newest mirrored record while lag > 0).
Prometheus names are the MM2 names with `_` for `-`, prefixed `mirrorflow_`.

Invariants, each tested:
  A. a merged distribution has the count, total, min and max of all its parts;
  B. the p99 estimate is an upper bound of the true p99 and at most one bucket above it;
  C. every record the source acknowledged before `mirrored-through` (wall clock) is mirrored: it is the `as_of`
     of the newest complete read of the source's ends (the planner's, range_source S5) that the flow's positions
     have reached in every partition (rules/source_reads R1-R3). It rests on offsets and on when requests were
     sent, never on record timestamps; it is never later than the newest read's `as_of`.
"""

from __future__ import annotations

import bisect
import collections
import json
import os
import socket
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np

from mirrorflow.model import paths
from mirrorflow.model.config import Flow
from mirrorflow.rules import source_reads
from mirrorflow.rules.partition_report import PartitionReport

BATCH_TIMES = 100  # micro-batches whose timings the metrics keep
# Upper bounds (ms) of the latency and age histograms; the last bucket is open.
BOUNDS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 300, 500, 750, 1000, 2000, 5000, 10_000, 30_000, 60_000,
             300_000, 3_600_000)
RATE_WINDOW_S = 30.0


class Distribution:
    """Count, total, min, max (None while empty) and a fixed-bucket histogram of millisecond values."""

    __slots__ = ("buckets", "count", "maximum", "minimum", "total")

    def __init__(self) -> None:
        self.count = self.total = 0
        self.minimum: int | None = None
        self.maximum: int | None = None
        self.buckets = [0] * (len(BOUNDS_MS) + 1)

    def add(self, value: int) -> None:
        value = max(value, 0)
        self.count += 1
        self.total += value
        self.minimum = value if self.minimum is None else min(self.minimum, value)
        self.maximum = value if self.maximum is None else max(self.maximum, value)
        self.buckets[bisect.bisect_left(BOUNDS_MS, value)] += 1

    def add_many(self, values: Sequence[int] | np.ndarray) -> None:
        """add() for each value, at once (the writer's per-record values: one numpy pass, not a Python loop)."""
        if not len(values):
            return
        array = np.maximum(np.asarray(values, dtype=np.int64), 0)
        counts = np.bincount(np.searchsorted(BOUNDS_MS, array, side="left"), minlength=len(self.buckets))
        self.merge(len(array), int(array.sum()), int(array.min()), int(array.max()), (int(n) for n in counts))

    def merge(self, count: int, total: int, minimum: int | None, maximum: int | None, buckets: Iterable[int]) -> None:
        """Another distribution's figures; nothing if it is empty (no count, or no minimum and maximum)."""
        if count <= 0 or minimum is None or maximum is None:
            return
        self.count += count
        self.total += total
        self.minimum = minimum if self.minimum is None else min(self.minimum, minimum)
        self.maximum = maximum if self.maximum is None else max(self.maximum, maximum)
        for i, n in enumerate(buckets):
            self.buckets[i] += n

    @property
    def average(self) -> float:
        return self.total / self.count if self.count else 0.0

    def quantile(self, q: float) -> int:
        """Upper bound of the bucket holding the q-quantile (the maximum for the open bucket)."""
        if not self.count:
            return 0
        rank, seen = q * self.count, 0
        for i, n in enumerate(self.buckets):
            seen += n
            if seen >= rank and n:
                return min(BOUNDS_MS[i], self.maximum or 0) if i < len(BOUNDS_MS) else self.maximum or 0
        return self.maximum or 0


@dataclass
class PartitionMetrics:
    records: int = 0
    bytes: int = 0
    skipped: int = 0
    refused: int = 0
    lost: int = 0  # source records deleted before the flow read them
    stuck: str | None = None  # why the target does not take the partition's records (paused until it does)
    paused_records: int = 0  # records read while paused: mirrored when the partition resumes
    upstream_next: int | None = None  # the flow's position: every record below it is mirrored; None: never read
    source_end: int | None = None  # the source's end as Spark last saw it
    last_timestamp: int | None = None  # the newest mirrored record's timestamp (ms)
    latency: Distribution = field(default_factory=Distribution)
    age: Distribution = field(default_factory=Distribution)
    window: list[tuple[float, int, int]] = field(default_factory=list)  # (time, records, bytes) samples

    # The partition's status entry while its figures hold still (no rate, no lag growing): (what it was made of,
    # the entry, its JSON). An idle flow's status file is then a join of strings.
    entry_made: tuple[tuple[Any, ...], dict[str, Any], str] | None = field(default=None, repr=False, compare=False)

    def rates(self, now: float) -> tuple[float, float]:
        """Records and bytes per second over the last RATE_WINDOW_S: none when no batch counted in it (a sample is
        taken at every batch, and only a batch adds records)."""
        if self.window and now - self.window[-1][0] > RATE_WINDOW_S:
            del self.window[:-1]
            return 0.0, 0.0
        while len(self.window) > 2 and now - self.window[1][0] > RATE_WINDOW_S:
            self.window.pop(0)
        if len(self.window) < 2:
            return 0.0, 0.0
        (t0, r0, b0), (t1, r1, b1) = self.window[0], (now, self.records, self.bytes)
        span = max(t1 - t0, 1e-3)
        return (r1 - r0) / span, (b1 - b0) / span

    @property
    def lag_records(self) -> int:
        if self.source_end is None or self.upstream_next is None:
            return 0
        return max(self.source_end - self.upstream_next, 0)

    def lag_seconds(self, now: float) -> float:
        if self.lag_records == 0 or self.last_timestamp is None:
            return 0.0
        return max(now - self.last_timestamp / 1000.0, 0.0)


RECENT_MINUTES = 5  # the window of the latency `status` and the progress line show


class FlowMetrics:
    """The driver's view of one flow; updated after each micro-batch, read by the endpoint and status."""

    def __init__(self, flow: str, source: str, target: str) -> None:
        self.flow, self.source, self.target = flow, source, target
        self.partitions: dict[tuple[str, int], PartitionMetrics] = {}
        self.batches = 0
        self.started = time.time()
        self.last_batch = 0.0
        # Invariant C: the planner's reads of the source's ends against the flow's positions (every partition's,
        # as the last batch left them). Bound: rules/source_reads.
        self.reads = source_reads.SourceReads()
        self.positions: dict[tuple[str, int], int] = {}
        self.state = "starting"
        self.error = ""
        self.pid, self.host = os.getpid(), socket.gethostname()
        self.spark_ui: str | None = None  # the driver's Spark UI, when it has one
        self.held: dict[str, tuple[str, int]] = {}  # source topic -> (why, records not written since)
        self.producer_inits = 0  # transactional producers initialised (each fences its id's last)
        # The copier's source consumers built, against tasks that read records: the worker cache's misses.
        self.consumer_inits = 0
        self.reading_tasks = 0
        # The last BATCH_TIMES micro-batches: (foreachBatch ms, of which the write job ms), and Spark's own time per
        # trigger outside foreachBatch (offsets, planning, offset and commit logs), as sampled from its progress.
        self.batch_times: collections.deque[tuple[float, float]] = collections.deque(maxlen=BATCH_TIMES)
        self.trigger_overheads: collections.deque[float] = collections.deque(maxlen=BATCH_TIMES)
        # The flow's latency per minute (wall-clock minute, distribution) over the last RECENT_MINUTES: what `status`
        # and the progress line call recent. Bound: RECENT_MINUTES distributions.
        self.recent: collections.deque[tuple[int, Distribution]] = collections.deque(maxlen=RECENT_MINUTES)
        self._lock = threading.Lock()

    def observe(self, reports: Iterable[PartitionReport]) -> None:
        """Fold a batch's task reports in."""
        now = time.time()
        with self._lock:
            self.batches += 1
            self.last_batch = now
            minute = int(now // 60)
            if not self.recent or self.recent[-1][0] != minute:
                self.recent.append((minute, Distribution()))
            recent = self.recent[-1][1]
            for r in reports:
                m = self.partitions.setdefault(r.tp, PartitionMetrics())
                m.records += r.records
                m.bytes += r.bytes
                m.skipped += r.skipped
                m.refused += r.refused
                if r.upstream_next is not None:
                    m.upstream_next = max(m.upstream_next or 0, r.upstream_next)
                if r.last_timestamp is not None:
                    m.last_timestamp = r.last_timestamp
                recent.merge(r.records, r.latency_sum, r.latency_min, r.latency_max, r.latency_buckets)
                m.latency.merge(r.records, r.latency_sum, r.latency_min, r.latency_max, r.latency_buckets)
                m.age.merge(r.records, r.age_sum, r.age_min, r.age_max, ())
            for m in self.partitions.values():
                m.window.append((now, m.records, m.bytes))

    def observe_batch_time(self, batch_ms: float, write_ms: float) -> None:
        with self._lock:
            self.batch_times.append((batch_ms, write_ms))

    def batch_ms_mean(self) -> float:
        """The mean time of the last BATCH_TIMES batches (0 before the first)."""
        with self._lock:
            times = [t for t, _ in self.batch_times]
        return sum(times) / len(times) if times else 0.0

    def observe_trigger_overhead(self, ms: float) -> None:
        with self._lock:
            self.trigger_overheads.append(ms)

    def refused(self, tp: tuple[str, int]) -> int:
        """Records of the partition refused so far (they would have returned to the topic they came from)."""
        with self._lock:
            m = self.partitions.get(tp)
            return m.refused if m is not None else 0

    def count_producer_inits(self, inits: int) -> None:
        with self._lock:
            self.producer_inits += inits

    def count_consumer_inits(self, inits: int, reading_tasks: int) -> None:
        with self._lock:
            self.consumer_inits += inits
            self.reading_tasks += reading_tasks

    def hold(self, topic: str, why: str, records: int) -> None:
        """A topic the stream does not write (its remote topic is gone), and records passed over since."""
        with self._lock:
            self.held[topic] = (why, self.held.get(topic, (why, 0))[1] + records)

    def observe_stuck(self, tp: tuple[str, int], why: str | None, paused_records: int) -> None:
        """A partition the target did not take in time (`why`), records passed over while paused; None: resumed."""
        with self._lock:
            m = self.partitions.setdefault(tp, PartitionMetrics())
            m.stuck = why
            m.paused_records = m.paused_records + paused_records if why is not None else 0

    def observe_loss(self, tp: tuple[str, int], records: int) -> None:
        with self._lock:
            self.partitions.setdefault(tp, PartitionMetrics()).lost += records

    def observe_source_ends(self, ends: Mapping[tuple[str, int], int]) -> None:
        with self._lock:
            for tp, end in ends.items():
                self.partitions.setdefault(tp, PartitionMetrics()).source_end = end

    def observe_read(self, read: source_reads.EndsRead) -> None:
        """A read of the source's ends the planner reported (its partitions' lag, invariant C)."""
        self.observe_source_ends(read.ends)
        with self._lock:
            self.reads.add(read, self.positions)

    def observe_positions(self, positions: Mapping[tuple[str, int], int]) -> None:
        """The flow's positions after a batch, every partition's (invariant C)."""
        with self._lock:
            self.positions = dict(positions)
            self.reads.cover(self.positions)

    def newest_read(self) -> source_reads.EndsRead | None:
        with self._lock:
            return self.reads.newest

    def source_ends(self) -> dict[tuple[str, int], int]:
        with self._lock:
            return {tp: m.source_end for tp, m in self.partitions.items() if m.source_end is not None}

    def forget(self, topics: Iterable[str]) -> None:
        """Drop the partitions of topics that no longer exist: the metrics stay proportional to live partitions."""
        gone = set(topics)
        with self._lock:
            for tp in [tp for tp in self.partitions if tp[0] in gone]:
                del self.partitions[tp]

    def set_state(self, state: str, error: str = "") -> None:
        with self._lock:
            self.state, self.error = state, error

    def entry_texts(self) -> dict[int, str]:
        """The JSON of each partition entry a snapshot holds while its figures are still, by the entry's identity
        (for write_status)."""
        with self._lock:
            return {id(m.entry_made[1]): m.entry_made[2] for m in self.partitions.values() if m.entry_made is not None}

    def snapshot(self) -> dict[str, Any]:
        """A JSON-able view: totals and one entry per topic-partition."""
        now = time.time()
        with self._lock:
            parts: list[dict[str, Any]] = []
            for (topic, partition), m in sorted(self.partitions.items()):
                rate, byte_rate = m.rates(now)
                still = not rate and not byte_rate and not m.lag_seconds(now)
                made = (m.records, m.bytes, m.skipped, m.refused, m.lost, m.stuck, m.paused_records, m.upstream_next,
                        m.source_end, m.latency.count, m.age.count) if still else None
                if made is not None and m.entry_made is not None and m.entry_made[0] == made:
                    parts.append(m.entry_made[1])
                    continue
                parts.append({
                    "topic": topic, "partition": partition, "record-count": m.records, "byte-count": m.bytes,
                    "record-rate": round(rate, 1), "byte-rate": round(byte_rate, 1),
                    "record-age-ms-min": m.age.minimum or 0, "record-age-ms-avg": round(m.age.average, 1),
                    "record-age-ms-max": m.age.maximum or 0,
                    "replication-latency-ms-min": m.latency.minimum or 0,
                    "replication-latency-ms-avg": round(m.latency.average, 1),
                    "replication-latency-ms-max": m.latency.maximum or 0,
                    "replication-latency-ms-p99": m.latency.quantile(0.99),
                    "replication-lag-records": m.lag_records,
                    "replication-lag-seconds": round(m.lag_seconds(now), 3),
                    "mirrored-offset": m.upstream_next, "source-end-offset": m.source_end,
                    "skipped-count": m.skipped, "refused-count": m.refused, "lost-count": m.lost,
                    "stuck": 1 if m.stuck is not None else 0,
                })
                if m.stuck is not None:
                    parts[-1].update({"stuck-why": m.stuck, "paused-records": m.paused_records})
                m.entry_made = None if made is None else (made, parts[-1], _json(parts[-1]))
            latency = Distribution()
            for m in self.partitions.values():
                latency.merge(m.latency.count, m.latency.total, m.latency.minimum, m.latency.maximum,
                              m.latency.buckets)
            window = Distribution()
            for minute, d in self.recent:
                if minute > now // 60 - RECENT_MINUTES:
                    window.merge(d.count, d.total, d.minimum, d.maximum, d.buckets)
            times = list(self.batch_times)
            batch_ms = sum(t for t, _ in times) / len(times) if times else 0.0
            write_ms = sum(w for _, w in times) / len(times) if times else 0.0
            overheads = list(self.trigger_overheads)
            return {
                "flow": self.flow, "source": self.source, "target": self.target, "state": self.state,
                "error": self.error, "pid": self.pid, "host": self.host, "spark-ui": self.spark_ui,
                "updated": now, "started": self.started, "batches": self.batches,
                "transactional-producer-inits": self.producer_inits,
                "source-consumer-inits": self.consumer_inits, "reading-tasks": self.reading_tasks,
                "last-batch": self.last_batch,
                "mirrored-through": self.reads.through,
                # Means over the last BATCH_TIMES batches: the driver's own part of a batch is batch minus write.
                "batch-ms-avg": round(batch_ms, 1), "batch-write-ms-avg": round(write_ms, 1),
                "batch-driver-ms-avg": round(batch_ms - write_ms, 1),
                "trigger-overhead-ms-avg": round(sum(overheads) / len(overheads), 1) if overheads else 0.0,
                "record-count": sum(p["record-count"] for p in parts),
                "byte-count": sum(p["byte-count"] for p in parts),
                "refused-count": sum(p["refused-count"] for p in parts),
                "lost-count": sum(p["lost-count"] for p in parts),
                "held-topics": [{"topic": t, "why": why, "records": n} for t, (why, n) in sorted(self.held.items())],
                "stuck-partitions": [{"topic": p["topic"], "partition": p["partition"], "why": p["stuck-why"],
                                      "records": p["paused-records"]} for p in parts if p["stuck"]],
                "record-rate": round(sum(p["record-rate"] for p in parts), 1),
                "byte-rate": round(sum(p["byte-rate"] for p in parts), 1),
                "replication-lag-records": sum(p["replication-lag-records"] for p in parts),
                "replication-lag-seconds": max((p["replication-lag-seconds"] for p in parts), default=0.0),
                "replication-latency-ms-p99": latency.quantile(0.99),
                # the last RECENT_MINUTES only (the figures above: since the driver started); None: no record
                "recent-minutes": RECENT_MINUTES,
                "recent-latency-ms-p50": window.quantile(0.5) if window.count else None,
                "recent-latency-ms-p99": window.quantile(0.99) if window.count else None,
                "replication-latency-ms-avg": round(latency.average, 1),
                "partitions": parts,
            }


def progress_line(s: Mapping[str, Any], with_lag: bool = True) -> str:
    """One readable line per interval; `with_lag`: the lag as the driver last saw it (`status` shows the clusters'
    lag instead, when they answer)."""
    lag = (f"lag {s['replication-lag-records']} records / {s['replication-lag-seconds']:.1f} s, " if with_lag
           else "")
    return (f"flow {s['flow']}: {s['state']}, {s['record-count']} records mirrored "
            f"({s['record-rate']:.0f}/s, {s['byte-rate'] / 1e6:.1f} MB/s), {lag}{_recent_latency(s)}, "
            f"{len(s['partitions'])} partitions, "
            f"{s['batches']} batches" + (f", {s['refused-count']} refused" if s.get("refused-count") else "")
            + (f", {s['lost-count']} LOST on the source before mirrored" if s.get("lost-count") else "")
            + "".join(f"; {h['topic']} HELD: {h['why']}" for h in s.get("held-topics", ()))
            + _stuck_text(s.get("stuck-partitions", ())))


def _recent_latency(s: Mapping[str, Any]) -> str:
    minutes = s.get("recent-minutes", RECENT_MINUTES)
    if s.get("recent-latency-ms-p99") is None:
        return f"no record in the last {minutes} min"
    return (f"latency p50 {s['recent-latency-ms-p50']} ms p99 {s['recent-latency-ms-p99']} ms over the last "
            f"{minutes} min")


LAGGING_S = 60.0  # a flow this far behind is worth a log line of its own


def progress_shape(s: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a progress line must be logged for when it changes (the stream logs it at least every 5 minutes
    otherwise): state, falling behind or catching up, held topics, stuck partitions, refused and lost counts."""
    return (s["state"], s["replication-lag-seconds"] >= LAGGING_S,
            tuple(h["topic"] for h in s.get("held-topics", ())),
            tuple((x["topic"], x["partition"]) for x in s.get("stuck-partitions", ())),
            s.get("refused-count", 0), s.get("lost-count", 0))


_STUCK_NAMED = 3  # stuck partitions a progress line names; `status` lists every one


def _stuck_text(stuck: Sequence[Mapping[str, Any]]) -> str:
    named = "".join(f"; {x['topic']}-{x['partition']} STUCK (paused): {x['why']}" for x in stuck[:_STUCK_NAMED])
    more = len(stuck) - _STUCK_NAMED
    return named + (f"; and {more} more partition(s) STUCK (paused): see status" if more > 0 else "")


_PER_PARTITION = (
    ("record-count", "counter"), ("byte-count", "counter"), ("record-rate", "gauge"), ("byte-rate", "gauge"),
    ("record-age-ms-min", "gauge"), ("record-age-ms-avg", "gauge"), ("record-age-ms-max", "gauge"),
    ("replication-latency-ms-min", "gauge"), ("replication-latency-ms-avg", "gauge"),
    ("replication-latency-ms-max", "gauge"), ("replication-latency-ms-p99", "gauge"),
    ("replication-lag-records", "gauge"), ("replication-lag-seconds", "gauge"), ("refused-count", "counter"),
    ("lost-count", "counter"), ("stuck", "gauge"),
)


def prometheus_text(snapshots: Iterable[Mapping[str, Any]]) -> str:
    """Prometheus text exposition (version 0.0.4) of flow snapshots."""
    snaps = list(snapshots)
    lines: list[str] = []
    for name, kind in _PER_PARTITION:
        metric = "mirrorflow_" + name.replace("-", "_")
        if kind == "counter":
            metric += "_total"
        lines.append(f"# TYPE {metric} {kind}")
        for s in snaps:
            for p in s["partitions"]:
                labels = (f'flow="{s["flow"]}",source="{s["source"]}",target="{s["target"]}",'
                          f'topic="{p["topic"]}",partition="{p["partition"]}"')
                lines.append(f"{metric}{{{labels}}} {p[name]}")
    lines.append("# TYPE mirrorflow_transactional_producer_inits_total counter")
    for s in snaps:
        lines.append(f'mirrorflow_transactional_producer_inits_total{{flow="{s["flow"]}"}} '
                     f'{s.get("transactional-producer-inits", 0)}')
    lines.append("# TYPE mirrorflow_up gauge")
    for s in snaps:
        lines.append(f'mirrorflow_up{{flow="{s["flow"]}"}} {1 if s["state"] in ("running", "stalled") else 0}')
    return "\n".join(lines) + "\n"


def serve(port: int, flows: Iterable[FlowMetrics], host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """Serve `/metrics` (Prometheus) and `/status` (JSON) on host:port from a daemon thread (0.0.0.0: every
    interface, for a Prometheus on another host)."""
    sources = list(flows)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            snaps = [f.snapshot() for f in sources]
            if self.path.startswith("/metrics"):
                body, kind = prometheus_text(snaps).encode(), "text/plain; version=0.0.4"
            elif self.path.startswith("/status"):
                body, kind = json.dumps(snaps).encode(), "application/json"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="mirrorflow-metrics", daemon=True).start()
    return server


def checkpoint_line(status: Mapping[str, Any], now: float | None = None) -> str:
    """One line on a flow's checkpoints: groups, newest checkpoint's age, `checkpoint-latency-ms`, inexact ones."""
    now = time.time() if now is None else now
    newest = status.get("newest_checkpoint")
    age = "never" if newest is None else f"{max(now - newest, 0):.0f} s ago"  # written by another host's clock
    stats = list(status.get("partitions", {}).values())
    latency = (f", checkpoint-latency-ms avg {sum(s['avg'] for s in stats) / len(stats):.0f} "
               f"max {max(s['max'] for s in stats):.0f}") if stats else ""
    inexact = status.get("inexact", [])
    return (f"checkpoints: {status.get('groups', 0)} group(s), {status.get('partitions_checkpointed', 0)} "
            f"partition(s), newest {age}{latency}" + (f"; {len(inexact)} inexact: {inexact[0]}" if inexact else "")
            + (f"; {status['unread_groups']} group(s) not read" if status.get("unread_groups") else ""))


def flow_home(flow: Flow) -> Path:
    """Where a flow's stream checkpoint and status files live: `$MIRRORFLOW_HOME/streams/{source}-{target}`."""
    return paths.home() / "streams" / f"{flow.source}-{flow.target}"


def status_file(flow: Flow) -> Path:
    return flow_home(flow) / "status.json"


def checkpoint_status_file(flow: Flow) -> Path:
    return flow_home(flow) / "checkpoints.json"


@dataclass(frozen=True)
class InexactCheckpoint:
    """A group's checkpoint of a source partition that is not exact, and why: a row of the checkpoint round's
    status file (`inexact`), read by the flows view."""

    group: str
    topic: str
    partition: int
    note: str

    def row(self) -> dict[str, Any]:
        return {"group": self.group, "topic": self.topic, "partition": self.partition, "note": self.note}

    @classmethod
    def of(cls, row: Any) -> InexactCheckpoint | None:
        """From a status file's row; None for a row this version does not read (a file an older version wrote)."""
        try:
            return cls(str(row["group"]), str(row["topic"]), int(row["partition"]), str(row["note"]))
        except (TypeError, KeyError, ValueError):
            return None


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))  # compact: the C encoder, even for 60,000 entries


def status_text(snapshot: Mapping[str, Any], made: Mapping[int, str] | None = None) -> str:
    """The status file's JSON; a partition entry found in `made` (by identity) is not encoded again."""
    parts = snapshot.get("partitions")
    if not made or not isinstance(parts, list):
        return _json(snapshot)
    head = _json({k: v for k, v in snapshot.items() if k != "partitions"})[:-1]
    body = ",".join(made.get(id(p)) or _json(p) for p in parts)
    return f'{head}{"," if len(head) > 1 else ""}"partitions":[{body}]}}'


def write_status(path: Path, snapshot: Mapping[str, Any], made: Mapping[int, str] | None = None) -> None:
    """Atomically replace the flow's status file (read by `mirrorflow status`); `made`: as for status_text."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(status_text(snapshot, made))
    tmp.replace(path)


def read_status(path: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data
