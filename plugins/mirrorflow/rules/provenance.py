"""The provenance header: where a mirrored record came from (cluster, topic, partition, offset).

The stream appends one to every record it writes (unless `mirrorflow.provenance.header.enabled`
is false). It lets a flow refuse a record that would return to the very topic it came from, so
active/active cannot loop even with the identity policy, and it lets the audit prove completeness
record by record. A record that crossed several hops carries one header per hop, oldest first.

Applications forward input headers to their output (Kafka Streams, Connect, Flink, tracing): a
record produced on the target from a mirrored input carries that input's hop, names the target,
and is new data all the same. So a record is refused only when a hop names the target cluster
*and* the topic the record would be written to.

Invariants, each tested:
  A. parse(encode(p)) == p for every cluster alias without "/" and every legal topic name;
  B. returns_to(headers, c, t) is True iff some provenance header in headers names cluster c and topic t.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

HEADER = "mirrorflow.provenance"


@dataclass(frozen=True)
class Provenance:
    cluster: str
    topic: str
    partition: int
    offset: int

    def encode(self) -> bytes:
        # "/" cannot occur in a topic name, so the topic and the numbers split off from the right.
        return f"{self.cluster}/{self.topic}/{self.partition}/{self.offset}".encode()

    @staticmethod
    def parse(value: bytes) -> Provenance:
        cluster, topic, partition, offset = value.decode().rsplit("/", 3)
        return Provenance(cluster, topic, int(partition), int(offset))


def prefix(cluster: str, topic: str | None = None) -> bytes:
    """What every provenance value written for records from `cluster` (and its `topic`) starts with."""
    # Neither an alias nor a topic holds "/": the prefix cannot match a longer alias or topic.
    return f"{cluster}/".encode() if topic is None else f"{cluster}/{topic}/".encode()


def returns_to(headers: Iterable[tuple[str, bytes | None]] | None, cluster: str, topic: str) -> bool:
    """True when some hop of this record's journey started on `cluster`'s `topic`: writing it there would loop."""
    if not headers:
        return False
    start = prefix(cluster, topic)
    return any(k == HEADER and v is not None and v.startswith(start) for k, v in headers)


def hops(headers: Iterable[tuple[str, bytes | None]] | None) -> list[Provenance]:
    """Every provenance header of a record, oldest hop first."""
    return [Provenance.parse(v) for k, v in headers or () if k == HEADER and v is not None]
