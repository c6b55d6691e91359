"""Offset syncs: which upstream (source) offsets landed at which downstream (target) offsets.

MM2 samples one (upstream, downstream) pair every `offset.lag.max` records, which is why its
translated group offsets re-read records after a failover. The stream records every mirrored record
instead, compressed into runs: a run says upstream offsets `u .. u+n-1` landed at downstream
`d .. d+n-1`. A gap on either side (transaction markers, compaction, refused records, another
writer) starts a new run. Beside the runs, one position per partition says how far the flow has
read the source (`upstream_next`, exclusive) and where its next record will land (`downstream_next`).

Both live in one compacted topic per flow on the target, `mirrorflow-offset-syncs.{source}.internal`:
a run is keyed by its first upstream offset, so compaction keeps every run (and a run that grows is
rewritten under the same key); a position is keyed by its partition, so only the newest survives.
Wire format (Kafka protocol types, big-endian; strings are int16 length + UTF-8):
  run key       {kind: int16 = 0, topic: string, partition: int32, upstream: int64}
  run value     {version: int16 = 0, downstream: int64, length: int64}
  position key  {kind: int16 = 1, topic: string, partition: int32}
  position value{version: int16 = 0, upstream_next: int64, downstream_next: int64}

Invariants of `runs_of`, each tested:
  A. expanding the runs gives back exactly the (upstream, downstream) pairs, in order;
  B. runs are maximal: two neighbouring runs never continue each other on both sides;
  C. upstream and downstream strictly increase across runs when they did in the pairs.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mirrorflow import wire

_RUN, _POSITION = 0, 1
_VERSION = 0


def topic_name(source_alias: str, separator: str = ".") -> str:
    return f"mirrorflow-offset-syncs{separator}{source_alias}{separator}internal"


def is_offset_syncs_topic(topic: str) -> bool:
    return topic.startswith("mirrorflow-offset-syncs")


@dataclass(frozen=True)
class OffsetRun:
    topic: str
    partition: int
    upstream: int
    downstream: int
    length: int

    @property
    def upstream_end(self) -> int:
        """One past the last upstream offset of the run."""
        return self.upstream + self.length

    @property
    def downstream_end(self) -> int:
        return self.downstream + self.length

    def key(self) -> bytes:
        return struct.pack(">h", _RUN) + wire.string(self.topic) + struct.pack(">iq", self.partition, self.upstream)

    def value(self) -> bytes:
        return struct.pack(">hqq", _VERSION, self.downstream, self.length)


@dataclass(frozen=True)
class Position:
    topic: str
    partition: int
    upstream_next: int
    downstream_next: int

    def key(self) -> bytes:
        return struct.pack(">h", _POSITION) + wire.string(self.topic) + struct.pack(">i", self.partition)

    def value(self) -> bytes:
        return struct.pack(">hqq", _VERSION, self.upstream_next, self.downstream_next)


def decode(key: bytes, value: bytes | None) -> OffsetRun | Position | None:
    """The record an offset-syncs topic entry holds; None for a tombstone."""
    if value is None:
        return None
    (kind,) = struct.unpack_from(">h", key, 0)
    topic, at = wire.read_string(key, 2)
    if kind == _RUN:
        partition, upstream = struct.unpack_from(">iq", key, at)
        _, downstream, length = struct.unpack(">hqq", value)
        return OffsetRun(topic, partition, upstream, downstream, length)
    if kind == _POSITION:
        (partition,) = struct.unpack_from(">i", key, at)
        _, upstream_next, downstream_next = struct.unpack(">hqq", value)
        return Position(topic, partition, upstream_next, downstream_next)
    raise ValueError(f"unknown offset-sync record kind {kind}")


def runs_of(topic: str, partition: int, pairs: Sequence[tuple[int, int]]) -> list[OffsetRun]:
    """Compress (upstream, downstream) pairs of one partition, in write order, into maximal runs."""
    out: list[OffsetRun] = []
    if not pairs:
        return out
    start_u, start_d = pairs[0]
    prev_u, prev_d = start_u, start_d
    for u, d in pairs[1:]:
        if u != prev_u + 1 or d != prev_d + 1:
            out.append(OffsetRun(topic, partition, start_u, start_d, prev_u - start_u + 1))
            start_u, start_d = u, d
        prev_u, prev_d = u, d
    out.append(OffsetRun(topic, partition, start_u, start_d, prev_u - start_u + 1))
    return out


def continued(previous: OffsetRun | None, runs: list[OffsetRun]) -> list[OffsetRun]:
    """The runs to write when `runs` follow `previous`: its first one merged into `previous` if it continues it."""
    if previous is None or not runs:
        return runs
    first = runs[0]
    if first.upstream == previous.upstream_end and first.downstream == previous.downstream_end:
        merged = OffsetRun(previous.topic, previous.partition, previous.upstream, previous.downstream,
                           previous.length + first.length)
        return [merged, *runs[1:]]
    return runs


def expand(runs: Iterable[OffsetRun]) -> list[tuple[int, int]]:
    return [(r.upstream + i, r.downstream + i) for r in runs for i in range(r.length)]



def read_all(consumer_settings: Mapping[str, Any], topic: str, timeout_s: float = 30.0
             ) -> tuple[dict[tuple[str, int], Position], dict[tuple[str, int], dict[int, OffsetRun]]]:
    """Every position, and every surviving run keyed by its first upstream offset, per topic partition."""
    from mirrorflow.clients import read_to_end

    positions: dict[tuple[str, int], Position] = {}
    runs: dict[tuple[str, int], dict[int, OffsetRun]] = {}
    for msg in read_to_end(consumer_settings, topic, "offset syncs", timeout_s=timeout_s):
        record = decode(msg.key() or b"", msg.value())
        if isinstance(record, Position):
            positions[(record.topic, record.partition)] = record
        elif isinstance(record, OffsetRun):
            runs.setdefault((record.topic, record.partition), {})[record.upstream] = record
    return positions, runs


def read(consumer_settings: Mapping[str, Any], topic: str,
         timeout_s: float = 30.0) -> tuple[dict[tuple[str, int], Position], dict[tuple[str, int], OffsetRun]]:
    """The committed positions and the newest run of every partition in an offset-syncs topic."""
    positions, runs = read_all(consumer_settings, topic, timeout_s)
    return positions, {tp: max(by_start.values(), key=lambda r: r.upstream) for tp, by_start in runs.items()}
