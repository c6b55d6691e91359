"""The writer's producer settings: an operator's batching and compression reach it, the guarantees do not move."""

from __future__ import annotations

from mirrorflow.flow_lease import DELIVERY_TIMEOUT_MS
from mirrorflow.stream_writer import producer_config


def test_the_targets_batching_and_compression_settings_reach_the_writer() -> None:
    config = producer_config({"bootstrap.servers": "b:9092", "compression.type": "zstd", "linger.ms": "20",
                              "batch.size": "262144"})
    assert (config["compression.type"], config["linger.ms"], config["batch.size"]) == ("zstd", "20", "262144")
    assert config["bootstrap.servers"] == "b:9092"


def test_without_target_settings_the_writer_batches_a_megabyte_uncompressed() -> None:
    config = producer_config({})
    assert (config["compression.type"], config["linger.ms"], config["batch.size"]) == ("none", 5, 1_048_576)


def test_what_delivery_rests_on_is_the_writers_whatever_the_target_says() -> None:
    config = producer_config({"acks": "1", "enable.idempotence": "false", "delivery.timeout.ms": "600000",
                              "message.timeout.ms": "600000"}, **{"transactional.id": "t"})
    assert (config["acks"], config["enable.idempotence"]) == ("all", True)
    assert config["message.timeout.ms"] == DELIVERY_TIMEOUT_MS and "delivery.timeout.ms" not in config
    assert config["transactional.id"] == "t"
