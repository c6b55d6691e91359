"""Since when every record the source acknowledged is on the target: the planner's reads of the source's ends,
held against the flow's positions. Only facts the brokers keep count (offsets, log-append order, the moment a
request was sent); a record's own timestamp, set by its producer, may precede its append by any amount.

Policy only, no I/O: the stream's source (spark/range_source) makes the reads, the driver's metrics keep them.

  R1  A read's `as_of` is no later than the moment the planner asked for the list of partitions it read the ends
      of, nor than the moment it asked for those ends. So a record the source acknowledged before `as_of` lies in
      one of the read's partitions (a partition created after the list was asked for holds no record acknowledged
      before it) and below that partition's end (offsets are given in log-append order, and the end a broker
      answers is at or above every offset it had acknowledged when the request arrived). A read is `complete`
      when it has an end for every partition of its list; an incomplete one (a partition without a leader just
      then) bounds only its own partitions.
  R2  Positions cover a read when each of its partitions' ends is at or below the flow's position there (every
      record below a position is on the target: positions commit with their records). A partition the flow has
      no position of covers only an end of 0.
  R3  `through` is the `as_of` of the newest complete read that positions have covered, or None before one: every
      record the source acknowledged before `through` is on the target. It never moves back and is never later
      than the newest read's `as_of` (`newest`).
  Bound: the newest read, and at most MAX_PENDING complete reads not yet covered (when one more comes, every other
  pending one is dropped, counting down from the newest, which stays: the rest spread over the backlog; dropping a
  read only makes `through` coarser, never later).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

TopicPartition = tuple[str, int]

MAX_PENDING = 8


@dataclass(frozen=True)
class EndsRead:
    """One read of the source's ends by the planner (R1)."""

    as_of: float  # wall-clock seconds
    ends: Mapping[TopicPartition, int]
    complete: bool = True

    def covered_by(self, positions: Mapping[TopicPartition, int]) -> bool:
        """R2."""
        return all(end <= positions.get(tp, 0) for tp, end in self.ends.items())

    def not_covered(self, positions: Mapping[TopicPartition, int]) -> int:
        """Records below this read's ends and at or above the positions: on the source, not on the target."""
        return sum(max(end - positions.get(tp, 0), 0) for tp, end in self.ends.items())


@dataclass
class SourceReads:
    """The reads a driver keeps (bound: above), and `through` (R3)."""

    through: float | None = None
    newest: EndsRead | None = None
    pending: list[EndsRead] = field(default_factory=list)  # complete, not covered yet, oldest first

    def add(self, read: EndsRead, positions: Mapping[TopicPartition, int]) -> None:
        """A read the planner reported; one already seen (the same `as_of`) or older than the newest is ignored."""
        if self.newest is not None and read.as_of <= self.newest.as_of:
            return
        self.newest = read
        if read.complete:
            self.pending.append(read)
            if len(self.pending) > MAX_PENDING:
                self.pending = self.pending[::-2][::-1]  # every other one, from the newest down
        self.cover(positions)

    def cover(self, positions: Mapping[TopicPartition, int]) -> None:
        """The newest pending read `positions` cover becomes `through`, and it and every older one leave."""
        for i in range(len(self.pending) - 1, -1, -1):
            read = self.pending[i]
            if read.covered_by(positions):
                if self.through is None or read.as_of > self.through:
                    self.through = read.as_of
                del self.pending[:i + 1]
                return


def report(read: EndsRead, base: tuple[int, Mapping[TopicPartition, int]] | None = None) -> dict[str, object]:
    """A read as the planner reports it to the driver through Spark's query progress (JSON). Spark asks for the report
    at every trigger (ten a second) and its runner encodes it each time, and the JVM takes it in: as nested
    objects, 24,000 partitions' ends took a third of a core of an idle flow's planner, as JSON text within it (every
    quote escaped) three times what `ends_text` costs: "topic end0,end1,...;topic ..." by partition, an end left
    empty where the read has none (topic names hold none of " ,:;").

    Given an offset base (rules/offset_bases: its number and offsets), and when it is the shorter, only the ends
    that differ from the base's offsets: `ends_moved`, "topic p:end,p:end,...;..." (`p:` where the read has no end
    of a partition of the base). An idle flow's ends are the base's but for what moved since it was made: its report
    is as small as its offset-log entry."""
    if base is not None:
        number, offsets = base
        moved = {tp: end for tp, end in read.ends.items() if offsets.get(tp) != end}
        unread = [tp for tp in offsets if tp not in read.ends]
        if len(moved) + len(unread) <= len(read.ends) // 2:
            by_topic: dict[str, list[str]] = {}
            for (t, p), end in sorted(moved.items()):
                by_topic.setdefault(t, []).append(f"{p}:{end}")
            for t, p in sorted(unread):
                by_topic.setdefault(t, []).append(f"{p}:")
            text = ";".join(f"{t} " + ",".join(entries) for t, entries in sorted(by_topic.items()))
            return {"as_of": read.as_of, "complete": read.complete, "base": number, "ends_moved": text}
    ends: dict[str, dict[int, int]] = {}
    for (t, p), end in read.ends.items():
        ends.setdefault(t, {})[p] = end
    text = ";".join(f"{t} " + ",".join(str(ps[p]) if p in ps else "" for p in range(max(ps) + 1))
                    for t, ps in sorted(ends.items()))
    return {"as_of": read.as_of, "complete": read.complete, "ends_text": text}


def _parse_ends_text(text: str) -> dict[tuple[str, int], int]:
    ends = {}
    for entry in text.split(";") if text else ():
        topic, _, listed = entry.partition(" ")
        for p, end in enumerate(listed.split(",")):
            if end:
                ends[(topic, p)] = int(end)
    return ends


def _apply_moved(text: str, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    ends = dict(offsets)
    for entry in text.split(";") if text else ():
        topic, _, listed = entry.partition(" ")
        for item in listed.split(","):
            p, _, end = item.partition(":")
            if end:
                ends[(topic, int(p))] = int(end)
            else:
                ends.pop((topic, int(p)), None)
    return ends


def parse_report(doc: object, base_offsets: Callable[[int], Mapping[TopicPartition, int] | None] | None = None
                 ) -> EndsRead | None:
    """`report`'s inverse (or, from earlier versions, the ends as JSON text or objects); None for anything else (a
    progress from before S5 reported only the ends), and for a report against a base `base_offsets` (number ->
    offsets, None when it has no such base) cannot give."""
    if not isinstance(doc, Mapping):
        return None
    try:
        if isinstance(doc.get("ends_moved"), str):
            offsets = base_offsets(int(doc["base"])) if base_offsets is not None else None
            if offsets is None:
                return None
            ends = _apply_moved(doc["ends_moved"], offsets)
        elif isinstance(doc.get("ends_text"), str):
            ends = _parse_ends_text(doc["ends_text"])
        else:
            given = json.loads(doc["ends"]) if isinstance(doc.get("ends"), str) else doc.get("ends")
            if not isinstance(given, Mapping):
                return None
            ends = {(str(t), int(p)): int(o) for t, ps in given.items() for p, o in ps.items()}
        return EndsRead(float(doc["as_of"]), ends, bool(doc.get("complete", False)))
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
