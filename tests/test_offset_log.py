"""Reading a streaming query's offset log from its checkpoint (pure: files as Spark 4 writes them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mirrorflow.errors import OperationalError
from mirrorflow.spark import offset_log

_METADATA = '{"batchWatermarkMs":0,"batchTimestampMs":1795670000000,"conf":{}}'


def _write_batch(checkpoint: Path, batch: int, ends: dict[str, dict[str, int]], committed: bool) -> None:
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / str(batch)).write_text(f"v1\n{_METADATA}\n{json.dumps(ends)}")
    if committed:
        (checkpoint / "commits").mkdir(exist_ok=True)
        (checkpoint / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_the_committed_ends_are_the_newest_committed_batchs_not_a_planned_one(tmp_path: Path) -> None:
    assert offset_log.committed_ends(tmp_path) == {}
    _write_batch(tmp_path, 0, {"orders": {"0": 5, "1": 7}}, committed=True)
    _write_batch(tmp_path, 1, {"orders": {"0": 9, "1": 7}, "pay": {"0": 2}}, committed=True)
    _write_batch(tmp_path, 2, {"orders": {"0": 12, "1": 8}, "pay": {"0": 3}}, committed=False)
    assert offset_log.committed_ends(tmp_path) == {("orders", 0): 9, ("orders", 1): 7, ("pay", 0): 2}
    assert offset_log.batch_ids(tmp_path) == [0, 1, 2]


def test_a_checkpoint_is_uncommitted_only_while_its_newest_planned_batch_has_no_commit(tmp_path: Path) -> None:
    assert not offset_log.uncommitted(tmp_path)  # a new checkpoint: nothing planned
    _write_batch(tmp_path, 0, {"orders": {"0": 5}}, committed=False)
    assert offset_log.uncommitted(tmp_path)  # planned, then the query failed, stopped or was killed in it
    _write_batch(tmp_path, 0, {"orders": {"0": 5}}, committed=True)
    _write_batch(tmp_path, 1, {"orders": {"0": 9}}, committed=True)
    assert not offset_log.uncommitted(tmp_path)
    _write_batch(tmp_path, 2, {"orders": {"0": 12}}, committed=False)
    assert offset_log.uncommitted(tmp_path)


def test_a_file_that_is_not_an_offset_log_reads_as_none_and_a_broken_checkpoint_as_nothing(tmp_path: Path) -> None:
    assert offset_log.parse_ends(["v1", _METADATA]) is None
    assert offset_log.parse_ends(["{}", _METADATA, "{}"]) is None
    _write_batch(tmp_path, 0, {}, committed=True)
    (tmp_path / "offsets" / "0").write_text("v1\n{}\n{not json")
    assert offset_log.committed_ends(tmp_path) == {}
    assert offset_log.batch_ids(tmp_path / "nowhere") == []


def test_a_planned_batchs_ends_are_read_from_a_local_checkpoint_without_the_jvm(tmp_path: Path) -> None:
    _write_batch(tmp_path, 3, {"orders": {"0": 12, "1": 8}}, committed=False)
    assert offset_log.batch_ends(None, tmp_path, 3, "a->b") == {("orders", 0): 12, ("orders", 1): 8}
    (tmp_path / "offsets" / "4").write_text("not an offset log")
    with pytest.raises(OperationalError, match=r"^flow a->b: unexpected offset log .*/offsets/4$"):
        offset_log.batch_ends(None, tmp_path, 4, "a->b")
