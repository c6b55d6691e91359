"""The stream's Spark checkpoint as its driver sees it: Spark's offset and commit logs, read for each batch's ends
and starts, and the files mirrorflow keeps beside them (the reset it started after, the first batch's start, where
lingering batches got to). A new checkpoint is how the driver restarts a query at the offset syncs' positions."""

from __future__ import annotations

import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mirrorflow.rules.offset_syncs import TopicPartition
from mirrorflow.spark import offset_log, range_source

_RESET_MARKER = "mirrorflow-reset"  # the newest `mirrorflow reset` the checkpoint starts after
_INITIAL_OFFSETS = "mirrorflow-initial-offsets.json"  # its first batch's start (range_source S1)
_POSITIONS = "mirrorflow-positions.json"  # where lingering batches got to (range_source S4)


class StreamCheckpoint:
    """Bounded: it keeps the ends of the last batch done, nothing more."""

    def __init__(self, path: Path, flow_name: str) -> None:
        self.path, self.flow_name = path, flow_name
        self.spark: Any = None  # the session, once it runs: the offset log is read through its file system
        self.last_batch: tuple[int, dict[TopicPartition, int]] | None = None  # (id, ends) of the last batch done

    def __str__(self) -> str:
        return str(self.path)

    @property
    def initial_offsets(self) -> Path:
        return self.path / _INITIAL_OFFSETS

    @property
    def positions(self) -> Path:
        return self.path / _POSITIONS

    @property
    def bases(self) -> Path:
        return self.path / offset_log.BASES

    def exists(self) -> bool:
        return self.path.exists()

    def has_batches(self) -> bool:
        return (self.path / "offsets").is_dir()

    def replace(self) -> None:
        """Start the next query from a new Spark checkpoint (the reset it started after is kept)."""
        replaced = self.path.with_name(f"{self.path.name}.before-{int(time.time() * 1000)}")
        self.last_batch = None
        if self.path.exists():
            self.path.rename(replaced)
            if (replaced / _RESET_MARKER).exists():
                self.path.mkdir(parents=True)
                (replaced / _RESET_MARKER).rename(self.path / _RESET_MARKER)
            shutil.rmtree(replaced, ignore_errors=True)

    def reset_seen(self) -> str | None:
        """The `mirrorflow reset` (its time, as the offset syncs record it) this checkpoint starts after."""
        marker = self.path / _RESET_MARKER
        return marker.read_text().strip() if marker.exists() else None

    def mark_reset(self, at_ms: int) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / _RESET_MARKER).write_text(str(at_ms))

    def uncommitted(self) -> bool:
        return offset_log.uncommitted(self.path)

    def committed_ends(self) -> dict[TopicPartition, int]:
        return offset_log.committed_ends(self.path)

    def topics(self) -> list[str]:
        """The source topics of the newest batch in the offset log."""
        ids = offset_log.batch_ids(self.path)
        return sorted({t for t, _ in self.batch_ends(ids[-1])}) if ids else []

    def batch_ends(self, batch_id: int) -> dict[TopicPartition, int]:
        """The batch's end offsets, from the offset log Spark wrote before running it."""
        return offset_log.batch_ends(self.spark, self.path, batch_id, self.flow_name)

    def previous_ends(self, batch_id: int) -> dict[TopicPartition, int]:
        """Where batch `batch_id` starts: the previous batch's ends, kept from it, else (the first batch of a
        restarted query) read from the offset log; {} for a checkpoint's first batch."""
        if self.last_batch is not None and self.last_batch[0] == batch_id - 1:
            return self.last_batch[1]
        if batch_id > 0 and (self.path / "offsets" / str(batch_id - 1)).exists():
            return self.batch_ends(batch_id - 1)
        return {}

    def spark_starts(self, batch_id: int) -> dict[TopicPartition, int]:
        """Spark's start of the batch: the previous batch's ends, or the first batch's kept start."""
        return (self.previous_ends(batch_id) if batch_id > 0 else range_source.read_initial(self.initial_offsets)
                or {})

    def done(self, batch_id: int, ends: Mapping[TopicPartition, int]) -> None:
        self.last_batch = (batch_id, dict(ends))

    def write_positions(self, positions: Mapping[TopicPartition, int]) -> None:
        range_source.write_positions(self.positions, positions)
