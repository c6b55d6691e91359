"""One running instance per flow, held as membership of a consumer group on the target.

The stream of flow A->B joins group `mirrorflow:A->B`, subscribed to the flow's one-partition
offset-syncs topic: only one member can be assigned that partition, so a second instance finds it
taken and stops with a clear error, and an instance that loses the partition (its session expired)
stops writing. Exactly-once mode adds Kafka's own fencing of transactional producers underneath.
A crashed instance's membership expires after the session timeout, so a restart waits at most that.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from mirrorflow.errors import OperationalError

log = logging.getLogger(__name__)
SESSION_TIMEOUT_MS = 6000  # the broker's default group.min.session.timeout.ms


class FlowLease:
    def __init__(self, flow: str, topic: str, consumer_settings: dict[str, Any],
                 admin_settings: dict[str, Any]) -> None:
        self.flow, self.topic = flow, topic
        self.group = group_of(flow)
        self._consumer_settings, self._admin_settings = consumer_settings, admin_settings
        self._consumer: Consumer | None = None
        self.held = False
        self.lost = False

    def acquire(self, wait_s: float = 3 * SESSION_TIMEOUT_MS / 1000) -> None:
        """Join the flow's group and hold its partition, or raise if another live instance holds it."""
        self._wait_for_departed_members(wait_s)
        consumer = Consumer({**self._consumer_settings, "group.id": self.group, "enable.auto.commit": False,
                             "session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": 1000,
                             "partition.assignment.strategy": "range"})
        self._consumer = consumer
        consumer.subscribe([self.topic], on_assign=self._assigned, on_revoke=self._revoked,
                           on_lost=self._revoked)
        deadline = time.monotonic() + wait_s
        while not self.held and time.monotonic() < deadline:
            consumer.poll(0.2)
        if not self.held:
            self.release()
            raise OperationalError(f"flow {self.flow} is already running elsewhere (consumer group "
                                   f"{self.group} holds its lease); stop that instance first")
        log.info("flow %s: lease held (group %s)", self.flow, self.group)

    def keep(self) -> bool:
        """Serve the group protocol; False once the lease is lost (until `regain`)."""
        if self._consumer is not None and not self.lost:
            self._consumer.poll(0)
        return self.held and not self.lost

    def regain(self) -> None:
        """After a loss (the target was unreachable for a session), wait to hold the lease again.

        Raises if another live instance holds it; waits as long as the group cannot tell.
        """
        consumer = self._consumer
        assert consumer is not None
        admin = AdminClient(self._admin_settings)
        next_check = time.monotonic() + 5
        while not self.held:
            consumer.poll(0.5)
            if self.held or time.monotonic() < next_check:
                continue
            next_check = time.monotonic() + 5
            me = consumer.memberid()
            try:
                members = self._members(admin)
            except OperationalError as exc:  # the target still cannot tell: keep waiting
                log.info("%s; waiting", exc)
                continue
            holders = [m for m in members if m.member_id != me and m.assignment.topic_partitions]
            if holders:
                raise OperationalError(f"flow {self.flow}: another instance on {holders[0].host} took over "
                                       f"(consumer group {self.group}); this one stops")
        self.lost = False
        log.info("flow %s: lease held again", self.flow)

    def release(self) -> None:
        consumer, self._consumer = self._consumer, None
        self.held = False
        if consumer is not None:
            try:
                consumer.close()
            except KafkaException as exc:  # leaving the group early is best effort; expiry frees it too
                log.debug("flow %s: closing the lease consumer: %s", self.flow, exc)

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if partitions:
            self.held = True
            consumer.pause(partitions)  # the partition is a token: nothing is read through this consumer

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self.held and partitions:
            self.held = False
            self.lost = True
            log.error("flow %s: lease lost (group %s rebalanced)", self.flow, self.group)

    def _wait_for_departed_members(self, wait_s: float) -> None:
        admin = AdminClient(self._admin_settings)
        deadline = time.monotonic() + wait_s
        while True:
            members = self._members(admin)
            if not members:
                return
            if time.monotonic() > deadline:
                hosts = ", ".join(sorted({m.host for m in members}))
                raise OperationalError(f"flow {self.flow} is already running on {hosts} (consumer group "
                                       f"{self.group}); stop that instance first")
            time.sleep(0.5)

    def _members(self, admin: AdminClient) -> list[Any]:
        return members(admin, self.flow)


def group_of(flow: str) -> str:
    return f"mirrorflow:{flow}"


def members(admin: AdminClient, flow: str, timeout_s: float = 15.0) -> list[Any]:
    """The members of the flow's lease group (none while no instance runs: a group that never existed is
    described as empty). A group that cannot be described (a coordinator moving or loading, a target that does
    not answer) is asked again until `timeout_s`, then an OperationalError: never read as "nobody holds it"."""
    group = group_of(flow)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            future = admin.describe_consumer_groups([group])[group]
            description = future.result(timeout=max(deadline - time.monotonic(), 1.0))
            return list(description.members)
        except (KafkaException, TimeoutError) as exc:
            why = exc.args[0].str() if isinstance(exc, KafkaException) else "no answer"
            if time.monotonic() >= deadline:
                raise OperationalError(f"flow {flow}: cannot tell who holds its lease (consumer group {group}): "
                                       f"{why}") from None
            log.debug("flow %s: describing group %s: %s; asking again", flow, group, why)
            time.sleep(0.5)


def holders(admin: AdminClient, flow: str) -> list[str]:
    """The hosts of the instances of the flow that hold its lease now (at most one, by construction)."""
    return sorted(m.host for m in members(admin, flow) if m.assignment.topic_partitions)
