"""The writer's producer settings: an operator's batching and compression reach it, the guarantees do not move."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mirrorflow.errors import ConfigError
from mirrorflow.kafka.flow_lease import DELIVERY_TIMEOUT_MS
from mirrorflow.spark import stream_writer
from mirrorflow.spark.stream_writer import (
    check_producer_tuning,
    producer_config,
    queue_fills_unsent,
    unflushed_allowance,
)


def test_the_targets_batching_and_compression_settings_reach_the_writer() -> None:
    config = producer_config({"bootstrap.servers": "b:9092", "compression.type": "zstd", "linger.ms": "20",
                              "batch.size": "262144"})
    assert (config["compression.type"], config["linger.ms"], config["batch.size"]) == ("zstd", "20", "262144")
    assert config["bootstrap.servers"] == "b:9092"


def test_without_target_settings_the_writer_batches_a_megabyte_uncompressed() -> None:
    config = producer_config({})
    assert (config["compression.type"], config["linger.ms"], config["batch.size"]) == ("none", 5, 1_048_576)


def test_a_transactional_writer_lingers_at_least_five_seconds() -> None:
    """Its commits flush (a Slice about every 16 ms at a trickle): the linger only keeps librdkafka from polling
    without a timeout while a partition's in-flight requests are all out."""
    short = producer_config({"linger.ms": "5"}, transactional_id="t")
    assert short["linger.ms"] == 5000
    assert producer_config({"linger.ms": "7500"}, transactional_id="t")["linger.ms"] == 7500
    assert producer_config({"linger.ms": "5"})["linger.ms"] == "5"  # idempotent: the target's, as it says


def test_what_delivery_rests_on_is_the_writers_whatever_the_target_says() -> None:
    config = producer_config({"acks": "1", "enable.idempotence": "false", "delivery.timeout.ms": "600000",
                              "message.timeout.ms": "600000"}, transactional_id="t")
    assert (config["acks"], config["enable.idempotence"]) == ("all", True)
    assert config["message.timeout.ms"] == DELIVERY_TIMEOUT_MS and "delivery.timeout.ms" not in config
    assert config["transactional.id"] == "t"


def test_a_targets_transactional_id_or_retries_never_reach_the_writer() -> None:
    config = producer_config({"transactional.id": "theirs", "transaction.timeout.ms": "900000", "retries": "0",
                              "max.in.flight.requests.per.connection": "50"})
    assert not {"transactional.id", "transaction.timeout.ms", "retries",
                "max.in.flight.requests.per.connection"} & set(config)


@pytest.mark.parametrize(("key", "value"), [("batch.size", "0"), ("linger.ms", "20000"), ("linger.ms", "soon")])
def test_a_batching_setting_the_writer_cannot_take_is_a_config_error_naming_the_key(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=rf"^backup\.producer\.{re.escape(key)}: '{value}': the stream's writer"):
        check_producer_tuning({key: value}, "backup")


def test_batching_settings_the_writer_takes_pass_the_check() -> None:
    check_producer_tuning({"batch.size": "16384", "linger.ms": "0", "compression.type": "lz4"}, "backup")



def test_every_seat_of_a_batch_is_claimed_once_whichever_worker_runs_which_task(tmp_path: Path) -> None:
    claims = tmp_path / "seats-b1"
    # Task 0 runs on the worker that wrote from seat 1 last batch, task 1 on a worker that had seat 0.
    assert stream_writer.claim_seat(claims, 2, task=0, attempt=0, preferred=1) == 1
    assert stream_writer.claim_seat(claims, 2, task=1, attempt=0, preferred=0) == 0
    with pytest.raises(RuntimeError, match="more tasks than seats"):
        stream_writer.claim_seat(claims, 2, task=2, attempt=0, preferred=None)


def test_a_worker_without_a_seat_takes_a_free_one_and_a_retry_takes_its_first_attempts(tmp_path: Path) -> None:
    claims = tmp_path / "seats-b2"
    assert stream_writer.claim_seat(claims, 3, task=2, attempt=0, preferred=None) == 0
    assert stream_writer.claim_seat(claims, 3, task=0, attempt=0, preferred=0) == 1  # its seat was taken
    assert stream_writer.claim_seat(claims, 3, task=2, attempt=1, preferred=None) == 0  # the retry of task 2
    assert stream_writer.claim_seat(claims, 3, task=1, attempt=1, preferred=None) == 2  # died before claiming


@given(st.lists(st.integers(0, 5), min_size=1, max_size=40), st.data())
def test_sparse_reports_are_each_runs_last_record_and_each_cells_first_written_one(
        steps: list[int], data: st.DataObject) -> None:
    cell = stream_writer.digests.CELL
    offsets = list(itertools.accumulate(s * cell // 3 + 1 for s in steps))
    writes = sorted(data.draw(st.sets(st.integers(0, len(offsets) - 1), min_size=1)))
    last_cell = data.draw(st.none() | st.just(offsets[writes[0]] // cell))
    reported, end = stream_writer.reported_records(offsets, writes, last_cell)
    previous, want = last_cell, {writes[-1]: len(writes) - 1}
    for k, i in enumerate(writes):  # the definition, record by record
        if offsets[i] // cell != previous:
            previous = offsets[i] // cell
            want[i] = k
    assert reported == want and end == offsets[writes[-1]] // cell


def test_a_flush_begins_once_about_a_batch_per_written_partition_is_left() -> None:
    """A flush makes every queued batch due at once while librdkafka sends one request per partition at a time: the
    writer first lets the queue drain to this many records."""
    one_kib = (1_000, 1_024_000)
    assert unflushed_allowance([one_kib], 1_048_576) == 1_024
    assert unflushed_allowance([one_kib] * 600, 1_048_576) == 600 * 1_024
    assert unflushed_allowance([(1_000, 10_000)], 1_048_576) == 10_000  # tiny records: librdkafka's count caps a batch
    assert unflushed_allowance([(0, 0), (5, 5_000_000)], 1_048_576) == 2  # none yet, or larger than a batch: one
    assert unflushed_allowance([], 1_048_576) == 0


def test_a_full_queue_is_flushed_at_once_when_its_partitions_may_each_hold_a_batch_filling() -> None:
    """Batches waiting out a 5 s linger are freed by no answer: past as many partitions as the queue holds whole
    batches, a full queue is sent at once; below, the writer waits for answers first (a flush makes every queued
    batch due, and the broker thread spins while one waits behind its partition's request)."""
    assert queue_fills_unsent(64, 65_536, 1_048_576)  # 64 MiB: 64 batches of 1 MiB
    assert not queue_fills_unsent(63, 65_536, 1_048_576)
    assert not queue_fills_unsent(12, 65_536, 1_048_576)  # a 12-partition topic: full batches in flight free it
    assert queue_fills_unsent(600, 65_536, 1_048_576)
    assert queue_fills_unsent(2, 1_024, 524_288)  # a small queue

