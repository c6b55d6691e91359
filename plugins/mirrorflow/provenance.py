"""The provenance header: where a mirrored record came from (cluster, topic, partition, offset).

The stream appends one to every record it writes (unless `mirrorflow.provenance.header.enabled`
is false). It lets a flow refuse records that came from its own target, so active/active cannot
loop even with the identity policy, and it lets the audit prove completeness record by record.
A record that crossed several hops carries one header per hop, oldest first.

Invariants, each tested:
  A. parse(encode(p)) == p for every cluster alias without "/" and every legal topic name;
  B. came_from(headers, c) is True iff some provenance header in headers names cluster c.
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


def prefix(cluster: str) -> bytes:
    """What every provenance value written for records from `cluster` starts with."""
    return f"{cluster}/".encode()


def came_from(headers: Iterable[tuple[str, bytes | None]] | None, cluster: str) -> bool:
    """True when some hop of this record's journey started on `cluster`."""
    if not headers:
        return False
    start = prefix(cluster)
    return any(k == HEADER and v is not None and v.startswith(start) for k, v in headers)


def hops(headers: Iterable[tuple[str, bytes | None]] | None) -> list[Provenance]:
    """Every provenance header of a record, oldest hop first."""
    return [Provenance.parse(v) for k, v in headers or () if k == HEADER and v is not None]
