"""Since when every record the source acknowledged is mirrored (rules/source_reads R1-R3; status.metrics invariant
C; kafka/source_view V3), held against generated histories of appends, reads, copies and reports (pure)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import example, given, settings
from hypothesis import strategies as st
from mirrorflow.kafka.source_view import SourceView
from mirrorflow.rules import source_reads
from mirrorflow.rules.source_reads import EndsRead, SourceReads

TP = tuple[str, int]

# One step of a history: (kind, partition, amount). Kinds: a record appended (amount: how far its producer-set
# timestamp lies before its append, in ms, negative for a producer clock ahead); a new partition; the planner asking
# for the partition list; it asking for the ends of the listed partitions (one of them may not answer; records may
# be appended while the request or its answer is on its way); its read reported to the driver (or lost); a copy
# moving a partition by a few records; time passing.
steps = st.lists(st.tuples(st.sampled_from(["append", "append", "append", "partition", "list", "ends", "report",
                                            "copy", "copy", "tick"]),
                           st.integers(0, 3), st.integers(-2_000, 5_000)), min_size=20, max_size=150)


@dataclass
class World:
    now: float = 1_000.0
    logs: dict[TP, list[tuple[float, float]]] = field(default_factory=lambda: {("t", 0): []})  # (append, timestamp)
    positions: dict[TP, int] = field(default_factory=dict)
    listed: tuple[float, list[TP]] | None = None  # the planner's partition list, and when it asked for it
    reads: list[EndsRead] = field(default_factory=list)  # made, not reported yet


def _play(history: list[tuple[str, int, int]]) -> None:
    world, kept = World(), SourceReads()
    last_through: float | None = None
    for kind, which, amount in history:
        world.now += 0.05
        tps = sorted(world.logs)
        tp = tps[which % len(tps)]
        if kind == "append":
            world.logs[tp].append((world.now, world.now - amount / 1000))
        elif kind == "partition":
            world.logs[("t", len(tps))] = []
        elif kind == "list":
            world.listed = (world.now, tps)  # as_of: taken before the request is sent (R1)
        elif kind == "ends" and world.listed is not None:
            listed_at, listed = world.listed
            asked_at = world.now  # taken before the request is sent (R1)
            # A record appended while the request is on its way is in the answer; one appended while the answer is
            # on its way back is not.
            world.now += 0.01
            if amount % 2 == 0:
                world.logs[listed[0]].append((world.now, world.now - 0.5))
            answered = [p for p in listed if amount % 3 != 1 or p != tp]
            ends = {p: len(world.logs[p]) for p in answered}
            if which % 2 == 0:
                world.logs[listed[-1]].append((world.now + 0.005, world.now - 0.5))
            world.now += 0.01
            world.reads.append(EndsRead(min(listed_at, asked_at), ends, complete=len(answered) == len(listed)))
        elif kind == "report" and world.reads:
            read = world.reads.pop(0)
            if amount % 2 == 0:
                kept.add(read, world.positions)
        elif kind == "copy":
            # A copy may go past any read's ends (a lingering task): up to what the log holds now.
            world.positions[tp] = min(world.positions.get(tp, 0) + abs(amount) % 4, len(world.logs[tp]))
            kept.cover(world.positions)
        else:
            world.now += abs(amount) / 1000
        through = kept.through
        if through is None:
            assert last_through is None
            continue
        # R3: never back, never past the newest read, and every record appended before it is below a position,
        # whatever its own timestamp says (some precede their append by seconds, some follow it).
        assert last_through is None or through >= last_through
        assert kept.newest is not None and through <= kept.newest.as_of
        for p, log in world.logs.items():
            appended = sum(1 for at, _ in log if at < through)
            assert appended <= world.positions.get(p, 0), (p, through, log, world.positions)
        assert len(kept.pending) <= source_reads.MAX_PENDING
        last_through = through


@settings(max_examples=500)
@given(steps)
# A record appended while the answer was on its way back, and one appended to a partition created after the list.
@example([("list", 0, 0), ("ends", 0, 5), ("report", 0, 0)])
@example([("list", 0, 0), ("partition", 0, 0), ("append", 1, 0), ("ends", 0, 5), ("report", 0, 0)])
def test_every_record_the_source_acknowledged_before_mirrored_through_is_mirrored(history: list[tuple[str, int, int]]
                                                                                   ) -> None:
    _play(history)


def test_a_flow_that_keeps_up_is_mirrored_through_its_newest_read_and_one_behind_through_the_read_it_caught_up_to(
        ) -> None:
    tp = ("t", 0)
    kept = SourceReads()
    kept.add(EndsRead(10.0, {tp: 5}), {tp: 5})
    assert kept.through == 10.0
    kept.add(EndsRead(11.0, {tp: 9}), {tp: 5})
    kept.add(EndsRead(12.0, {tp: 20}), {tp: 5})
    assert kept.through == 10.0  # behind both
    kept.cover({tp: 12})
    assert kept.through == 11.0 and [r.as_of for r in kept.pending] == [12.0]
    kept.add(EndsRead(13.0, {tp: 20}, complete=False), {tp: 30})  # an incomplete read is no claim of its own
    assert kept.through == 12.0 and kept.newest is not None and kept.newest.as_of == 13.0


def test_pending_reads_stay_within_their_bound_and_keep_the_newest() -> None:
    tp = ("t", 0)
    kept = SourceReads()
    for i in range(100):
        kept.add(EndsRead(float(i), {tp: i + 1}), {})
        assert len(kept.pending) <= source_reads.MAX_PENDING and kept.pending[-1].as_of == float(i)
    kept.cover({tp: 1_000})
    assert kept.through == 99.0 and not kept.pending


def test_a_report_parses_back_and_anything_else_is_no_read() -> None:
    read = EndsRead(12.5, {("a", 0): 3, ("a", 1): 0, ("b", 0): 7}, complete=False)
    assert source_reads.parse_report(source_reads.report(read)) == read
    assert source_reads.parse_report({"as_of": 12.5, "ends": {"a": {"0": 3}}}) == EndsRead(12.5, {("a", 0): 3}, False)
    assert source_reads.parse_report({"as_of": 1.0, "ends": '{"a":{"0":3}}'}) == EndsRead(1.0, {("a", 0): 3}, False)
    gaps = EndsRead(3.0, {("orders.eu-1", 0): 0, ("orders.eu-1", 3): 12_345_678_901, ("b_2", 1): 5}, complete=True)
    assert source_reads.report(gaps)["ends_text"] == "b_2 ,5;orders.eu-1 0,,,12345678901"
    assert source_reads.parse_report(source_reads.report(gaps)) == gaps
    assert source_reads.parse_report(source_reads.report(EndsRead(4.0, {}, True))) == EndsRead(4.0, {}, True)
    assert source_reads.parse_report({"a": {"0": 3}}) is None  # the ends alone, as reported before S5
    assert source_reads.parse_report(None) is None


ends_of = st.dictionaries(st.tuples(st.sampled_from(["a", "b.c", "d-1"]), st.integers(0, 30)),
                          st.integers(0, 10**12), max_size=60)


@given(ends_of, ends_of, st.integers(0, 8), st.booleans())
def test_a_report_against_an_offset_base_parses_back_to_the_same_read_and_is_small_when_little_moved(
        ends: dict[TP, int], others: dict[TP, int], moved: int, complete: bool) -> None:
    base = {**others, **ends}  # the base holds every end read and more
    for tp in sorted(ends)[:moved]:
        ends[tp] += 1
    read = EndsRead(7.25, ends, complete)
    doc = source_reads.report(read, (3, base))
    assert source_reads.parse_report(doc, {3: base}.get) == read
    if "ends_moved" in doc:
        assert source_reads.parse_report(doc, {}.get) is None  # a base the driver cannot read: no read, not a wrong one
        assert source_reads.parse_report(doc) is None
    if len(ends) >= 40 and moved + len(others.keys() - ends.keys()) <= 10:
        assert "ends_moved" in doc and len(str(doc["ends_moved"])) < len(str(source_reads.report(read)["ends_text"]))


def test_an_idle_flows_report_names_the_base_and_only_what_moved_since() -> None:
    base = {("t", p): 100 for p in range(12)}
    read = EndsRead(1.5, {**base, ("t", 4): 130, ("u", 0): 9}, complete=True)
    assert source_reads.report(read, (17, base)) == {"as_of": 1.5, "complete": True, "base": 17,
                                                      "ends_moved": "t 4:130;u 0:9"}
    partial = EndsRead(2.0, {tp: o for tp, o in base.items() if tp != ("t", 11)}, complete=False)
    assert source_reads.report(partial, (17, base))["ends_moved"] == "t 11:"
    assert source_reads.parse_report(source_reads.report(partial, (17, base)), {17: base}.get) == partial


def test_a_runbook_claims_the_view_s_own_time_only_when_it_is_complete_and_the_positions_reach_every_end() -> None:
    tp, other = ("t", 0), ("t", 1)
    view = SourceView(100.0, {tp: 10, other: 4}, mirrored_through=90.0, complete=True)
    assert view.acknowledged_through({tp: 10, other: 4}) == 100.0
    assert view.acknowledged_through({tp: 9, other: 4}) == 90.0  # the driver's, older claim
    assert SourceView(100.0, {tp: 10}, mirrored_through=90.0).acknowledged_through({tp: 10}) == 90.0  # incomplete
    assert SourceView(100.0, {tp: 10}, mirrored_through=None).acknowledged_through({tp: 3}) is None
    assert SourceView.parse(view.value()) == view
