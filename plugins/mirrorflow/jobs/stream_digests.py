"""The stream's digest units (rules/digests.py): each batch's settled partitions folded into the ledger, and the
units it emits sent to the flow's digests topic on the target, where the audit proves completeness from the target
alone. Best effort: a unit lost to a crash leaves a gap the audit reads both sides for."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from mirrorflow.kafka.link import FlowLink
from mirrorflow.rules import digests
from mirrorflow.rules.offset_syncs import TopicPartition
from mirrorflow.rules.partition_report import PartitionReport

log = logging.getLogger(__name__)



class StreamDigests:
    def __init__(self, link: FlowLink) -> None:
        self.link = link
        self.ledger = digests.Ledger()  # bounded as digests.Ledger says: the open unit of each partition
        self.producer: Any = None  # idempotent, created with the first unit

    def forget(self, topics: Iterable[str]) -> None:
        self.ledger.forget(set(topics))

    def record(self, reports: list[PartitionReport], begins: Mapping[TopicPartition, int],
               ends: Mapping[TopicPartition, int], quiet: Mapping[TopicPartition, int]) -> None:
        """Fold in the batch's reports of partitions whose positions moved, and `quiet` ones (no record in the
        batch, moved to its end); send what is due."""
        now = time.monotonic()
        units: list[digests.Unit] = []
        for r in reports:
            begin = begins.get(r.tp, r.first_offset)
            if begin is None or r.stuck or r.aborted:
                continue
            end = max((e for e in (ends.get(r.tp), r.upstream_next) if e is not None), default=begin)
            units += self.ledger.add(r.tp, begin, end, list(r.digests), now)
        written = {r.tp for r in reports}
        for tp, end in quiet.items():  # no record of the batch (or its trailing markers, covered above)
            if tp in begins and tp not in written:
                units += self.ledger.add(tp, begins[tp], end, [], now)
        self._send(units + self.ledger.due(now))

    def close(self) -> None:
        """Send what the ledger holds (folded in only from batches done: true whatever stopped the stream)."""
        self._send(self.ledger.drain())
        if self.producer is not None and self.producer.flush(10):
            log.warning("flow %s: some digest units did not reach %s (the audit reads both sides there)",
                        self.link.flow.name, self.link.digests_topic)

    def _send(self, units: list[digests.Unit]) -> None:
        if not units:
            return
        if self.producer is None:
            self.producer = self.link.durable_producer(**{"linger.ms": 100, "compression.type": "lz4"})
        for u in units:
            key, value = u.encode()
            self.producer.produce(self.link.digests_topic, value, key)
        self.producer.poll(0)
