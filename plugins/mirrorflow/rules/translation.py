"""Offset translation: where a consumer group resumes on the other cluster, from a flow's offset syncs.

A group's committed offset U on the source is the next record it has not consumed. Its exact target offset
is the one just past every copy of a record it has consumed:

    T(U) = 1 + max{ d : target offset d holds the mirror of a source offset u < U }

A consumer starting at T(U) reads no record the group consumed, and, because the stream only replays whole
batches from their start, every mirrored record it has not consumed. If no consumed record was mirrored,
T(U) is the earliest mirror. (Records of other writers between the mirrors are skipped: T(U) is the first
mirror at or after that offset.)

The offset syncs keep only anchors (anchors.py); T(U) is resolved from the target itself: between the last
anchor A with A.upstream < U and the next one, the mirrors' provenance headers name their source offsets,
and "source offset >= U" holds on a suffix there (anchors.py, invariant R), so a binary search over the
target's records finds T(U). The cost is logarithmic in the bracket, which is short near the head.

The search is written as steps: each asks for one `Read` of the target and is given what it returned, so a round
can run the searches of many partitions side by side, one fetch for all of them per step (kafka/target_reader);
`target_offsets` and `source_offset` run them one read at a time.

MirrorMaker 2 keeps one sync every `offset.lag.max` records and resumes one past the newest sync at or below
U. That is never ahead of the data, but it is behind by up to `offset.lag.max` records. Its rule is the
fallback here when U is beyond what the flow has read (the group is ahead of the mirror): no offset is exact
then, and the answer is marked inexact.

Invariants, each tested (tests/test_translation.py):
  E. with U at or below the flow's read point, the mirrors at or after T(U) are exactly those of u >= U;
  M. T is monotonic in U for fixed syncs;
  N. MM2's rule on sampled syncs is never past T(U): T(U) - mm2(U) is the re-reads MM2 would cost;
  F. failback: no mirrored source offset lies between U and source_offset(T(U));
  P. thinning and pruning the anchors never change T(U) for a U still on the source.
  C. in a bracket marked coarse (anchors.py C: the bound dropped a replay's barrier there), or starting at an imported
     anchor (anchors.py I: another mirror's copies, without provenance headers), the answer is the
     bracket's start, one past a copy of a record below U: never past T(U), marked inexact with why; below an
     imported first anchor (older than the oldest sync taken over), the partition's start.
  L. in a bracket whose end anchor has a one-to-one run (anchors.py D) covering U-1 and U, T(U) is read off the
     run, without a read of the target, and equals what the search would find.
"""

from __future__ import annotations

import bisect
from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from mirrorflow.rules.anchors import Anchor
from mirrorflow.rules.offset_syncs import Position

SCAN_WINDOW = 2_048  # below this many target offsets a bracket is read through rather than bisected
COARSE_NOTE = ("more replays than mirrorflow.offset-syncs.anchors.max holds within the source's retention dropped an "
               "offset sync here")
IMPORTED_NOTE = "copied by the mirror the flow took over from, which left an offset sync only every so often"


Mirrors = list[tuple[int, int]]  # (target offset, source offset) of the mirrors a read returned, in order
Answer = TypeVar("Answer")


@dataclass(frozen=True)
class Read:
    """A read of the remote partition a search asks for: the mirrors in [start, end), in order, from `start` on, as
    many as one fetch returns and at least one unless [start, end) holds none."""

    start: int
    end: int


Steps = Generator[Read, Mirrors, Answer]  # a search: yields each Read, is sent its Mirrors, returns its answer


class TargetReader(Protocol):
    """The mirrors of one source partition in the remote partition, read by target offset."""

    def chunk(self, start: int, end: int) -> Mirrors:
        """What `Read(start, end)` asks for."""
        ...


def run(steps: Steps[Answer], reader: TargetReader) -> Answer:
    """A search's answer, its reads made one at a time."""
    try:
        read = next(steps)
        while True:
            read = steps.send(reader.chunk(read.start, read.end))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


@dataclass(frozen=True)
class PartitionSyncs:
    """What a flow's offset syncs say about one source partition: its anchors (write order) and position."""

    anchors: tuple[Anchor, ...] = ()
    position: Position | None = None
    _suffix_min: tuple[int, ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        mins, low = [], None
        for a in reversed(self.anchors):
            low = a.upstream if low is None else min(low, a.upstream)
            mins.append(low)
        object.__setattr__(self, "_suffix_min", tuple(reversed(mins)))

    @property
    def upstream_next(self) -> int:
        """The flow's position as the syncs know it: the source offset it has read up to (exclusive)."""
        newest = max((a.upstream + 1 for a in self.anchors), default=0)
        return max(self.position.upstream_next if self.position else 0, newest)

    @property
    def downstream_next(self) -> int:
        """Where the flow's next copy lands, as far as the syncs know (the target offset written up to, exclusive)."""
        newest = self.anchors[-1].downstream + 1 if self.anchors else 0
        known = self.position.downstream_next if self.position is not None else None
        return max(known or 0, newest)

    def below(self, upstream: int) -> int | None:
        """Index of the last anchor (in write order) whose upstream offset is below `upstream`."""
        # _suffix_min is non-decreasing: the last index whose suffix minimum is below U is that anchor.
        i = bisect.bisect_left(self._suffix_min, upstream) - 1
        return i if i >= 0 else None


@dataclass(frozen=True)
class Translation:
    """An offset on the other cluster; None means that cluster's start of the partition."""

    offset: int | None
    exact: bool
    reason: str = ""


def target_offset(syncs: PartitionSyncs, upstream: int, reader: TargetReader | None) -> Translation:
    """T(U): the target offset a group at source offset `upstream` resumes from."""
    return target_offsets(syncs, [upstream], reader)[upstream]


def target_offsets(syncs: PartitionSyncs, uppers: Iterable[int], reader: TargetReader | None
                   ) -> dict[int, Translation]:
    """T(U) for many U of one partition: grouped by bracket, in order, each read starting where the last ended."""
    steps = target_offsets_steps(syncs, uppers, readable=reader is not None)
    return run(steps, reader) if reader is not None else _unread(steps)


def _unread(steps: Steps[Answer]) -> Answer:
    try:
        read = next(steps)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    raise AssertionError(f"a search without a reader asked for {read}")


def target_offsets_steps(syncs: PartitionSyncs, uppers: Iterable[int], readable: bool = True
                         ) -> Steps[dict[int, Translation]]:
    """`target_offsets` as steps; with `readable` False (provenance headers off) it asks for no read."""
    wanted = sorted(set(uppers))
    out: dict[int, Translation] = {}
    anchors = syncs.anchors
    by_bracket: dict[int | None, list[int]] = {}
    for u in wanted:
        by_bracket.setdefault(syncs.below(u) if anchors else None, []).append(u)
    for i, group in by_bracket.items():
        if not anchors:
            position = syncs.position
            offset = position.downstream_next if position is not None else None
            for u in group:
                out[u] = _marked(syncs, u, offset, "")
            continue
        if i is None:
            first = anchors[0]
            if first.imported:  # the old mirror's copies of records below it lie anywhere before it
                for u in group:
                    out[u] = (_marked(syncs, u, first.downstream, f"{IMPORTED_NOTE}: resumed at the copy its oldest "
                                      "sync kept names (may re-read)", exact=False) if u == first.upstream else
                              _marked(syncs, u, None, f"{IMPORTED_NOTE}, none at or below source offset {u} kept: "
                                      "resumed from the partition's start (may re-read)", exact=False))
                continue
            note = "" if first.origin else (f"below the oldest offset sync kept (source offset {first.upstream}); "
                                            "the source no longer holds those records")
            for u in group:
                out[u] = _marked(syncs, u, first.downstream, note, exact=first.origin)
            continue
        lo = anchors[i].downstream + 1
        hi = anchors[i + 1].downstream if i + 1 < len(anchors) else max(syncs.downstream_next, lo)
        if i + 1 < len(anchors) and not anchors[i].coarse:
            group = _on_the_run(syncs, anchors[i + 1], group, out)
            if not group:
                continue
        if anchors[i].coarse or anchors[i].imported:
            for u in group:
                out[u] = _marked(syncs, u, lo, (IMPORTED_NOTE if anchors[i].imported else COARSE_NOTE)
                                 + ": resumed just past the newest offset sync below (may re-read)", exact=False)
            continue
        if not readable:
            for u in group:
                out[u] = _marked(syncs, u, lo, "provenance headers are off: resumed just past the newest offset "
                                              "sync below (may re-read)", exact=False)
            continue
        for u, offset in (yield from _resolve(group, lo, hi)).items():
            out[u] = _marked(syncs, u, offset, "")
    return out


def _on_the_run(syncs: PartitionSyncs, end: Anchor, uppers: list[int], out: dict[int, Translation]) -> list[int]:
    """L: answers U in the bracket ending at `end` whose record U-1 lies on `end`'s one-to-one run (anchors D):
    the mirror of U-1 is at end.downstream - (end.upstream - (U-1)) and U's is next, so by R the suffix starts
    there. Returns the U it could not answer."""
    if end.run < 2:
        return uppers
    rest = []
    for u in uppers:
        if end.upstream - end.run + 2 <= u <= end.upstream:
            out[u] = _marked(syncs, u, end.downstream - end.upstream + u, "")
        else:
            rest.append(u)
    return rest


def _marked(syncs: PartitionSyncs, upstream: int, offset: int | None, note: str, exact: bool = True) -> Translation:
    if upstream > syncs.upstream_next:
        return Translation(offset, False, f"the group is at {upstream}, past what the flow has read "
                                          f"({syncs.upstream_next}); resuming at the newest mirrored record")
    return Translation(offset, exact and not note, note)


def _resolve(uppers: Sequence[int], lo: int, hi: int) -> Steps[dict[int, int]]:
    """For sorted U, the first mirror in [lo, hi) with source offset >= U (hi if none): invariant R makes
    "source offset >= U" a suffix property there, and the answers are monotonic in U."""
    out: dict[int, int] = {}
    if len(uppers) > 1 and (hi - lo) <= SCAN_WINDOW * len(uppers):
        return (yield from _scan(uppers, lo, hi))
    for u in uppers:
        lo = out[u] = yield from _first_at_least(u, lo, hi)
    return out


def _scan(uppers: Sequence[int], lo: int, hi: int) -> Steps[dict[int, int]]:
    out: dict[int, int] = {}
    k, at = 0, lo
    while k < len(uppers) and at < hi:
        got = yield Read(at, hi)
        if not got:
            break
        for d, u in got:
            while k < len(uppers) and u >= uppers[k]:
                out[uppers[k]] = d
                k += 1
        at = got[-1][0] + 1
    for u in uppers[k:]:
        out[u] = hi
    return out


def _first_at_least(upstream: int, lo: int, hi: int) -> Steps[int]:
    best = hi
    while lo < hi:
        mid = lo if hi - lo <= SCAN_WINDOW else (lo + hi) // 2
        got = yield Read(mid, hi)
        if not got:
            hi = mid
            continue
        hit = next((d for d, u in got if u >= upstream), None)
        if hit is None:
            lo = got[-1][0] + 1
        elif hit != got[0][0] or mid == lo:
            return hit  # the suffix starts inside this read: (or at lo) nothing before it qualifies
        else:
            best, hi = hit, mid
    return best


def source_offset(syncs: PartitionSyncs, downstream: int, reader: TargetReader | None) -> Translation:
    """The inverse, for failback: the source offset a group at target offset `downstream` resumes from,
    one past the newest source record it has consumed a copy of."""
    steps = source_offset_steps(syncs, downstream, readable=reader is not None)
    return run(steps, reader) if reader is not None else _unread(steps)


def source_offsets_steps(syncs: PartitionSyncs, downstreams: Iterable[int], readable: bool = True
                         ) -> Steps[dict[int, Translation]]:
    """`source_offset` for many offsets of one partition, as steps."""
    out = {}
    for d in sorted(set(downstreams)):
        out[d] = yield from source_offset_steps(syncs, d, readable)
    return out


def source_offset_steps(syncs: PartitionSyncs, downstream: int, readable: bool = True) -> Steps[Translation]:
    """`source_offset` as steps; with `readable` False (provenance headers off) it asks for no read."""
    anchors = syncs.anchors
    j = bisect.bisect_left([a.downstream for a in anchors], downstream) - 1
    written = syncs.downstream_next
    # Past the last copy lie the commit marker of a transactional write and other writers' records: a group there
    # has consumed no copy the syncs do not know of.
    exact = downstream <= written or (readable and not (yield Read(written, downstream)))
    note = "" if exact else f"the group is at {downstream}, past what the flow has written ({written})"
    if j < 0:
        if not anchors:
            return Translation(None, exact, note)
        first = anchors[0]
        if not first.origin:
            note = note or f"below the oldest offset sync kept (target offset {first.downstream})"
        return Translation(first.upstream, exact and first.origin, note)
    consumed = max(a.upstream for a in anchors[:j + 1])
    if anchors[j].coarse or anchors[j].imported:  # C: every term of `consumed` is still a consumed copy, so the
        # answer never skips one
        exact, note = False, note or ((IMPORTED_NOTE if anchors[j].imported else COARSE_NOTE)
                                      + ": resumed one past the newest copy known consumed (may re-read)")
    if readable:
        last = yield from _last_before(downstream, anchors[j].downstream + 1)
        if last is not None:
            consumed = max(consumed, last[1])
    elif j + 1 < len(anchors) or downstream > anchors[j].downstream + 1:
        exact, note = False, note or "provenance headers are off: resumed just past the newest offset sync below"
    return Translation(consumed + 1, exact, note)


def _last_before(end: int, start: int) -> Steps[tuple[int, int] | None]:
    """The last mirror in [start, end), or None: windows back from `end`, each four times the last."""
    window = 256
    while end > start:
        at = max(start, end - window)
        found, pos = None, at
        while pos < end:
            got = yield Read(pos, end)
            if not got:
                break
            found, pos = got[-1], got[-1][0] + 1
        if found is not None:
            return found
        end, window = at, window * 4
    return None


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


def mm2_target_offset(syncs: Sequence[tuple[int, int]], upstream: int) -> int | None:
    """MirrorMaker 2's rule: the newest sync at or below U; its downstream if equal, else one past it."""
    below = [(u, d) for u, d in syncs if u <= upstream]
    if not below:
        return None
    u, d = max(below)
    return d if u == upstream else d + 1


MM2_COMPARISON_LIMIT = 100_000


def mm2_comparison(syncs: PartitionSyncs, upstream: int, reader: TargetReader, offset_lag_max: int) -> int | None:
    """MM2's answer for the same writes, its syncs re-derived from the records since the newest anchor below U
    (MM2 syncs at least there: an anchor is a batch start or a gap); None when that is over 100,000 records."""
    i = syncs.below(upstream)
    if i is None:
        return None
    start = syncs.anchors[i].downstream
    end = min(syncs.downstream_next, start + MM2_COMPARISON_LIMIT)
    pairs: list[tuple[int, int]] = []
    at = start
    while at < end:
        got = reader.chunk(at, end)
        if not got:
            break
        pairs.extend((u, d) for d, u in got)
        at = got[-1][0] + 1
    if end < syncs.downstream_next and (not pairs or pairs[-1][0] < upstream):
        return None
    return mm2_target_offset(mm2_offset_syncs(pairs, offset_lag_max), upstream)
