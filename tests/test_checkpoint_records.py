"""Checkpoint records in MM2's wire format, and the rule that keeps checkpoints monotonic."""

from __future__ import annotations

from mirrorflow.jobs.checkpoints import Checkpoint, PartitionTranslation, held

# What MM2 4.3's own Checkpoint class serializes for ("g1", alpha.t-3, upstream 10, downstream 7, "md").
MM2_KEY = bytes.fromhex("000267310007616c7068612e7400000003")
MM2_VALUE = bytes.fromhex("0000000000000000000a000000000000000700026d64")


def test_a_checkpoint_is_byte_for_byte_what_mm2_writes() -> None:
    c = Checkpoint("g1", "alpha.t", 3, 10, 7, "md")
    assert (c.key(), c.value()) == (MM2_KEY, MM2_VALUE)
    assert Checkpoint.decode(MM2_KEY, MM2_VALUE) == c


def test_unicode_names_and_empty_metadata_round_trip() -> None:
    c = Checkpoint("grüppe", "ωmega.topic", 0, 0, 0, "")
    assert Checkpoint.decode(c.key(), c.value()) == c


def _translation(source: int, target: int) -> PartitionTranslation:
    return PartitionTranslation("g", "t", "a.t", 0, source, target, True)


def test_a_checkpoint_never_moves_back_while_the_group_does_not() -> None:
    previous = Checkpoint("g", "a.t", 0, 100, 90)
    assert held(previous, _translation(100, 80)).target_offset == 90
    assert held(previous, _translation(120, 85)).target_offset == 90
    assert held(previous, _translation(120, 110)).target_offset == 110


def test_a_checkpoint_moves_back_when_the_group_rewinds() -> None:
    previous = Checkpoint("g", "a.t", 0, 100, 90)
    assert held(previous, _translation(10, 5)).target_offset == 5
    assert held(None, _translation(10, 5)).target_offset == 5
