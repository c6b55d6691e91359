"""The stream's Spark source: it says where each micro-batch ends, per source partition; it reads no record.

A PySpark Python data source (`pyspark.sql.datasource`). Its offsets are a base of every partition's offset, a file
beside the checkpoint, and the partitions that moved since it (rules/offset_bases), when the plan names a folder
for bases (`bases_path`); else Kafka's source offsets JSON ({topic: {partition: offset}}, sorted: batch_plan P4).
spark/offset_log reads both.
`latestOffset` runs in the long-lived Python process Spark starts for the source, beside the driver: one metadata
request every `refresh.topics.interval.seconds` when the file gives it (MM2's key: how soon a new topic or partition
is mirrored), else every DISCOVERY_S, and one ListOffsets round trip per broker per trigger (the last stable offset
when the flow reads committed records), fewer while the flow is idle (S6); admission control caps a batch at the
flow's records per batch (batch_plan.admit). While the stream is a whole batch behind, the next trigger's
ends are read while the batch copies (batch_plan P7): across a WAN the trigger no longer waits for the leaders'
and the ends' round trips. The driver cuts each batch into ranges per task slot and the
copier reads them (spark/copier), so no Python worker reads this source's rows for Spark; `partitions` and `read`
give the same ranges (batch_plan.slot_ranges) to anyone who does.

  S1  The first batch's start is resolved once and kept beside the checkpoint (`initial_path`): a first batch
      replayed after a crash starts where it did, even from "latest".
  S2  A source that does not answer holds the next batch back (latestOffset returns its start), it does not fail
      the query: the stream waits out a link cut, and resumes when the source answers.
  S3  A topic leaves the offsets only when two metadata answers in a row lack it; a new partition joins them only
      once its log start is known.
  S5  `reportLatestOffset` says when the ends it reports were asked for (rules/source_reads R1): the earlier of the
      moments the list of their partitions and the ends themselves were asked for, each taken before its request
      is sent. The driver holds them against the flow's positions (status.metrics, invariant C).
  S4  A batch is admitted from where the copy got to: the positions a lingering batch reached past its end offsets
      (spark/copier C6), which the driver keeps beside the checkpoint (`positions_path`), are its start
      (batch_plan P9), so Spark's offsets follow the copy instead of falling behind it. A file missing or
      unreadable plans from Spark's start, as before.
  S6  An idle flow's ends are read at most IDLE_READ_SHARE of a core's time: after a read that found nothing new,
      the next waits as long as that read's CPU time over IDLE_READ_SHARE, at most QUIET_MAX_S, or WATCHED_MAX_S
      for a watched spell (at 12 partitions a read costs about a millisecond: every trigger reads). A spell longer
      than WATCH_FROM_S is watched, in a flow of at most WATCH_MAX_PARTITIONS partitions: a consumer assigned every
      partition at the ends just read, whose fetches the brokers hold until a record arrives, ends the spell at the
      first record it is given. The watcher stays assigned from one spell to the next while the ends do not move
      (librdkafka's assignment is work per partition); a batch, a record given to it, or other ends release it.
      Every trigger reads again once a batch runs. The ends reported (S5) are those of the spell's first read: a
      quiet flow's mirrored-through time is up to the spell's length old, never later than the truth.

Spark pickles the source's class to its Python processes: `source_class` makes one per query, holding the plan.
The plan holds the source's admin settings (secrets: never printed); the reader opens its admin client lazily.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from confluent_kafka import Consumer, IsolationLevel, KafkaException
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from mirrorflow.errors import OperationalError
from mirrorflow.kafka import admin_sync
from mirrorflow.rules import batch_plan, offset_bases, source_reads
from mirrorflow.rules.batch_plan import Range
from mirrorflow.spark import offset_log

log = logging.getLogger(__name__)

DISCOVERY_S = 10.0  # the planner's default metadata interval (MM2's 600 s default would hold a new topic 10 minutes)
IDLE_READ_SHARE = 0.01  # S6: of a core, what reading an idle flow's ends may cost
# S6: the longest spell without a read, unwatched. Reached by flows whose read of every end (and the metadata due
# with it) takes 0.3 s of CPU or more: about 24,000 partitions here. A record arriving then waits up to a spell.
QUIET_MAX_S = 30.0
WATCHED_MAX_S = 60.0  # S6: the longest watched spell (a record ends it at once)
WATCH_FROM_S = 0.5  # S6: a spell this long or longer is watched by a consumer
# S6: how long a broker holds the watcher's fetch when no record comes (a record answers it at once): each answer
# has librdkafka go over every partition watched, and leaves a finished fetch on the broker's watch lists.
WATCH_FETCH_WAIT_MS = 5_000
# S6: the most partitions a watcher is assigned. A broker keeps each waiting fetch on a watch list of every partition
# in it until about a thousand fetches have finished (`fetch.purgatory.purge.interval.requests`): a watcher of
# 24,000 partitions filled a 1 GiB source broker's heap. A larger flow's spells are not watched (QUIET_MAX_S).
WATCH_MAX_PARTITIONS = 1_000
NAME = "mirrorflow_ranges"  # the prefix of each flow's source name (source_name)
RANGES_DDL = "topic string, partition int, from_offset long, until_offset long"

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class SourcePlan:
    """What the planner needs: the source cluster, which topics, how it reads, how many task slots."""

    flow: str
    source: str
    admin_settings: Mapping[str, Any] = field(repr=False)
    pattern: str  # a Python regex matched whole: the flow's subscription pattern
    read_committed: bool
    slots: int
    max_records: int | None
    # Where a new checkpoint starts: "earliest", "latest", or {topic: {partition: offset}} (-2 earliest, -1 latest)
    starting: str | Mapping[str, Mapping[str, int]]
    initial_path: str | None = None  # S1: the first batch's start, as resolved
    positions_path: str | None = None  # S4: the positions lingering batches reached, kept by the driver
    discovery_s: float = DISCOVERY_S  # how often the source's topics are listed
    watch_settings: Mapping[str, Any] | None = field(default=None, repr=False)  # S6: the watcher's; None: no watcher
    bases_path: str | None = None  # rules/offset_bases: where the bases are; None: every offset in each entry


@dataclass(frozen=True)
class SlotRanges(InputPartition):
    ranges: tuple[Range, ...]

    def __init__(self, ranges: Sequence[Range]) -> None:
        object.__setattr__(self, "ranges", tuple(ranges))


class RangeSource(DataSource):
    plan: ClassVar[SourcePlan]

    @classmethod
    def name(cls) -> str:
        return source_name(cls.plan.flow)

    def schema(self) -> str:
        return RANGES_DDL

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        # Called only in the process Spark runs for this source's reader: its own, for its whole life.
        sys.excepthook = _quiet_socket_closed
        return RangeReader(self.plan)


def _quiet_socket_closed(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
    """The reader's process ends with Spark's query. When the JVM resets the socket instead of closing it, PySpark's
    runner (4.x) fails flushing its goodbye and prints three tracebacks for what is a normal stop: one line instead.
    Any other error keeps its traceback."""
    if isinstance(exc, (BrokenPipeError, ConnectionResetError)):
        print(f"mirrorflow: the source planner's connection to Spark closed as its query stopped ({exc})",
              file=sys.stderr)
        return
    sys.__excepthook__(kind, exc, tb)


def source_name(flow: str) -> str:
    """The name a flow's source is registered under: Spark keeps one class per name in a session, so flows whose
    queries share a session each need their own."""
    return f"{NAME}_{hashlib.sha256(flow.encode()).hexdigest()[:16]}"


def source_class(plan: SourcePlan) -> type[RangeSource]:
    """A RangeSource holding `plan` (a class made here is pickled with its attributes, by value)."""
    return type("PlannedRangeSource", (RangeSource,), {"plan": plan, "__module__": __name__})


class RangeReader(DataSourceStreamReader):
    def __init__(self, plan: SourcePlan) -> None:
        self.plan = plan
        self._admin: AdminClient | None = None
        self._counts: dict[str, int] = {}
        self._counts_at = float("-inf")
        self._listed_at = float("-inf")  # S5: when the partition list in `_counts` was asked for (wall clock)
        self._warned_until = 0.0
        self._read: source_reads.EndsRead | None = None  # S5: the ends last read, as reported
        self._missing_once: set[str] = set()
        self._turn = 0  # batches planned since this reader began (P6: whose turn it is); restarts at 0
        # P7: the next trigger's ends and log starts (P8), and metadata when due, being read
        self._ahead: Future[_Answers] | None = None
        self._reading: ThreadPoolExecutor | None = None  # one thread: at most one read ahead at a time
        self._quiet_until = 0.0  # S6: no ends read before then (monotonic), the flow being idle
        self._watcher: Consumer | None = None  # S6: assigned during a watched spell only
        self._watching = False
        self._watched: Mapping[TopicPartition, int] | None = None  # S6: where the watcher was assigned
        self._base: offset_bases.Base | None = None  # the base last made or read
        # The last read, against the base it was reported against, as reported
        self._report: tuple[source_reads.EndsRead, offset_bases.Base | None, dict[str, Any]] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"plan": self.plan, "_admin": None, "_counts": {}, "_counts_at": float("-inf"),
                "_listed_at": float("-inf"), "_warned_until": 0.0, "_read": None,
                "_missing_once": set(), "_turn": 0, "_ahead": None, "_reading": None, "_quiet_until": 0.0,
                "_watcher": None, "_watching": False, "_watched": None, "_base": None, "_report": None}

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient(dict(self.plan.admin_settings))
        return self._admin

    def _partitions(self, counted: Mapping[str, int] | None = None, listed_at: float | None = None
                    ) -> list[TopicPartition]:
        """The source partitions the pattern matches (metadata at most every `discovery_s`; `counted`: an answer read
        ahead, asked for at `listed_at`)."""
        if counted is None and time.monotonic() - self._counts_at >= self.plan.discovery_s:
            listed_at = time.time()
            counted, _ = admin_sync.partition_counts(self.admin, self.plan.source)
        if counted is not None:
            self._listed_at = listed_at if listed_at is not None else time.time()
            matches = re.compile(self.plan.pattern).fullmatch
            found = {t: n for t, n in counted.items() if matches(t)}
            # S3: a topic drops out when two answers in a row lack it (one answer may miss a topic with an error).
            missing = set(self._counts) - set(found)
            kept = {t: self._counts[t] for t in missing - self._missing_once}
            self._missing_once = missing
            self._counts = {**kept, **found}
            self._counts_at = time.monotonic()
        return [(t, p) for t, n in sorted(self._counts.items()) for p in range(n)]

    def _offsets(self, tps: list[TopicPartition], spec: Any, within: float | None = None) -> dict[TopicPartition, int]:
        isolation = IsolationLevel.READ_COMMITTED if self.plan.read_committed else IsolationLevel.READ_UNCOMMITTED
        return admin_sync.offsets(self.admin, self.plan.source, tps, spec, isolation, available_within=within)

    def initialOffset(self) -> dict[str, dict[str, int]]:
        kept = read_initial(self.plan.initial_path)
        if kept is not None:
            return batch_plan.encode(kept)
        tps = self._partitions()
        starting = self.plan.starting
        earliest = self._offsets(tps, OffsetSpec.earliest())  # type: ignore[no-untyped-call]
        latest = self._offsets(tps, OffsetSpec.latest())  # type: ignore[no-untyped-call]
        if isinstance(starting, str):
            chosen = latest if starting == "latest" else earliest
        else:
            given = batch_plan.decode(starting)
            chosen = {}
            for tp in tps:
                offset = given.get(tp, -2)
                chosen[tp] = earliest[tp] if offset == -2 else latest[tp] if offset == -1 else offset
        offsets = batch_plan.encode(chosen)
        if self.plan.initial_path is not None:
            path = Path(self.plan.initial_path)
            path.parent.mkdir(parents=True, exist_ok=True)
            staged = path.with_suffix(f".{os.getpid()}")
            staged.write_text(json.dumps(offsets))
            staged.replace(path)
        return offsets

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadAllAvailable() if self.plan.max_records is None else ReadMaxRows(self.plan.max_records)

    def _read_ahead(self, tps: list[TopicPartition]) -> None:
        """P7: read the ends the next trigger may plan from while this batch copies, and the metadata if it will be
        due by then."""
        if self._reading is None:
            self._reading = ThreadPoolExecutor(1, thread_name_prefix=f"ends-{self.plan.flow}")
        metadata_due = time.monotonic() + 1.0 - self._counts_at >= self.plan.discovery_s
        self._ahead = self._reading.submit(self._answers, tps, metadata_due)

    def _answers(self, tps: list[TopicPartition], metadata_due: bool) -> _Answers:
        listed_at = time.time()
        counted = admin_sync.partition_counts(self.admin, self.plan.source)[0] if metadata_due else None
        asked_at = time.time()
        latest = self._offsets(tps, OffsetSpec.latest(), within=10.0)  # type: ignore[no-untyped-call]
        return _Answers(counted, listed_at if counted is not None else None, latest, asked_at,
                        self._offsets(tps, OffsetSpec.earliest(), within=10.0))  # type: ignore[no-untyped-call]

    def _read_ahead_answers(self) -> _Answers:
        """What the read ahead found, if it is in (taken once)."""
        ahead, self._ahead = self._ahead, None
        if ahead is None or not ahead.done() or ahead.exception() is not None:
            return _Answers()
        return ahead.result()

    def latestOffset(self, start: dict[str, dict[str, int]], limit: ReadLimit) -> dict[str, dict[str, int]]:
        if self._quiet():
            return start
        cpu_before = time.process_time()
        started = self._decode(start)
        begun = batch_plan.resumed(started, read_positions(self.plan.positions_path))
        cap = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        try:
            ahead = self._read_ahead_answers()
            tps = self._partitions(ahead.counted, ahead.listed_at)
            answered, asked_at, deleted_to = ahead.latest, ahead.asked_at, ahead.log_starts
            if answered is None or answered.keys() != set(tps) or not batch_plan.fills(begun, answered, cap):
                asked_at = time.time()
                answered = self._offsets(tps, OffsetSpec.latest(), within=10.0)  # type: ignore[no-untyped-call]
                deleted_to = {}  # P8 plans only from log starts read with the ends it plans from
            present = set(tps)
            self._read = source_reads.EndsRead(min(self._listed_at, asked_at), dict(answered),
                                               complete=answered.keys() >= present)
            # A partition without a leader just now stays where it is; one whose topic is gone drops out.
            latest = {**{tp: o for tp, o in begun.items() if tp in present}, **answered}
            new = [tp for tp in latest if tp not in begun]
            log_starts = self._offsets(new, OffsetSpec.earliest(), within=10.0)  # type: ignore[no-untyped-call]
            # A new partition whose log start did not answer waits for the next trigger (P2 needs its log start).
            latest = {tp: o for tp, o in latest.items() if tp in begun or tp in log_starts}
        except (OperationalError, KafkaException) as exc:
            # S2: the source unreachable is no failure of the query: no new batch until it answers (the driver's
            # health and lag say the source is unreachable), as Spark's Kafka source waits.
            if time.monotonic() >= self._warned_until:
                self._warned_until = time.monotonic() + 60
                log.warning("flow %s: the source's end offsets cannot be read (%s); no new batch until they can",
                            self.plan.flow, exc)
            return start
        end = batch_plan.admit(begun, latest, {**deleted_to, **log_starts}, cap, self._turn)
        if end != begun:
            self._turn += 1  # a batch runs: the next one moves the next turn's partitions (P6)
            self._stop_watching()
        elif begun == started:
            self._begin_quiet(time.process_time() - cpu_before, latest)
        if batch_plan.fills(end, latest, cap):
            self._read_ahead(tps)
        if end == started:
            return start  # offset_bases B2, whichever base start names
        moved = {tp: o - begun[tp] for tp, o in end.items() if o > begun.get(tp, o)}
        return self._encode(end, batch_plan.full(sum(moved.values()), cap, len(moved)))

    def _decode(self, offsets: Mapping[str, Any]) -> dict[TopicPartition, int]:
        """Every partition's offset an offset of this source stands for (a base read when it names another)."""
        number = offset_bases.base_number(offsets)
        if number is not None and (self._base is None or self._base.number != number):
            if self.plan.bases_path is None:
                raise OperationalError(f"flow {self.plan.flow}: an offset names base {number}, and the planner "
                                       "has no folder of bases")
            try:
                self._base = offset_log.read_base(Path(self.plan.bases_path), number)
            except (OSError, ValueError) as exc:
                raise OperationalError(f"flow {self.plan.flow}: the checkpoint's offset base {number} cannot be read "
                                       f"({exc}); restore {self.plan.bases_path}, or move the checkpoint aside: "
                                       "a new one resumes where the offset syncs say") from None
        return offset_bases.expand(offsets, self._base)

    def _encode(self, offsets: Mapping[TopicPartition, int], full: bool) -> dict[str, Any]:
        """Offsets as Spark logs them: against the base (a new one when due, or for a `full` batch: offset_bases
        B3), or whole."""
        if self.plan.bases_path is None:
            return batch_plan.encode(offsets)
        base, moved = self._base, offset_bases.moved(offsets, self._base)
        if base is None or moved is None or (full and moved):
            folder = Path(self.plan.bases_path)
            numbers = offset_log.base_numbers(folder)
            base = self._base = offset_bases.Base(numbers[-1] + 1 if numbers else 0, dict(offsets))
            offset_log.write_base(folder, base)
            moved = {}
        return offset_bases.entry(base, moved)

    def _quiet(self) -> bool:
        """S6: whether this trigger reads no ends, the flow idle; a record the watcher is given ends the spell."""
        if time.monotonic() >= self._quiet_until:
            return False  # a watcher stays assigned: the read may find the same ends (S6)
        if self._watching and self._watcher is not None:
            try:
                woken = any(m.error() is None for m in self._watcher.consume(64, 0))
            except KafkaException:
                woken = True  # the watcher failed: read, as without one
            if woken:
                self._quiet_until = 0.0
                self._stop_watching()
                return False
        return True

    def _begin_quiet(self, read_cpu_s: float, ends: Mapping[TopicPartition, int]) -> None:
        watched = (self.plan.watch_settings is not None and read_cpu_s / IDLE_READ_SHARE >= WATCH_FROM_S
                   and len(ends) <= WATCH_MAX_PARTITIONS)
        spell = min(WATCHED_MAX_S if watched else QUIET_MAX_S, read_cpu_s / IDLE_READ_SHARE)
        self._quiet_until = time.monotonic() + spell
        if not watched:
            self._stop_watching()
            return
        if self._watching and self._watched == ends:
            return  # S6: assigned where these ends are, and given no record since
        self._stop_watching()
        try:
            if self._watcher is None:
                self._watcher = Consumer({
                    **(self.plan.watch_settings or {}), "group.id": f"mirrorflow-watch-{self.plan.flow}",
                    "enable.auto.commit": False, "enable.partition.eof": False, "auto.offset.reset": "latest",
                    "fetch.wait.max.ms": WATCH_FETCH_WAIT_MS, "queued.min.messages": 1,
                    "max.partition.fetch.bytes": 1024,
                    "isolation.level": "read_committed" if self.plan.read_committed else "read_uncommitted"})
            self._watcher.assign([ConfluentTopicPartition(t, p, o) for (t, p), o in ends.items()])
            self._watching, self._watched = True, dict(ends)
        except KafkaException as exc:
            log.info("flow %s: no watcher for the idle spell (%s); the ends are read when it ends", self.plan.flow,
                     exc)

    def _stop_watching(self) -> None:
        if self._watching and self._watcher is not None:
            self._watching, self._watched = False, None
            with contextlib.suppress(KafkaException):
                self._watcher.unassign()

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The source's end offsets as last read and when (S5): the query's progress shows them to the driver (its
        lag, its mirrored-through time). Spark only reports this, it plans nothing from it."""
        if self._read is None:
            return None
        if self._report is None or self._report[0] is not self._read or self._report[1] is not self._base:
            # made once a read (and base): asked at every trigger; against the offset base, an idle flow's is small
            base = None if self._base is None else (self._base.number, self._base.offsets)
            self._report = (self._read, self._base, source_reads.report(self._read, base))
        return self._report[2]

    def partitions(self, start: dict[str, dict[str, int]], end: dict[str, dict[str, int]]) -> list[SlotRanges]:
        slots = batch_plan.slot_ranges(self._decode(start), self._decode(end), self.plan.slots)
        return [SlotRanges(ranges) for ranges in slots]

    def read(self, partition: InputPartition) -> Iterator[tuple[str, int, int, int]]:
        assert isinstance(partition, SlotRanges)
        for r in partition.ranges:
            yield r.topic, r.partition, r.from_offset, r.until_offset

    def commit(self, end: dict[str, dict[str, int]]) -> None:
        pass

    def stop(self) -> None:
        if self._reading is not None:
            self._reading.shutdown(wait=False, cancel_futures=True)
        if self._watcher is not None:
            with contextlib.suppress(KafkaException, RuntimeError):
                self._watcher.close()


@dataclass(frozen=True)
class _Answers:
    """A read ahead's answers (P7): partition counts (None: not asked) and when they were asked for, the ends (None:
    not in) and when they were asked for, the log starts."""

    counted: dict[str, int] | None = None
    listed_at: float | None = None
    latest: dict[TopicPartition, int] | None = None
    asked_at: float = float("inf")
    log_starts: dict[TopicPartition, int] = field(default_factory=dict)


def read_positions(path: str | Path | None) -> dict[tuple[str, int], int]:
    """S4: the positions lingering batches reached past their ends, as the driver last wrote them ({} if none)."""
    if path is None:
        return {}
    try:
        return batch_plan.decode(json.loads(Path(path).read_text()))
    except (OSError, ValueError, AttributeError, TypeError):
        return {}


def write_positions(path: str | Path, positions: Mapping[tuple[str, int], int]) -> None:
    """The driver's side of S4: replaced whole (a reader sees the old file or the new one)."""
    target = Path(path)
    staged = target.with_suffix(f".{os.getpid()}")
    staged.write_text(json.dumps(batch_plan.encode(positions)))
    staged.replace(target)


def read_initial(path: str | Path | None) -> dict[tuple[str, int], int] | None:
    """The first batch's start kept beside a checkpoint (S1), None if there is none yet."""
    if path is None:
        return None
    try:
        return batch_plan.decode(json.loads(Path(path).read_text()))
    except FileNotFoundError:
        return None
