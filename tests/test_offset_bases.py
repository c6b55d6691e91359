"""The offset log's compact entries (rules/offset_bases): a base and what moved since it, invariants B1-B4; and
their files beside the checkpoint (spark/offset_log)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mirrorflow.errors import OperationalError
from mirrorflow.rules import offset_bases
from mirrorflow.rules.offset_bases import Base
from mirrorflow.spark import offset_log

partitions = st.dictionaries(st.tuples(st.sampled_from(["a", "b.c", "d-e"]), st.integers(0, 40)),
                             st.integers(0, 10**12), max_size=60)


@given(partitions, partitions)
def test_an_entry_expands_to_exactly_the_offsets_it_was_made_of(offsets: dict, base_offsets: dict) -> None:  # type: ignore[type-arg]
    base = Base(3, {**offsets, **{tp: o for tp, o in base_offsets.items() if tp in offsets}})
    moved = offset_bases.moved(offsets, base)
    assert moved is not None and len(moved) <= len(offsets)
    entry = offset_bases.entry(base, moved)
    assert offset_bases.expand(json.loads(json.dumps(entry)), base) == offsets  # B1, through the log's JSON
    assert json.dumps(offset_bases.entry(base, offset_bases.moved(dict(offsets), base) or {})) == json.dumps(entry)


def test_a_few_moved_partitions_of_24000_make_an_entry_of_a_few_kilobytes() -> None:
    every = {(f"t{i:04d}", p): 100 for i in range(2_000) for p in range(12)}
    base = Base(0, every)
    now = {**every, **{tp: 110 for tp in list(every)[::240]}}
    entry = offset_bases.entry(base, offset_bases.moved(now, base) or {})
    assert len(json.dumps(entry)) < 4_096 and offset_bases.expand(entry, base) == now
    assert len(json.dumps(offset_bases.entry(base, {}))) < 64  # nothing moved since the base


def test_a_new_base_is_due_when_partitions_come_or_go_or_too_many_moved() -> None:
    base = Base(0, {("a", p): 0 for p in range(2_000)})
    assert offset_bases.moved({**base.offsets, ("b", 0): 0}, base) is None  # a new partition
    assert offset_bases.moved({tp: 0 for tp in list(base.offsets)[1:]}, base) is None  # one gone
    assert offset_bases.moved({tp: 1 for tp in base.offsets}, base) is None  # more than MOVED_MAX moved
    assert offset_bases.moved({**base.offsets, ("a", 5): 9}, base) == {("a", 5): 9}
    assert offset_bases.moved({}, None) is None


def test_kafkas_full_json_still_reads_and_a_base_that_is_not_the_named_one_is_refused() -> None:
    assert offset_bases.expand({"a": {"0": 5}}, None) == {("a", 0): 5}
    with pytest.raises(ValueError, match="names base 4, not 3"):
        offset_bases.expand({offset_bases.BASE_KEY: 4, offset_bases.MOVED_KEY: {}}, Base(3, {}))
    with pytest.raises(ValueError, match="not a base number"):
        offset_bases.base_number({offset_bases.BASE_KEY: "4"})


def test_the_newest_bases_are_kept() -> None:
    assert offset_bases.expired([5, 1, 3, 4, 2], 3) == [1, 2]
    assert offset_bases.expired([1, 2], 3) == []


def _log(checkpoint: Path, batch: int, offsets: dict) -> None:  # type: ignore[type-arg]
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / str(batch)).write_text(f"v1\n{{\"batchWatermarkMs\":0}}\n{json.dumps(offsets)}\n")


def test_the_offset_log_reads_an_entry_through_the_base_it_names_beside_the_checkpoint(tmp_path: Path) -> None:
    offset_log.write_base(tmp_path / offset_log.BASES, Base(7, {("a", 0): 5, ("a", 1): 9}))
    _log(tmp_path, 0, offset_bases.entry(Base(7, {}), {("a", 1): 12}))
    (tmp_path / "commits").mkdir()
    (tmp_path / "commits" / "0").write_text("v1\n{}\n")
    assert offset_log.batch_ends(None, tmp_path, 0, "f") == {("a", 0): 5, ("a", 1): 12}
    assert offset_log.committed_ends(tmp_path) == {("a", 0): 5, ("a", 1): 12}
    _log(tmp_path, 1, offset_bases.entry(Base(8, {}), {}))
    with pytest.raises(OperationalError, match=r"flow f: the offset log .*/offsets/1 names a base that cannot be read"):
        offset_log.batch_ends(None, tmp_path, 1, "f")


def test_writing_a_base_deletes_all_but_the_newest(tmp_path: Path) -> None:
    folder = tmp_path / offset_log.BASES
    for n in range(offset_log.KEEP_BASES + 3):
        offset_log.write_base(folder, Base(n, {("a", 0): n}))
    assert offset_log.base_numbers(folder) == list(range(3, offset_log.KEEP_BASES + 3))
    assert offset_log.read_base(folder, 4).offsets == {("a", 0): 4}
