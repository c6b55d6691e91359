"""Offset-sync anchors: a bounded set of exact (upstream, downstream) points per source partition.

An anchor says: source offset `upstream` of the partition was mirrored at target offset `downstream`.
Between two anchors the target holds the mirrored records themselves, each naming its source offset in
its provenance header, so a group offset resolves exactly by reading the target between the two anchors
around it (translation.py). Anchors only keep that read short and correct; they need not list every
record, so transaction markers, compaction holes and refused records cost no state.

How the stream writes one target partition: batch after batch, each in source-offset order. Only a
replay (a retried task, a restarted query, a crash) writes a lower source offset after a higher one, and
it starts at the first record of a batch. That record is a *barrier* anchor; the records of an attempt
that failed before it are not anchored at all and always lie just before a barrier.

Invariants, each tested (tests/test_anchors.py, on simulated histories with replays and failed attempts):
  S. anchors are in write order: downstream strictly increases; the first one ever written is the origin.
  R. resolvable: for consecutive anchors A, B and any U with A.upstream < U <= B.upstream, the mirrored
     records in (A.downstream, B.downstream] have upstream >= U on a suffix only (false..false, true..true),
     so a binary search over the target finds the first one; after the last anchor the same holds up to
     the partition's position.
  T. thinning drops only a non-barrier anchor X whose kept neighbours satisfy P.upstream < X.upstream <
     N.upstream, never the first or the last one: R holds for the merged bracket, the answers do not change.
  C. when barriers alone exceed the bound, the oldest anchors after the first go; if a barrier is among them,
     the first (the only anchor ever coarse) is marked `coarse`: R may not hold in its bracket, and an answer
     there is the bracket's start (translation C: never past T(U), inexact). The first anchor stays, so no
     offset the source still holds falls below every anchor.
  P. `prune_below(L)` keeps the last anchor with upstream < L and everything after it: the answer for
     every U >= L is unchanged, and below the first anchor (no longer the origin) the answer is inexact.
  B. at most `limit` anchors, whatever the history; each has a slot in [0, limit), its record key on the
     compacted offset-syncs topic, so the topic holds at most `limit` anchors per partition.
  W. any prefix of a drain's writes, applied to what the topic held, leaves anchors for which R (or C) holds
     (a crash part way through the driver's writes): anchors moved into a smaller limit's slots, and the first
     anchor marked coarse, first (copies, never missing), then the tombstones of dropped anchors oldest first
     (pruning takes the oldest, P; thinning only non-barriers, T), then the new anchors oldest first (as batches
     record them). A slot both dropped and given a new anchor is written twice: its tombstone in its place, then
     the anchor. Not covered: a smaller limit whose moved anchors find only slots just dropped, or a first anchor
     marked coarse in a slot just dropped; the move then removes the dropped anchor first.
  D. an anchor's `run` > 0 says the `run` records that end at it were mirrored one to one: source offsets
     upstream-run+1..upstream at target offsets downstream-run+1..downstream, nothing else between. `one_to_one`
     grants it only when a batch's count of records written fills both spans (so neither side has a hole, a
     marker or another writer's record there); a batch that continues the head's run on both sides extends it. A
     fact about the log, not about a bracket: thinning and pruning leave it true.
  I. an `imported` anchor is an offset sync of another mirror the flow took over from (rules/takeover): the records
     of its bracket carry no provenance header, so an answer there is the bracket's start, as in C (MM2's own rule).
     Imported anchors are the oldest ones, so every anchor before an imported one is imported too; thinning and
     pruning keep that, and a thinned imported anchor leaves a bracket that starts at an imported one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

# With its position and loss record, at most 34 live offset-sync records per source partition: what every restart and
# checkpoint task reads (24,000 partitions: about 0.8 million). Translation's reads grow with the log of a bracket,
# which thinning widens as history grows, so a small bound costs a round a few reads more for a group far behind.
DEFAULT_LIMIT = 32
DEFAULT_SPACING = 0  # least target offsets between anchors near the head; 0: every batch's end, the bound thins


@dataclass(frozen=True, slots=True)
class Anchor:
    upstream: int
    downstream: int
    barrier: bool = False  # the first record of a possible replay: never thinned
    origin: bool = False  # the first record this flow ever wrote to the partition
    coarse: bool = False  # C: the bracket from here to the next anchor lost a barrier to the bound
    imported: bool = False  # I: another mirror's offset sync; its bracket holds that mirror's copies
    run: int = 0  # D: records ending here mirrored one to one (0: not known)


def one_to_one(first: Anchor, last: Anchor, records: int) -> int:
    """D: the run a batch's `records` written between its `first` and `last` copies make, 0 if they leave a hole."""
    span = last.upstream - first.upstream + 1
    return records if records > 0 and span == records and last.downstream - first.downstream + 1 == records else 0


class PartitionAnchors:
    """One source partition's anchors, in write order, each in a slot; `drain()` gives the slot writes."""

    def __init__(self, limit: int = DEFAULT_LIMIT, spacing: int = DEFAULT_SPACING,
                 stored: Iterable[tuple[int, Anchor]] = ()) -> None:
        if limit < 2:
            raise ValueError("an anchor limit below 2 cannot hold a bracket")
        self.limit, self.spacing = limit, spacing
        pairs = sorted(stored, key=lambda sa: sa[1].downstream)
        self.anchors: list[Anchor] = [a for _, a in pairs]
        self.slots: list[int] = [s for s, _ in pairs]
        # The slot writes since the last drain (W): anchors moved into a smaller limit's slots, slots whose anchor
        # was dropped (with the downstream it had), and slots given an anchor.
        self._moved: dict[int, Anchor] = {}
        self._dropped: dict[int, int] = {}
        self._added: dict[int, Anchor] = {}
        misplaced = [i for i, s in enumerate(self.slots) if s >= limit]
        for i in misplaced:  # a smaller limit than the one they were written with
            self._dropped[self.slots[i]] = self.anchors[i].downstream
            self.slots[i] = -1
        if len(self.anchors) > limit:
            self._thin(limit)
        for i in [i for i, s in enumerate(self.slots) if s < 0]:
            self.slots[i] = self._free_slot()
            self._moved[self.slots[i]] = self.anchors[i]

    def __len__(self) -> int:
        return len(self.anchors)

    @property
    def last(self) -> Anchor | None:
        return self.anchors[-1] if self.anchors else None

    def record_batch(self, first: Anchor, last: Anchor, *, replay: bool, fresh: bool, records: int = 0) -> None:
        """One batch's first and last mirrored records of this partition.

        `replay`: the batch may repeat records already written (a retried task, the first batch of a query);
        `fresh`: the flow never wrote this partition before (its first record is the origin); `records`: how many
        it wrote from `first` to `last` (0: not known), for D.
        """
        head = self.last
        if head is not None and first.downstream <= head.downstream:
            return  # already recorded (a batch recorded twice): nothing new
        run = one_to_one(first, last, records)
        if run and head is not None and (first.upstream, first.downstream) == (head.upstream + 1, head.downstream + 1):
            run += max(head.run, 1)  # D: the head is a copy too, and its run goes on into this batch
        if run != last.run:
            last = replace(last, run=run)  # about 2 us: a batch of 24,000 partitions without runs skips 50 ms
        if head is None:
            self.append(replace(first, origin=fresh, barrier=True))
        elif replay or first.upstream <= head.upstream:
            self.append(replace(first, barrier=True))
        if last.downstream > first.downstream:
            self._advance_head(last)

    def _advance_head(self, anchor: Anchor) -> None:
        """Move the newest sample forward instead of adding one while it is within `spacing` of the one before."""
        if len(self.anchors) >= 2:
            head, before = self.anchors[-1], self.anchors[-2]
            movable = (not head.barrier and not head.origin and before.upstream < head.upstream < anchor.upstream
                       and anchor.downstream - before.downstream <= self.spacing)
            if movable:
                self.anchors[-1] = anchor
                self._added[self.slots[-1]] = anchor
                return
        self.append(anchor)

    def append(self, anchor: Anchor) -> None:
        """Add a newer anchor as it is (thinning first if the store is full)."""
        if len(self.anchors) >= self.limit:
            self._thin(max(1, self.limit - max(1, self.limit // 8)))
        self.anchors.append(anchor)
        self.slots.append(self._free_slot())
        self._added[self.slots[-1]] = anchor

    def _free_slot(self) -> int:
        """A slot no anchor holds, if possible one whose anchor was not dropped since the last drain (W: reusing it
        costs a tombstone before the anchor)."""
        used = set(self.slots)
        free = [s for s in range(self.limit) if s not in used]
        return next((s for s in free if s not in self._dropped), free[0])

    def prune_below(self, log_start: int) -> int:
        """Drop the anchors no offset still on the source needs (invariant P); returns how many."""
        below = [i for i, a in enumerate(self.anchors) if a.upstream < log_start]
        if not below or below[-1] == 0:
            return 0
        return self._drop(range(below[-1]))

    def _thin(self, target: int) -> None:
        ratio = 1.0 / max(1, self.limit)
        while len(self.anchors) > target:
            drop = self._thinnable(ratio)
            if len(self.anchors) - len(drop) <= target or ratio > 1e9:
                if len(self.anchors) - len(drop) > target:  # barriers alone exceed the bound (C)
                    self._drop(drop)
                    oldest = range(1, len(self.anchors) - target + 1)
                    if any(self.anchors[i].barrier for i in oldest):
                        self._mark_coarse()
                    self._drop(oldest)
                else:
                    self._drop(drop)
                return
            ratio *= 2

    def _mark_coarse(self) -> None:
        first = self.anchors[0]
        if first.coarse:
            return
        self.anchors[0] = replace(first, coarse=True)
        slot = self.slots[0]
        if slot >= 0:  # -1: misplaced, the constructor moves it into a slot (written first)
            self._moved[slot] = self.anchors[0]
            self._added.pop(slot, None)  # written once, with the moves

    def _thinnable(self, ratio: float) -> list[int]:
        """Anchors whose removal keeps every gap within max(spacing, ratio * distance from the head), by rule T."""
        a = self.anchors
        if len(a) < 3:
            return []
        head = a[-1].downstream
        kept_d, chain_u = a[-1].downstream, a[-1].upstream
        drop = []
        for i in range(len(a) - 2, 0, -1):
            x, p = a[i], a[i - 1]
            allowed = max(self.spacing, (head - x.downstream) * ratio)
            if not x.barrier and p.upstream < x.upstream < chain_u and kept_d - p.downstream <= allowed:
                drop.append(i)
            else:
                kept_d = x.downstream
            chain_u = x.upstream
        return drop

    def _drop(self, indexes: Iterable[int]) -> int:
        gone = set(indexes)
        if not gone:
            return 0
        for i in gone:
            slot = self.slots[i]
            if slot >= 0:  # -1: misplaced, its old slot's tombstone is written already
                self._dropped[slot] = min(self._dropped.get(slot, self.anchors[i].downstream),
                                          self.anchors[i].downstream)
                self._added.pop(slot, None)
                self._moved.pop(slot, None)
        self.anchors = [a for i, a in enumerate(self.anchors) if i not in gone]
        self.slots = [s for i, s in enumerate(self.slots) if i not in gone]
        return len(gone)

    @property
    def pending(self) -> bool:
        """Whether `drain` has a slot write to return."""
        return bool(self._moved or self._dropped or self._added)

    def drain(self) -> list[tuple[int, Anchor | None]]:
        """The slot writes since the last call, in the order they must be written (W): an anchor, or None for a slot
        to tombstone."""
        writes: list[tuple[int, Anchor | None]] = [
            (s, a) for s, a in sorted(self._moved.items(), key=lambda sa: sa[1].downstream)]
        writes += [(s, None) for s, _ in sorted(self._dropped.items(), key=lambda sd: sd[1]) if s not in self._moved]
        writes += [(s, a) for s, a in sorted(self._added.items(), key=lambda sa: sa[1].downstream)]
        self._moved, self._dropped, self._added = {}, {}, {}
        return writes
