"""The writers' producer settings (kafka/writers): an operator's batching and compression reach them, the guarantees
do not move; a batch's writer seats (spark/writer_seats)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mirrorflow.errors import ConfigError, RetryableError
from mirrorflow.kafka.flow_lease import DELIVERY_TIMEOUT_MS
from mirrorflow.kafka.writers import check_tuning, driver_config, writer_config
from mirrorflow.spark import writer_producers, writer_seats


def test_the_targets_batching_and_compression_settings_reach_the_writer() -> None:
    config = writer_config({"bootstrap.servers": "b:9092", "compression.type": "zstd", "linger.ms": "20",
                              "batch.size": "262144"})
    assert (config["compression.type"], config["linger.ms"], config["batch.size"]) == ("zstd", "20", "262144")
    assert config["bootstrap.servers"] == "b:9092"


def test_without_target_settings_the_writer_batches_a_megabyte_uncompressed() -> None:
    config = writer_config({})
    assert (config["compression.type"], config["linger.ms"], config["batch.size"]) == ("none", 5, 1_048_576)


def test_a_transactional_writer_lingers_at_least_five_seconds() -> None:
    """Its commits flush (a Slice about every 16 ms at a trickle): the linger only keeps librdkafka from polling
    without a timeout while a partition's in-flight requests are all out."""
    short = writer_config({"linger.ms": "5"}, transactional_id="t")
    assert short["linger.ms"] == 5000
    assert writer_config({"linger.ms": "7500"}, transactional_id="t")["linger.ms"] == 7500
    assert writer_config({"linger.ms": "5"})["linger.ms"] == "5"  # idempotent: the target's, as it says


def test_what_delivery_rests_on_is_the_writers_whatever_the_target_says() -> None:
    config = writer_config({"acks": "1", "enable.idempotence": "false", "delivery.timeout.ms": "600000",
                              "message.timeout.ms": "600000"}, transactional_id="t")
    assert (config["acks"], config["enable.idempotence"]) == ("all", True)
    assert config["message.timeout.ms"] == DELIVERY_TIMEOUT_MS and "delivery.timeout.ms" not in config
    assert config["transactional.id"] == "t"


def test_the_drivers_producer_is_durable_and_fences_a_frozen_driver_of_the_flow() -> None:
    config = driver_config("primary", "backup")
    assert (config["acks"], config["enable.idempotence"], config["message.timeout.ms"]) == ("all", True,
                                                                                          DELIVERY_TIMEOUT_MS)
    assert config["transactional.id"] == "mirrorflow-primary-backup.driver"


def test_a_targets_transactional_id_or_retries_never_reach_the_writer() -> None:
    config = writer_config({"transactional.id": "theirs", "transaction.timeout.ms": "900000", "retries": "0",
                              "max.in.flight.requests.per.connection": "50"})
    assert not {"transactional.id", "transaction.timeout.ms", "retries",
                "max.in.flight.requests.per.connection"} & set(config)


@pytest.mark.parametrize(("key", "value"), [("batch.size", "0"), ("linger.ms", "20000"), ("linger.ms", "soon")])
def test_a_batching_setting_the_writer_cannot_take_is_a_config_error_naming_the_key(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=rf"^backup\.producer\.{re.escape(key)}: '{value}': the stream's writer"):
        check_tuning({key: value}, "backup")


def test_batching_settings_the_writer_takes_pass_the_check() -> None:
    check_tuning({"batch.size": "16384", "linger.ms": "0", "compression.type": "lz4"}, "backup")



def test_every_seat_of_a_batch_is_claimed_once_whichever_worker_runs_which_task(tmp_path: Path) -> None:
    claims = tmp_path / "seats-b1"
    # Task 0 runs on the worker that wrote from seat 1 last batch, task 1 on a worker that had seat 0.
    assert writer_seats.claim_seat(claims, 2, task=0, attempt=0, preferred=1) == 1
    assert writer_seats.claim_seat(claims, 2, task=1, attempt=0, preferred=0) == 0
    with pytest.raises(RetryableError, match="more tasks than seats"):
        writer_seats.claim_seat(claims, 2, task=2, attempt=0, preferred=None)


def test_a_worker_without_a_seat_takes_a_free_one_and_a_retry_takes_its_first_attempts(tmp_path: Path) -> None:
    claims = tmp_path / "seats-b2"
    assert writer_seats.claim_seat(claims, 3, task=2, attempt=0, preferred=None) == 0
    assert writer_seats.claim_seat(claims, 3, task=0, attempt=0, preferred=0) == 1  # its seat was taken
    assert writer_seats.claim_seat(claims, 3, task=2, attempt=1, preferred=None) == 0  # the retry of task 2
    assert writer_seats.claim_seat(claims, 3, task=1, attempt=1, preferred=None) == 2  # died before claiming


def test_a_kept_producer_is_crowded_only_when_most_of_many_topics_it_knows_are_not_the_tasks() -> None:
    turn_before = {f"t{i:04d}" for i in range(200)}
    this_turn = {f"t{i:04d}" for i in range(200, 400)}
    assert writer_producers.crowded(turn_before, this_turn)  # a batch moving the next 200 topics: replaced
    assert not writer_producers.crowded(turn_before, turn_before)  # the same topics every batch: kept
    assert not writer_producers.crowded({"a"}, {"b"})  # a few topics cost nothing to walk
    assert not writer_producers.crowded(turn_before | this_turn, this_turn | {"t0000"})  # shares more
    assert writer_producers.crowded(turn_before | this_turn, set(list(this_turn)[:99]))
