"""A flow's link: its two clusters, their clients and the flow's internal topics, built once from (config, flow).

Every per-flow job takes one (MM2's counterpart is a connector's pair of admin clients, the Airflow provider's a
hook): the jobs stop climbing back to the config for a cluster, and a test can hand in a link of its own.

  L1  Client settings are resolved once per (side, role) and handed out as copies (they hold secrets: never
      printed); admin clients are built on first use and shared by everything the link serves.
  L2  The internal topic names are the flow's, derived from its source alias and replication policy: the one
      place a job learns them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from mirrorflow.kafka import admin_sync, clients, readers, writers
from mirrorflow.kafka.flow_lease import FlowLease
from mirrorflow.model import selection
from mirrorflow.model.config import Cluster, Flow, MirrorConfig
from mirrorflow.rules import digests, offset_syncs
from mirrorflow.rules.policy import checkpoints_topic, is_heartbeats_topic

Side = Literal["source", "target"]
Role = Literal["admin", "producer", "consumer"]


@dataclass(eq=False)
class FlowLink:
    config: MirrorConfig
    flow: Flow
    _settings: dict[tuple[Side, Role], dict[str, Any]] = field(default_factory=dict, repr=False)
    _admins: dict[tuple[Side, frozenset[tuple[str, Any]]], AdminClient] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, config: MirrorConfig, flow: Flow | str) -> FlowLink:
        """The link of a flow of `config` (by name: a declared, enabled flow, else a ConfigError naming the key)."""
        return cls(config, flow if isinstance(flow, Flow) else config.flow(flow))

    @property
    def name(self) -> str:
        return self.flow.name

    @cached_property
    def source(self) -> Cluster:
        return self.config.cluster(self.flow.source)

    @cached_property
    def target(self) -> Cluster:
        return self.config.cluster(self.flow.target)

    def cluster(self, side: Side) -> Cluster:
        return self.source if side == "source" else self.target

    def settings(self, side: Side, role: Role) -> dict[str, Any]:
        """librdkafka settings of one side's role (L1: a copy, the caller may add its own keys)."""
        if (side, role) not in self._settings:
            self._settings[(side, role)] = clients.settings(self.cluster(side), role)
        return dict(self._settings[(side, role)])

    @property
    def source_admin(self) -> AdminClient:
        return self.admin("source")

    @property
    def target_admin(self) -> AdminClient:
        return self.admin("target")

    def admin(self, side: Side, **overrides: Any) -> AdminClient:
        """One side's admin client, built on first use and shared by every caller asking with the same overrides
        (L1: a lag probe's shorter timeout gets a client of its own, once)."""
        key = (side, frozenset(overrides.items()))
        if key not in self._admins:
            self._admins[key] = AdminClient({**self.settings(side, "admin"), **overrides})
        return self._admins[key]

    def reader(self, side: Side, group: str, **overrides: Any) -> Consumer:
        """A consumer of one side that reads by assignment under `group` and never commits (the caller closes it)."""
        return Consumer({**self.settings(side, "consumer"), "group.id": group, "enable.auto.commit": False,
                         **overrides})

    def target_producer(self, **overrides: Any) -> Producer:
        return Producer({**self.settings("target", "producer"), **overrides})

    def check_clients(self) -> None:
        """Raise ConfigError for a setting the copier's consumer or the writer's producer cannot take."""
        writers.check_tuning(self.settings("target", "producer"), self.target.alias)
        readers.check_tuning(self.settings("source", "consumer"), self.source.alias)

    def durable_producer(self, **overrides: Any) -> Producer:
        """A target producer of the flow's own records (checkpoints, releases, repairs): writers.DURABLE under the
        target's settings and `overrides`."""
        return self.target_producer(**overrides, **writers.DURABLE)

    def driver_producer(self) -> Producer:
        """The stream driver's transactional producer (a reset's too), not initialised yet (writers.driver_config)."""
        return self.target_producer(**writers.driver_config(self.flow.source, self.flow.target))

    @property
    def exactly_once(self) -> bool:
        return self.target.exactly_once

    @property
    def transactional(self) -> bool:
        """Records in transactions of the task slots' ids (flow_lease, W4): exactly-once, and at-least-once unless
        `mirrorflow.records.fenced = false`."""
        return self.exactly_once or self.flow.flag("mirrorflow.records.fenced")

    @property
    def reads_committed(self) -> bool:
        return self.config.reads_committed(self.flow)

    @cached_property
    def syncs_topic(self) -> str:
        """The flow's offset-syncs topic on its target (L2)."""
        return offset_syncs.topic_name(self.flow.source, self.flow.policy.separator)

    @cached_property
    def digests_topic(self) -> str:
        return digests.topic_name(self.flow.source)

    @cached_property
    def checkpoints_topic(self) -> str:
        return checkpoints_topic(self.flow.policy, self.flow.source)

    def lease(self) -> FlowLease:
        """The flow's lease (its group on the target): whoever writes the flow's target holds it."""
        return FlowLease(self.flow.name, self.syncs_topic, self.settings("target", "consumer"),
                         self.settings("target", "admin"))

    def ensure_syncs_topic(self) -> bool:
        """Create the flow's offset-syncs topic on the target unless it exists (compacted); True if created."""
        return admin_sync.ensure_internal_topic(self.target_admin, self.target.alias, self.syncs_topic,
                                                self.flow.number("offset-syncs.topic.replication.factor"),
                                                admin_sync.COMPACTED)

    def remote_topic(self, topic: str) -> str:
        return self.flow.policy.remote_topic(self.flow.source, topic)

    def replicated_partitions(self, counts: Mapping[str, int] | None = None,
                              wanted: Callable[[str], bool] = lambda _topic: True,
                              heartbeats: bool = False) -> list[tuple[str, int]]:
        """The source partitions the flow replicates, sorted (of `counts`, else as the source has them now), its
        heartbeats topics aside unless `heartbeats` (the audit's): the stream copies those too, but backfills and
        lags are about the records producers wrote."""
        if counts is None:
            counts, _ = admin_sync.partition_counts(self.source_admin, self.flow.source)
        return [(t, p) for t, n in sorted(counts.items())
                if selection.replicates(self.flow, t) and wanted(t)
                and (heartbeats or not is_heartbeats_topic(self.flow.policy, t)) for p in range(n)]
