"""The stream driver's own offset-sync records: anchors, losses, releases, the writers' slots, tombstones.

  D1  Every write is confirmed under the lease first (flow_lease, W1): an instance that lost it writes nothing.
  D2  They commit in transactions of the driver's own transactional id, at most SYNCS_PER_TRANSACTION records each;
      initialising that id at a takeover fences the previous holder's driver (W4).
  D3  A failed write leaves no producer behind: the next one initialises afresh, which aborts what it left open.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from mirrorflow.errors import MirrorError, OperationalError
from mirrorflow.kafka.flow_lease import FlowLease, LeaseGuard, LeaseSuperseded
from mirrorflow.kafka.link import FlowLink
from mirrorflow.rules.flow_state import SyncRecord

SYNCS_PER_TRANSACTION = 50_000  # below librdkafka's queue of 100,000 messages


class DriverWrites:
    def __init__(self, link: FlowLink, lease: Callable[[], FlowLease | None]) -> None:
        self.link, self._lease = link, lease
        self._producer: Producer | None = None

    def confirm_lease(self) -> None:
        """D1; another holder stops the flow (fatal), an unanswered check fails the batch (the query restarts, and
        the lease consumer finds out whether the lease is still ours)."""
        lease = self._lease()
        if lease is None or lease.member_id is None:
            return
        try:
            LeaseGuard.confirm(self.link.name, lease.member_id, self.link.settings("target", "admin"), lease.own_ids)
        except LeaseSuperseded as exc:
            raise MirrorError(f"{exc}; this instance stops") from None

    def take_over(self) -> None:
        """With the lease just held: initialise the driver's id afresh (D2: the previous driver writes no more)."""
        self._producer = None
        self._open()

    def write(self, records: Sequence[SyncRecord]) -> None:
        if not records:
            return
        self.confirm_lease()
        producer = self._open()
        failed: list[str] = []

        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                failed.append(err.str())

        flow, target = self.link.name, self.link.target.alias
        try:
            for start in range(0, len(records), SYNCS_PER_TRANSACTION):
                producer.begin_transaction()
                for record in records[start:start + SYNCS_PER_TRANSACTION]:
                    producer.produce(self.link.syncs_topic, record.value(), record.key(), partition=0,
                                     on_delivery=delivered)
                    producer.poll(0)
                if producer.flush(60) > 0 or failed:
                    raise OperationalError(f"flow {flow}: offset syncs not acknowledged by {target}"
                                           + (f": {failed[0]}" if failed else ""))
                producer.commit_transaction(60)
        except BaseException as exc:
            self._producer = None  # D3
            if not isinstance(exc, KafkaException):
                raise
            err = exc.args[0]
            if err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED):
                raise MirrorError(f"flow {flow}: fenced: another instance initialised the flow's driver id on "
                                  f"{target}: {err.str()}") from None
            raise OperationalError(f"flow {flow}: offset syncs not committed on {target}: {err.str()}") from None

    def _open(self) -> Producer:
        """The driver's transactional producer, initialised under a confirmed lease (D1, D2)."""
        if self._producer is None:
            self.confirm_lease()
            flow = self.link.flow
            producer = self.link.driver_producer()
            try:
                producer.init_transactions(60)
            except KafkaException as exc:
                raise OperationalError(f"flow {flow.name}: cannot initialise the driver's transactional id on "
                                       f"{self.link.target.alias}: {exc.args[0].str()}") from None
            self._producer = producer
        return self._producer
