"""Offset translation: where a consumer group resumes on the other cluster, from a flow's offset syncs.

A group's committed offset U on the source is the next record it has not consumed. Its exact target offset
is the one just past every copy of a record it has consumed:

    T(U) = 1 + max{ d : target offset d holds the mirror of a source offset u < U }

A consumer starting at T(U) reads no record the group consumed. Because the stream only replays suffixes
(a restarted batch re-sends everything from its start), it reads every mirrored record the group has not
consumed. If no consumed record was mirrored, T(U) is the earliest mirror, or the target's start.

MirrorMaker 2 keeps one sync every `offset.lag.max` records and resumes one past the newest sync at or below
U. That is never ahead of the data, but it is behind by up to `offset.lag.max` records. Given every record
as a sync, its rule gives T(U) again. That rule is the fallback here when U is beyond what the flow has
read (the group is ahead of the mirror): no offset is exact then, and the answer is marked inexact.

Invariants, each tested:
  E. with U at or below the flow's read point, the mirrors at or after T(U) are exactly those of u >= U;
  M. T is monotonic in U for fixed syncs;
  N. MM2's rule on sampled syncs is never past T(U): T(U) - mm2(U) is the re-reads MM2 would cost;
  F. failback: no mirrored source offset lies between U and source_offset(T(U)).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mirrorflow.offset_syncs import OffsetRun, Position


@dataclass(frozen=True)
class PartitionSyncs:
    """What a flow's offset syncs say about one source partition: every surviving run, and its position."""

    runs: tuple[OffsetRun, ...]
    position: Position | None = None

    @property
    def upstream_read(self) -> int:
        """The source offset the flow has read up to (exclusive)."""
        latest = max(self.runs, key=lambda r: r.downstream, default=None)
        return max(self.position.upstream_next if self.position else 0, latest.upstream_end if latest else 0)

    @property
    def downstream_written(self) -> int:
        """The target offset the flow has written up to (exclusive), as far as the syncs know."""
        latest = max((r.downstream_end for r in self.runs), default=0)
        return max(self.position.downstream_next if self.position else 0, latest)


@dataclass(frozen=True)
class Translation:
    """An offset on the other cluster; None means that cluster's start of the partition."""

    offset: int | None
    exact: bool
    reason: str = ""


def target_offset(syncs: PartitionSyncs, upstream: int) -> Translation:
    """T(U): the target offset a group at source offset `upstream` resumes from."""
    past = max((r.downstream + min(upstream - r.upstream, r.length) for r in syncs.runs if r.upstream < upstream),
               default=0)
    mirrors = [max(r.downstream, past) for r in syncs.runs if r.downstream_end > past]
    if mirrors:
        offset: int | None = min(mirrors)  # skips records another writer put between the mirrors
    elif past or syncs.runs:
        offset = past
    elif syncs.position is not None and syncs.position.downstream_next >= 0:
        offset = syncs.position.downstream_next
    else:
        offset = None
    if upstream <= syncs.upstream_read:
        return Translation(offset, True)
    return Translation(offset, False, f"the group is at {upstream}, past what the flow has read "
                                      f"({syncs.upstream_read}); resuming at the newest mirrored record")


def source_offset(syncs: PartitionSyncs, downstream: int) -> Translation:
    """The inverse, for failback: the source offset a group at target offset `downstream` resumes from."""
    consumed = [r.upstream + min(downstream - r.downstream, r.length) for r in syncs.runs if r.downstream < downstream]
    if consumed:
        offset: int | None = max(consumed)
    elif syncs.runs:
        offset = min(r.upstream for r in syncs.runs)
    else:
        offset = None
    if downstream <= syncs.downstream_written:
        return Translation(offset, True)
    return Translation(offset, False, f"the group is at {downstream}, past what the flow has written "
                                      f"({syncs.downstream_written})")


def mm2_offset_syncs(pairs: Iterable[tuple[int, int]], offset_lag_max: int) -> list[tuple[int, int]]:
    """The (upstream, downstream) syncs MirrorMaker 2 would keep for the same writes, in write order.

    A sync is emitted for the first record, after an upstream gap, when the target went backwards, and when
    the downstream offset is `offset_lag_max` past one beyond the last sync. (MM2's 60 s timer and its
    64-slot store are left out: both only thin the syncs further.)
    """
    out: list[tuple[int, int]] = []
    last_sync_d = prev_u = prev_d = -1
    for u, d in pairs:
        if (not out or u - prev_u != 1 or d < prev_d or d - (last_sync_d + 1) >= offset_lag_max):
            out.append((u, d))
            last_sync_d = d
        prev_u, prev_d = u, d
    return out


def mm2_offset_syncs_of_runs(runs: Iterable[OffsetRun], offset_lag_max: int) -> list[tuple[int, int]]:
    """`mm2_offset_syncs` of the runs' records (in write order), without expanding them: O(syncs), not O(records)."""
    out: list[tuple[int, int]] = []
    last_sync_d = prev_u = prev_d = -1
    step = max(offset_lag_max, 0) + 1
    for run in runs:
        u, d = run.upstream, run.downstream
        if not out or u - prev_u != 1 or d < prev_d or d - (last_sync_d + 1) >= offset_lag_max:
            out.append((u, d))
            last_sync_d = d
        # Inside a run both sides advance by one, so the next sync is due at last_sync_d + 1 + offset_lag_max.
        nxt = max(last_sync_d + step, d + 1)
        while nxt < run.downstream_end:
            out.append((u + nxt - d, nxt))
            last_sync_d = nxt
            nxt += step
        prev_u, prev_d = run.upstream_end - 1, run.downstream_end - 1
    return out


def mm2_target_offset(syncs: Sequence[tuple[int, int]], upstream: int) -> int | None:
    """MirrorMaker 2's rule: the newest sync at or below U; its downstream if equal, else one past it."""
    below = [(u, d) for u, d in syncs if u <= upstream]
    if not below:
        return None
    u, d = max(below)
    return d if u == upstream else d + 1
