"""The drift plan: every change the metadata sync would make on a flow's target, computed from two snapshots.

Pure: `plan` reads a snapshot of the source and of the target (admin_sync.snapshot) and returns the changes;
admin_sync.apply makes them. Running the plan again after applying it gives no changes (only notices).
KRaft brokers learn of a change asynchronously, so a read right after a write can miss it: `unseen` says which
changes a snapshot does not show yet, and apply reports a change done only once a snapshot shows it.

MirrorMaker 2's rules, each with a test:
  topics   every replicated source topic has a remote topic with at least its partitions. It is created with
           the configs the config sync would set, in one step, and grown but never shrunk or deleted.
  configs  source entries that are read-only, sensitive, static broker settings or excluded
           (`config.properties.exclude`) are never synced. An entry at its source default is deleted on the
           target (the target's default wins), or set to the source default with `use.defaults.from=source`.
           Any other entry is set. Only differences are changed (incremental alter).
  acls     only LITERAL topic ACLs of replicated topics. ALLOW WRITE is dropped, ALLOW ALL becomes ALLOW
           READ, anything else (DENY included) is copied under the remote name. ACLs are created, never
           deleted.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from mirrorflow.model import selection
from mirrorflow.model.config import Flow

PARTS = ("topics", "configs", "acls")


@dataclass(frozen=True)
class ConfigValue:
    value: str | None
    source: str = "topic"  # "topic" override, "default", "broker" (dynamic broker setting), "static"
    read_only: bool = False
    sensitive: bool = False


@dataclass(frozen=True)
class TopicState:
    partitions: int
    configs: Mapping[str, ConfigValue] = field(default_factory=dict)


@dataclass(frozen=True)
class Acl:
    topic: str
    principal: str
    operation: str  # READ, WRITE, ALL, DESCRIBE, ...
    permission: str  # ALLOW or DENY
    host: str = "*"
    pattern: str = "LITERAL"

    def __str__(self) -> str:
        return f"{self.permission} {self.principal} {self.operation} from {self.host} on {self.topic}"


@dataclass(frozen=True)
class ClusterState:
    alias: str
    topics: Mapping[str, TopicState]
    brokers: int = 1
    acls: tuple[Acl, ...] | None = None  # None: the cluster has no authorizer


@dataclass(frozen=True)
class CreateTopic:
    topic: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str]
    part = "topics"

    def __str__(self) -> str:
        extra = "".join(f", {k}={v}" for k, v in sorted(self.configs.items()))
        return f"+ create topic {self.topic} ({self.partitions} partitions, replication factor " \
               f"{self.replication_factor}{extra})"


@dataclass(frozen=True)
class AddPartitions:
    topic: str
    current: int
    wanted: int
    part = "topics"

    def __str__(self) -> str:
        return f"+ add partitions to {self.topic}: {self.current} -> {self.wanted}"


@dataclass(frozen=True)
class SetConfig:
    topic: str
    key: str
    old: str | None
    new: str | None
    part = "configs"

    def __str__(self) -> str:
        return f"~ set config {self.topic} {self.key}: {_shown(self.old)} -> {_shown(self.new)}"


@dataclass(frozen=True)
class DeleteConfig:
    topic: str
    key: str
    old: str | None
    part = "configs"

    def __str__(self) -> str:
        return f"- delete config {self.topic} {self.key} (was {_shown(self.old)}; the target's default applies)"


@dataclass(frozen=True)
class CreateAcl:
    acl: Acl
    source: Acl
    part = "acls"

    def __str__(self) -> str:
        how = "" if self.acl.operation == self.source.operation else f" (source: {self.source.operation})"
        return f"+ create ACL {self.acl}{how}"


@dataclass(frozen=True)
class Notice:
    """Something the sync will not touch but a user should know."""

    text: str
    part: str = "topics"

    def __str__(self) -> str:
        return f"! {self.text}"


Change = CreateTopic | AddPartitions | SetConfig | DeleteConfig | CreateAcl | Notice


def plan(flow: Flow, source: ClusterState, target: ClusterState, parts: Collection[str] = PARTS) -> list[Change]:
    """Every change (and notice) that would bring the target in line with the source, in apply order."""
    replicated = sorted(t for t in source.topics if selection.replicates(flow, t))
    remote = {t: flow.policy.remote_topic(flow.source, t) for t in replicated}
    out: list[Change] = []
    if "topics" in parts:
        out += _topics(flow, source, target, replicated, remote)
    if "configs" in parts and flow.flag("sync.topic.configs.enabled"):
        for t in replicated:
            if remote[t] in target.topics:
                out += _configs(flow, remote[t], source.topics[t], target.topics[remote[t]])
    if "acls" in parts and flow.flag("sync.topic.acls.enabled"):
        out += _acls(source, target, remote)
    return out


def unseen(changes: Collection[Change], state: ClusterState) -> list[Change]:
    """The changes that `state` does not show (notices left out).

    Invariant: unseen(changes, state) == [] iff for every change, `state` holds what the change asked for:
    the topic with at least its partitions, the config value, a deleted config back at a default, the ACL.
    (A created topic's configs are not compared: a topic that already existed is left as it is.)
    """
    def shown(c: Change) -> bool:
        topic = state.topics.get(getattr(c, "topic", ""))
        if isinstance(c, CreateTopic):
            return topic is not None and topic.partitions >= c.partitions
        if isinstance(c, AddPartitions):
            return topic is not None and topic.partitions >= c.wanted
        if isinstance(c, SetConfig):
            return topic is not None and _value(topic, c.key) == c.new
        if isinstance(c, DeleteConfig):
            return topic is not None and (c.key not in topic.configs or topic.configs[c.key].source != "topic")
        if isinstance(c, CreateAcl):
            return state.acls is not None and c.acl in state.acls
        return False

    return [c for c in changes if not isinstance(c, Notice) and not shown(c)]


def _value(topic: TopicState, key: str) -> str | None:
    entry = topic.configs.get(key)
    return entry.value if entry is not None else None


def desired_configs(flow: Flow, topic: TopicState) -> dict[str, str | None]:
    """The entries the config sync sets on a remote topic (and creation starts it with)."""
    return {k: v.value for k, v in _syncable(flow, topic).items()
            if v.source != "default" or _defaults_from_source(flow)}


def _topics(flow: Flow, source: ClusterState, target: ClusterState, replicated: list[str],
            remote: Mapping[str, str]) -> list[Change]:
    out: list[Change] = []
    wanted_rf = flow.number("replication.factor")
    rf = min(wanted_rf, max(target.brokers, 1))
    for t in replicated:
        have, want = target.topics.get(remote[t]), source.topics[t].partitions
        if have is None:
            configs = desired_configs(flow, source.topics[t]) if flow.flag("sync.topic.configs.enabled") else {}
            out.append(CreateTopic(remote[t], want, rf, {k: v for k, v in configs.items() if v is not None}))
            if rf < wanted_rf:
                out.append(Notice(f"{remote[t]}: replication factor {wanted_rf} capped at {target.alias}'s "
                                  f"{target.brokers} broker(s)"))
        elif have.partitions < want:
            out.append(AddPartitions(remote[t], have.partitions, want))
        elif have.partitions > want:
            out.append(Notice(f"{remote[t]} has {have.partitions} partitions, its source {t} {want}: "
                              f"partitions are never removed"))
    return out


def _configs(flow: Flow, remote: str, source: TopicState, target: TopicState) -> list[Change]:
    out: list[Change] = []
    wanted = desired_configs(flow, source)
    for key in sorted(_syncable(flow, source)):
        have = target.configs.get(key)
        if have is not None and (have.read_only or have.sensitive):
            continue
        if key in wanted:
            if have is None or have.value != wanted[key]:
                out.append(SetConfig(remote, key, have.value if have else None, wanted[key]))
        elif have is not None and have.source == "topic":
            out.append(DeleteConfig(remote, key, have.value))
    for key, value in sorted(source.configs.items()):
        have = target.configs.get(key)
        if (flow.config_exclude.selects(key) and have is not None and have.value != value.value
                and "topic" in (value.source, have.source)):
            out.append(Notice(f"{remote} {key} stays {_shown(have.value)} on the target (source: "
                              f"{_shown(value.value)}): config.properties.exclude keeps it", "configs"))
    return out


def _syncable(flow: Flow, topic: TopicState) -> dict[str, ConfigValue]:
    return {k: v for k, v in topic.configs.items()
            if not (v.read_only or v.sensitive or v.source == "static" or flow.config_exclude.selects(k))}


def _defaults_from_source(flow: Flow) -> bool:
    return flow.value("use.defaults.from").strip().lower() == "source"


def _acls(source: ClusterState, target: ClusterState, remote: Mapping[str, str]) -> list[Change]:
    if source.acls is None:
        return [Notice(f"{source.alias} has no authorizer: no ACL to sync", "acls")]
    out: list[Change] = []
    creates: list[CreateAcl] = []
    existing = set(target.acls or ())
    for acl in sorted(source.acls, key=str):
        if acl.pattern != "LITERAL":
            if any(t.startswith(acl.topic) for t in remote) or acl.pattern != "PREFIXED":
                out.append(Notice(f"{acl.pattern} ACL {acl} is not synced (MM2 syncs LITERAL topic ACLs only)",
                                  "acls"))
            continue
        if acl.topic not in remote or (acl.permission == "ALLOW" and acl.operation == "WRITE"):
            continue
        operation = "READ" if acl.permission == "ALLOW" and acl.operation == "ALL" else acl.operation
        translated = Acl(remote[acl.topic], acl.principal, operation, acl.permission, acl.host)
        if acl.permission == "DENY":
            out.append(Notice(f"DENY rule copied: {translated}", "acls"))
        if translated not in existing:
            creates.append(CreateAcl(translated, acl))
    if creates and target.acls is None:
        return [*out, Notice(f"{target.alias} has no authorizer: {len(creates)} ACL binding(s) cannot be created",
                             "acls")]
    return out + creates


def _shown(value: str | None) -> str:
    return "null" if value is None else value
