"""A fault around the stream's copier, from outside it: with this folder on PYTHONPATH, every Python process of the
stream (its Spark workers too) loads this module first, and the copier's source consumer silently never returns the
record MIRRORFLOW_TEST_SKIP_RECORD names (`topic/partition/offset`). Other consumers (the audit's) are untouched."""

import os

import confluent_kafka

_skipped = os.environ.get("MIRRORFLOW_TEST_SKIP_RECORD", "")
_topic, _partition, _offset = _skipped.rsplit("/", 2) if _skipped else ("", "-1", "-1")
_RECORD = (_topic, int(_partition), int(_offset))


class _SkippingConsumer(confluent_kafka.Consumer):
    def __init__(self, config, *args, **kwargs):  # type: ignore[no-untyped-def]
        super().__init__(config, *args, **kwargs)
        self._copier = str(config.get("group.id", "")).startswith("mirrorflow-copier-")

    def consume(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        messages = super().consume(*args, **kwargs)
        if not self._copier:
            return messages
        return [m for m in messages if m.error() is not None or (m.topic(), m.partition(), m.offset()) != _RECORD]


confluent_kafka.Consumer = _SkippingConsumer
