"""Taking over a flow another mirror ran: where mirrorflow resumes each source partition, from what that mirror
recorded and what the target actually holds.

MirrorMaker 2 commits, per source partition, the offset of the last record it copied (its Connect offsets topic),
every `offset.flush.interval.ms`; it also writes an offset sync (upstream, downstream) now and then, after the
record's copy was acknowledged. A mirror stopped uncleanly (and even a clean one, between commits) leaves copies on
the target that no commit names. So the plan does not trust the commit: it reads the remote partition from the newest
offset sync's downstream offset to its end (the *tail*) and matches it, record by record and by content (key, value,
headers, timestamp), with the source from the sync's upstream offset on. The first source record without a copy in
the tail is where mirrorflow resumes.

A mirror that leaves no offset sync (MirrorMaker 1, a Go mirror maker) commits its consumer group's offsets on the
source: the copy of the group's last consumed record is found in the remote partition's last records (K6), and the
tail is matched from there.

Invariants (tests/test_takeover_plan.py):
  K1. the tail's first record is the copy of the sync's upstream record, else the partition is refused (the remote
      partition was re-created or truncated, or the sync is not this flow's); an empty tail is refused too;
  K2. `resume` is one past the source record of the last in-order copy in the tail: nothing the old mirror copied is
      copied again and nothing it did not copy is skipped;
  K3. a tail record equal to an earlier copy (the old mirror's producer retried) is counted in `repeats`; any other
      record refuses the partition, naming its target offset (another writer, or a source that changed);
  K4. `resume` is never at or below the old mirror's committed offset unless the tail says so: a commit at or past a
      source record after the last copy the tail holds refuses the partition (the target lost records the mirror
      had acknowledged); a commit that names only offsets without a record (a transaction marker: mirrorflow's
      hand-back commits one below its position) does not;
  K5. the anchors handed to the flow's state are in write order (upstream and downstream strictly increase), at most
      `limit`, every one but the last marked `imported` (a bracket of the old mirror's copies: translated by MM2's
      rule, never past the data), the last the exact anchor of the last copy, with the one-to-one run the match
      proved, and so every imported one on that run (anchors D: there a group translates exactly); beyond the
      bound the old mirror's oldest sync and newest ones are kept, the ones between thinned (`thinned`), so an old
      group still translates near where it is;
  K6. without a sync, the copy that stands for one is the latest copy of the last committed record after which the
      window matches the source (K1-K3); none in the window refuses the partition;
  K7. a copy the old mirror wrote (no provenance header) is attributed by content: to the source record at the
      cursor (one past the last attributed) if equal, else the first equal one after it (records between were
      skipped), else the latest equal one before it (a repeat); a copy equal to no source record is attributed to
      none. So a gap-free copy with repeats is attributed exactly as it was written.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from mirrorflow.rules.anchors import Anchor

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Content:
    """A record as a copy must keep it: its offset on its own side and a hash of key, value, headers, timestamp."""

    offset: int
    fingerprint: int


@dataclass(frozen=True)
class TailMatch:
    """K1-K3 for one partition."""

    resume: int  # the first source offset whose record the tail does not hold
    last_copy: Anchor | None  # (source, target) offsets of the last in-order copy; None when the tail is empty
    copies: int  # in-order copies in the tail
    past_commit: int  # of them, copies of source offsets past the old mirror's committed one
    one_to_one: int  # in-order copies ending at `last_copy` at consecutive offsets on both sides (anchors D)
    repeats: int  # tail records that repeat an earlier copy
    refused: str | None  # why the partition cannot be taken over; None when it can
    uncopied: int | None = None  # the first source record past the last copy, or where the next would be (K4)


def match_tail(tail: Sequence[Content], source: Sequence[Content], source_next: int,
               committed: int | None = None) -> TailMatch:
    """Match the remote partition's `tail` (from the newest sync's downstream offset to its end) with the `source`
    records from the sync's upstream offset on; `source_next` is the offset just past the last source record read
    (where the next one would be, transaction markers and compaction holes included); `committed`: the old mirror's
    committed source offset, None if none."""
    if not tail:
        return TailMatch(source[0].offset if source else source_next, None, 0, 0, 0, 0,
                         "the remote partition holds no record at or after the copy the newest offset sync names "
                         "(re-created or truncated since)")
    if not source or tail[0].fingerprint != source[0].fingerprint:
        return TailMatch(source_next, None, 0, 0, 0, 0,
                         f"target offset {tail[0].offset} does not hold the copy of source offset "
                         f"{source[0].offset if source else source_next} the newest offset sync names (the remote "
                         "partition was re-created or truncated, or the sync is not this flow's)")
    seen: set[int] = set()
    j = repeats = run = past = 0
    last: Anchor | None = None
    for record in tail:
        if j < len(source) and record.fingerprint == source[j].fingerprint:
            consecutive = last is not None and (source[j].offset, record.offset) == (last.upstream + 1,
                                                                                     last.downstream + 1)
            run = run + 1 if consecutive else 1
            last = Anchor(source[j].offset, record.offset)
            seen.add(record.fingerprint)
            past += committed is None or source[j].offset > committed
            j += 1
        elif record.fingerprint in seen:
            repeats += 1
            run = 0  # a repeat sits between two copies: they are no longer one to one
        else:
            return TailMatch(source[j].offset if j < len(source) else source_next, last, j, past, 0, repeats,
                             f"target offset {record.offset} holds a record that is neither the copy of the next "
                             "source record nor a repeat of an earlier copy (another writer on the remote topic?)")
    assert last is not None  # tail[0] matched source[0]
    # One past the last copy, not the next record read: what lies between is no record to copy (markers, compaction
    # holes), and past the last one read an open transaction may begin.
    return TailMatch(last.upstream + 1, last, j, past, run if run >= 2 else 0, repeats, None,
                     source[j].offset if j < len(source) else source_next)


def find_last_copy(window: Sequence[Content], source: Sequence[Content], source_next: int,
                   committed: int) -> tuple[Anchor, TailMatch] | None:
    """For a mirror that leaves no offset sync (MirrorMaker 1, a Go mirror maker): its consumer group's last committed
    record, `source[0]` at offset `committed`, is looked for in the remote partition's `window` (its last records),
    the latest copy first; the first whose following records match the source (K1-K3) stands for the sync. Returns
    that (committed, target offset) pair and the match, or None when no copy in the window does."""
    if not source or source[0].offset != committed:
        return None
    for i in range(len(window) - 1, -1, -1):
        if window[i].fingerprint == source[0].fingerprint:
            match = match_tail(window[i:], source, source_next, committed)
            if match.refused is None:
                return Anchor(committed, window[i].offset), match
    return None


@dataclass(frozen=True)
class PartitionPlan:
    """What taking over one source partition does: read from the old mirror's state and the tail, changed nowhere."""

    topic: str
    partition: int
    committed: int | None  # the old mirror's committed source offset (the last copied); None: none
    sync: Anchor | None  # the newest offset sync of the old mirror; None: none
    target_end: int  # the remote partition's end when the plan read it
    resume: int  # where mirrorflow's stream resumes the partition
    since_commit: int  # source offsets past the committed one already on the target (the old mirror would copy again)
    repeats: int  # records the old mirror wrote twice (already on the target; nothing mirrorflow adds)
    refused: str | None  # why this partition cannot be taken over; None when it can
    anchors: tuple[Anchor, ...] = ()  # K5: what the flow's offset syncs start with

    def line(self) -> str:
        committed = "none" if self.committed is None else str(self.committed)
        head = (f"{self.topic}-{self.partition}: committed {committed}, target end {self.target_end}, "
                f"resume at {self.resume}")
        if self.refused is not None:
            return f"{head}: REFUSED: {self.refused}"
        notes = [f"{self.since_commit} source offsets copied after the last commit (kept, not copied again)"] \
            if self.since_commit else []
        if self.repeats:
            notes.append(f"{self.repeats} written twice by the old mirror (already on the target)")
        return head + (f" ({'; '.join(notes)})" if notes else "")


def plan_partition(topic: str, partition: int, *, committed: int | None, syncs: Sequence[Anchor], target_end: int,
                   match: TailMatch | None, fallback: int, limit: int) -> PartitionPlan:
    """One partition's plan. `syncs`: the old mirror's offset syncs of the partition, any order; `match`: the tail
    matched from the newest of them (None when there is none); `fallback`: where to resume a partition the old
    mirror never copied (its target partition empty): the flow's `auto.offset.reset` resolved on the source."""
    newest = max(syncs, key=lambda s: (s.downstream, s.upstream), default=None)

    def refuse(why: str, resume: int) -> PartitionPlan:
        return PartitionPlan(topic, partition, committed, newest, target_end, resume, 0, 0, why)

    if newest is None or match is None:
        if target_end > 0 and committed is not None:
            return refuse("the target holds copies but the old mirror left no offset sync to match them from", 0)
        if target_end > 0:
            return refuse("the remote partition holds records but the old mirror recorded nothing of it", 0)
        resume = fallback if committed is None else committed + 1
        return PartitionPlan(topic, partition, committed, None, target_end, resume, 0, 0, None)
    if match.refused is not None:
        return refuse(match.refused, match.resume)
    if committed is not None and committed >= (match.uncopied if match.uncopied is not None else match.resume):  # K4
        return refuse(f"the old mirror committed source offset {committed} but the target's copies end before it "
                      f"(at source offset {match.resume}): records it acknowledged are not on the target",
                      match.resume)
    since = match.resume - (committed + 1) if committed is not None else match.past_commit
    return PartitionPlan(topic, partition, committed, newest, target_end, match.resume, since,
                         match.repeats, None, imported_anchors(syncs, match, limit))


def imported_anchors(syncs: Sequence[Anchor], match: TailMatch, limit: int) -> tuple[Anchor, ...]:
    """K5: the old mirror's syncs below the last copy, the newest first kept when there are more than `limit` - 1,
    each marked imported, then the last copy's exact anchor (a barrier, with its one-to-one run)."""
    last = match.last_copy
    if last is None:
        return ()
    below = sorted({(s.upstream, s.downstream) for s in syncs if s.upstream < last.upstream
                    and s.downstream < last.downstream})
    chain: list[tuple[int, int]] = []
    for u, d in reversed(below):  # newest first: each strictly below the one kept after it
        if not chain or (u < chain[-1][0] and d < chain[-1][1]):
            chain.append((u, d))
    kept = thinned(list(reversed(chain)), max(0, limit - 1))
    first = last.upstream - match.one_to_one + 1  # of the matched run (none: past the last copy)

    def run(u: int, d: int) -> int:  # D: the part of the matched run that ends at (u, d)
        on = match.one_to_one and u >= first and last.upstream - u == last.downstream - d
        return u - first + 1 if on and u - first + 1 >= 2 else 0

    return (*(Anchor(u, d, imported=True, run=run(u, d)) for u, d in kept),
            Anchor(last.upstream, last.downstream, barrier=True, run=match.one_to_one))


def thinned(syncs: Sequence[_T], keep: int) -> list[_T]:
    """At most `keep` of `syncs` (write order), in order: the oldest one and the newest `keep` // 2 always, every
    other one of the rest dropped until they fit (thinned again and again, older ones end up further apart)."""
    if len(syncs) <= keep:
        return list(syncs)
    if keep < 2:
        return list(syncs[len(syncs) - keep:])
    head = min(keep // 2, keep - 1)
    older, newest = list(syncs[:len(syncs) - head]), list(syncs[len(syncs) - head:])
    while len(older) + len(newest) > keep:
        older = older[::2]
    return older + newest


def attribute(copies: Sequence[int], source: Sequence[Content]) -> list[int | None]:
    """K7: the source offset each copy (by fingerprint, in target order) is the copy of, None for none; `source`
    in offset order."""
    at: dict[int, list[int]] = {}
    for record in source:
        at.setdefault(record.fingerprint, []).append(record.offset)
    out: list[int | None] = []
    cursor: int | None = None
    for fingerprint in copies:
        offsets = at.get(fingerprint)
        if offsets is None:
            out.append(None)
            continue
        i = 0 if cursor is None else bisect_left(offsets, cursor)
        cursor = (offsets[i] if i < len(offsets) else offsets[-1]) + 1
        out.append(cursor - 1)
    return out
