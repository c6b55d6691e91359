"""The admin side of metadata sync: snapshots of a cluster's topics, configs and ACLs, and applying a plan.

What to change is decided in drift.py. The stream calls `ensure_remote_topics` before it writes to a topic
or partition it has not seen; `mirrorflow plan`/`sync` and the sync DAGs use the same snapshot, plan and
apply, so topics are created one way only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourcePatternType,
    ResourceType,
)
from confluent_kafka.cimpl import _AdminClientImpl

from mirrorflow.errors import OperationalError
from mirrorflow.model import drift, selection
from mirrorflow.model.config import Flow, MirrorConfig
from mirrorflow.model.drift import (
    Acl,
    AddPartitions,
    Change,
    ClusterState,
    ConfigValue,
    CreateAcl,
    CreateTopic,
    DeleteConfig,
    Notice,
    SetConfig,
    TopicState,
)

log = logging.getLogger(__name__)
TIMEOUT_S = 30.0


def wait(futures: Mapping[Any, Any], what: str, *, tolerate: tuple[int, ...] = ()) -> dict[Any, Any]:
    """Results of admin futures; a failure is one OperationalError naming `what` and the resource."""
    out = {}
    for resource, future in futures.items():
        try:
            out[resource] = future.result(timeout=TIMEOUT_S)
        except KafkaException as exc:
            err: KafkaError = exc.args[0]
            if err.code() in tolerate:
                out[resource] = None
                continue
            raise OperationalError(f"{what} {_name(resource)}: {err.str()}") from None
        except TimeoutError:
            raise OperationalError(f"{what} {_name(resource)}: no answer within {TIMEOUT_S:.0f} s") from None
    return out


def partition_counts(admin: AdminClient, cluster: str) -> tuple[dict[str, int], int]:
    """(topic -> partition count, broker count) of a cluster."""
    md = _metadata(admin, cluster)
    return {name: len(t.partitions) for name, t in md.topics.items() if t.error is None}, len(md.brokers)


# One list_offsets call's CPU grows faster than its partitions (here: 12 in 0.8 ms, 240 in 6 ms, 2,400 in 100 ms):
# calls of this many, sent together, cost in proportion to the partitions.
OFFSETS_PER_CALL = 250


_MISSING = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION)


# An answer without an error but without an offset either: seen for the partitions of a target broker just killed,
# before their leaders moved. Not an end of -1001 (a remote topic truncated, to topic_changes): no answer.
OFFSET_INVALID = -1001


def offsets(admin: AdminClient, alias: str, partitions: Sequence[tuple[str, int]], spec: Any,
            isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED, *,
            available_within: float | None = None, missing_ok: bool = False) -> dict[tuple[str, int], int]:
    """Each partition's offset for `spec` (earliest, latest, or the first at or after a timestamp).

    `available_within`: only the partitions that answer within that many seconds (a partition without a leader
    is left out, not an error). `missing_ok`: a partition the cluster does not have is left out, not an error.

    Each call of OFFSETS_PER_CALL partitions is made on the client's own method, with one future for its answers:
    the wrapper's future per partition was two thirds of the CPU of a read of 24,000 partitions (0.72 s against
    0.27 s), which a flow's planner makes every few seconds."""
    if not partitions:
        return {}
    timeout = available_within or TIMEOUT_S
    wanted = int(spec._value)
    calls: list[tuple[Sequence[tuple[str, int]], Future[Any]]] = []
    for at in range(0, len(partitions), OFFSETS_PER_CALL):
        chunk = partitions[at:at + OFFSETS_PER_CALL]
        answered: Future[Any] = Future()
        _AdminClientImpl.list_offsets(admin, [TopicPartition(t, p, wanted) for t, p in chunk], answered,
                                      isolation_level_value=isolation.value, request_timeout=timeout)
        calls.append((chunk, answered))
    out = {}
    for chunk, answered in calls:
        try:
            answers = {(tp.topic, tp.partition): a for tp, a in answered.result(timeout=timeout).items()}
        except (KafkaException, TimeoutError) as exc:
            answers = {tp: exc.args[0] if isinstance(exc, KafkaException) else None for tp in chunk}
        for tp in chunk:
            answer = answers.get(tp)
            if answer is not None and not isinstance(answer, KafkaError) and answer.offset != OFFSET_INVALID:
                out[tp] = answer.offset
            elif missing_ok and isinstance(answer, KafkaError) and answer.code() in _MISSING:
                continue
            elif available_within is None:
                why = answer.str() if isinstance(answer, KafkaError) else "no answer"
                raise OperationalError(f"cannot read the offsets of {tp[0]}-{tp[1]} on {alias}: {why}")
    return out


def topic_ids(admin: AdminClient, cluster: str, topics: Sequence[str]) -> dict[str, str]:
    """Kafka's topic ID of each topic that exists (a topic deleted meanwhile is left out)."""
    if not topics:
        return {}
    futures = admin.describe_topics(TopicCollection(list(topics)), request_timeout=TIMEOUT_S)
    described = wait(futures, f"cannot describe topics on {cluster}:", tolerate=(KafkaError.UNKNOWN_TOPIC_OR_PART,))
    return {name: str(d.topic_id) for name, d in described.items() if d is not None}


# A broker that just restarted drops the first connection a request used (a transport failure, or its handle
# decommissioned while it left the metadata): asked again for this long before the cluster counts as unreachable.
RECONNECT_S = 3.0
_RECONNECTING = (KafkaError._TRANSPORT, KafkaError._DESTROY_BROKER)


def _metadata(admin: AdminClient, cluster: str) -> Any:
    deadline = time.monotonic() + RECONNECT_S
    while True:
        try:
            return admin.list_topics(timeout=TIMEOUT_S)
        except KafkaException as exc:
            if exc.args[0].code() not in _RECONNECTING or time.monotonic() >= deadline:
                raise OperationalError(f"cluster {cluster} unreachable: {exc.args[0].str()}") from None
        time.sleep(0.5)


def replication_factor(wanted: int, brokers: int, where: str) -> int:
    """The configured factor, capped at the target's broker count (a warning says so)."""
    if wanted > brokers:
        log.warning("%s: replication factor %d capped at the target's %d broker(s)", where, wanted, brokers)
        return max(brokers, 1)
    return wanted


def snapshot(admin: AdminClient, alias: str, wanted: Callable[[str], bool], *, acls: bool = False,
             configs: Callable[[str], bool] | None = None) -> ClusterState:
    """The topics `wanted` selects, with their partitions and config entries (of those `configs` selects, when
    given; the others with none), and optionally the topic ACLs.

    A topic deleted while it is being read is left out (with a log line), not an error.
    """
    md = _metadata(admin, alias)
    names = sorted(t for t, m in md.topics.items() if m.error is None and wanted(t))
    described = [t for t in names if configs is None or configs(t)]
    topics = {t: TopicState(len(md.topics[t].partitions)) for t in names if configs is not None and not configs(t)}
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in described]
    answers = wait(admin.describe_configs(resources) if resources else {}, f"cannot read topic configs on {alias}:",
                   tolerate=(KafkaError.UNKNOWN_TOPIC_OR_PART,))
    for resource, entries in answers.items():
        if entries is None:
            log.info("%s: topic %s was deleted while syncing; skipped", alias, resource.name)
            continue
        topics[resource.name] = TopicState(len(md.topics[resource.name].partitions),
                                           {k: _config_value(e) for k, e in entries.items()})
    return ClusterState(alias, topics, len(md.brokers), _topic_acls(admin, alias) if acls else None)


# The pace at which a cluster is expected to make new partitions at the least: the two brokers of a target here
# made 24,000 in about 80 s, while a flow's stream started beside them.
CREATED_PER_S = 200
# A KRaft controller refuses a request that creates more than 10,000 partitions ("Excessively large number of
# partitions per request"): 2,000 new topics of 12 partitions, a flow's first batch at that shape, were one request.
PARTITIONS_PER_REQUEST = 5_000
Item = TypeVar("Item")


def batches(items: Sequence[Item], size: Callable[[Item], int], limit: int) -> list[list[Item]]:
    """`items` in order, cut into runs whose sizes add up to at most `limit` (an item larger than it: a run alone).
    Invariant: the runs, joined, are `items`."""
    out: list[list[Item]] = []
    total = 0
    for item in items:
        if not out or total + size(item) > limit:
            out.append([])
            total = 0
        out[-1].append(item)
        total += size(item)
    return out


def apply(cluster: str, admin: AdminClient, changes: Sequence[Change]) -> list[Change]:
    """Make the plan's changes on the target cluster; the ones made (notices are not changes), once the cluster
    shows them (`confirm`)."""
    done: list[Change] = []
    creates = [c for c in changes if isinstance(c, CreateTopic)]
    for batch in batches(creates, lambda c: c.partitions, PARTITIONS_PER_REQUEST):
        wait(admin.create_topics([NewTopic(c.topic, c.partitions, c.replication_factor, config=dict(c.configs))
                                  for c in batch]),
             f"cannot create topic on {cluster}:", tolerate=(KafkaError.TOPIC_ALREADY_EXISTS,))
        done += batch
    grows = [c for c in changes if isinstance(c, AddPartitions)]
    for grown in batches(grows, lambda c: c.wanted - c.current, PARTITIONS_PER_REQUEST):
        wait(admin.create_partitions([NewPartitions(c.topic, c.wanted) for c in grown]),
             f"cannot add partitions on {cluster} to")
        done += grown
    by_topic: dict[str, list[SetConfig | DeleteConfig]] = {}
    for c in changes:
        if isinstance(c, SetConfig | DeleteConfig):
            by_topic.setdefault(c.topic, []).append(c)
    if by_topic:
        resources = [ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[_alter(c) for c in cs])
                     for topic, cs in by_topic.items()]
        wait(admin.incremental_alter_configs(resources), f"cannot alter topic configs on {cluster}:")
        done += [c for cs in by_topic.values() for c in cs]
    acls = [c for c in changes if isinstance(c, CreateAcl)]
    if acls:
        wait(admin.create_acls([_binding(c.acl) for c in acls]), f"cannot create ACL on {cluster}:")
        done += acls
    confirm(cluster, admin, done)
    return done


def confirm(cluster: str, admin: AdminClient, done: Sequence[Change], timeout_s: float | None = None) -> None:
    """Return once a fresh read of the cluster shows every change made, and every partition created answers for
    its end offset; else, after `timeout_s` (default: TIMEOUT_S and a second per CREATED_PER_S partitions made),
    one OperationalError naming the first that it does not show. (KRaft brokers apply metadata asynchronously: the
    next read may miss a change. A broker lists a new partition before it has made its log, and refuses records for
    it until then.)"""
    if not done:
        return
    topics = {c.topic for c in done if not isinstance(c, CreateAcl | Notice)}
    # A new or grown topic shows in the metadata: its configs are read only for a config change (2,000 topics'
    # configs at each look took the target's brokers and this process most of 30 s while creating them).
    configured = {c.topic for c in done if isinstance(c, SetConfig | DeleteConfig)}
    unready = sorted({(c.topic, p) for c in done if isinstance(c, CreateTopic) for p in range(c.partitions)}
                     | {(c.topic, p) for c in done if isinstance(c, AddPartitions) for p in range(c.current, c.wanted)})
    acls = any(isinstance(c, CreateAcl) for c in done)
    if timeout_s is None:
        timeout_s = TIMEOUT_S + len(unready) / CREATED_PER_S
    deadline, pause = time.monotonic() + timeout_s, 0.05
    while True:
        missing: Sequence[Any] = drift.unseen(done, snapshot(admin, cluster, topics.__contains__, acls=acls,
                                                             configs=configured.__contains__))
        if not missing and unready:
            answered = offsets(admin, cluster, unready, OffsetSpec.latest(), available_within=5.0)  # type: ignore[no-untyped-call]
            unready = [tp for tp in unready if tp not in answered]
            missing = [f"partition {t}-{p} made, its log not yet" for t, p in unready]
        if not missing:
            return
        if time.monotonic() >= deadline:
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise OperationalError(f"{cluster}: made, but not visible after {timeout_s:.0f} s: {missing[0]}{more}; "
                                   "the brokers lag the controller (kafka-metadata-quorum.sh describe --replication)")
        time.sleep(pause)
        pause = min(pause * 2, 1.0)


def ensure_remote_topics(flow: Flow, source: AdminClient, target: AdminClient,
                         partitions: Mapping[str, int]) -> list[Change]:
    """Make every remote topic of these source topics exist with at least the source's partitions. Configs are read
    only of the source topics whose remote topic is missing (a new one starts with them): a restart of a flow of
    2,000 topics read every config of both sides."""
    remote = {t: flow.policy.remote_topic(flow.source, t) for t in partitions}
    target_state = snapshot(target, flow.target, set(remote.values()).__contains__, configs=lambda _: False)
    missing = {t for t, r in remote.items() if r not in target_state.topics}
    changes = drift.plan(flow, snapshot(source, flow.source, partitions.__contains__, configs=missing.__contains__),
                         target_state, parts=("topics",))
    for notice in (c for c in changes if isinstance(c, Notice)):
        log.warning("%s: %s", flow.name, notice.text)
    done = apply(flow.target, target, changes)
    for change in done:
        log.info("%s: %s", flow.name, change)
    return done


# Compacted internal topics keep a small uncompacted head: segments roll within 10 minutes (or at 16 MiB), the
# cleaner runs once a tenth is dirty and at the latest an hour after a write, and tombstones live an hour.
COMPACTED = {"cleanup.policy": "compact", "segment.ms": "600000", "segment.bytes": "16777216",
             "min.cleanable.dirty.ratio": "0.1", "max.compaction.lag.ms": "3600000", "delete.retention.ms": "3600000"}


def ensure_internal_topic(admin: AdminClient, cluster: str, topic: str, wanted_rf: int,
                          configs: Mapping[str, str]) -> bool:
    """Create a one-partition internal topic (offset syncs, heartbeats, checkpoints) unless it exists; an existing
    one gets `configs` where its own differ (an older mirrorflow created it with fewer settings). True if created."""
    counts, brokers = partition_counts(admin, cluster)
    if topic in counts:
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        current = wait(admin.describe_configs([resource]), f"cannot read the configs of {cluster}")[resource]
        changes = [SetConfig(topic, k, current[k].value if k in current else None, v) for k, v in configs.items()
                   if k not in current or current[k].value != v]
        if changes:
            apply(cluster, admin, changes)
            log.info("%s %s: set %s", cluster, topic, ", ".join(f"{c.key}={c.new}" for c in changes))
        return False
    rf = replication_factor(wanted_rf, brokers, f"{cluster} {topic}")
    wait(admin.create_topics([NewTopic(topic, 1, rf, config=dict(configs))]),
         f"cannot create internal topic on {cluster}:", tolerate=(KafkaError.TOPIC_ALREADY_EXISTS,))
    confirm(cluster, admin, [CreateTopic(topic, 1, rf, dict(configs))])
    return True


def _name(resource: Any) -> str:
    return getattr(resource, "name", None) or getattr(resource, "topic", None) or str(resource)


_SOURCES = {ConfigSource.DYNAMIC_TOPIC_CONFIG.value: "topic", ConfigSource.DEFAULT_CONFIG.value: "default",
            ConfigSource.STATIC_BROKER_CONFIG.value: "static", ConfigSource.UNKNOWN_CONFIG.value: "default"}


def _config_value(entry: Any) -> ConfigValue:
    return ConfigValue(entry.value, _SOURCES.get(entry.source, "broker"), bool(entry.is_read_only),
                       bool(entry.is_sensitive))


def _alter(change: SetConfig | DeleteConfig) -> ConfigEntry:
    if isinstance(change, SetConfig):
        return ConfigEntry(change.key, change.new, incremental_operation=AlterConfigOpType.SET)
    return ConfigEntry(change.key, None, incremental_operation=AlterConfigOpType.DELETE)


def _topic_acls(admin: AdminClient, alias: str) -> tuple[Acl, ...] | None:
    """Every topic ACL of the cluster; None when it has no authorizer."""
    query = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None,  # type: ignore[arg-type]
                             AclOperation.ANY, AclPermissionType.ANY)
    try:
        bindings = admin.describe_acls(query).result(timeout=TIMEOUT_S)
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.SECURITY_DISABLED:
            return None
        raise OperationalError(f"cannot describe the ACLs of {alias}: {exc.args[0].str()}") from None
    except TimeoutError:
        raise OperationalError(f"cannot describe the ACLs of {alias}: no answer within {TIMEOUT_S:.0f} s") from None
    if not bindings and not _has_authorizer(admin):
        return None
    return tuple(Acl(b.name, b.principal, b.operation.name, b.permission_type.name, b.host,
                     b.resource_pattern_type.name) for b in bindings)


def _has_authorizer(admin: AdminClient) -> bool:
    # Kafka 4 answers DescribeAcls with an empty list when no authorizer is configured (librdkafka drops the
    # error); DeleteAcls still says SECURITY_DISABLED. The filter only matches a principal nobody has.
    probe = AclBindingFilter(ResourceType.TOPIC, "mirrorflow-authorizer-probe", ResourcePatternType.LITERAL,
                             "User:mirrorflow-authorizer-probe", "*", AclOperation.READ, AclPermissionType.ALLOW)
    try:
        for future in admin.delete_acls([probe]).values():
            future.result(timeout=TIMEOUT_S)
    except KafkaException as exc:
        return bool(exc.args[0].code() != KafkaError.SECURITY_DISABLED)
    return True


def _binding(acl: Acl) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, acl.topic, ResourcePatternType[acl.pattern], acl.principal, acl.host,
                      AclOperation[acl.operation], AclPermissionType[acl.permission])


def flow_plan(cfg: MirrorConfig, flow: Flow, parts: Collection[str] = drift.PARTS,
              target_admin: AdminClient | None = None) -> list[Change]:
    """The drift plan of one flow, from fresh snapshots of its source and target."""
    from mirrorflow.kafka import clients

    with_acls = "acls" in parts and flow.flag("sync.topic.acls.enabled")
    source = snapshot(clients.admin(cfg.cluster(flow.source)), flow.source,
                      lambda t: selection.replicates(flow, t), acls=with_acls)
    remote = {flow.policy.remote_topic(flow.source, t) for t in source.topics}
    if target_admin is None:  # not `or`: a client with nothing queued is falsy (its len)
        target_admin = clients.admin(cfg.cluster(flow.target))
    target = snapshot(target_admin, flow.target, remote.__contains__,
                      acls=with_acls)
    return drift.plan(flow, source, target, parts)


def sync_flow(cfg: MirrorConfig, flow: Flow, parts: Collection[str] = drift.PARTS) -> tuple[list[Change], list[Notice]]:
    """Plan and apply one flow's metadata sync: (changes made, notices)."""
    from mirrorflow.kafka import clients

    target_admin = clients.admin(cfg.cluster(flow.target))
    changes = flow_plan(cfg, flow, parts, target_admin)
    done = apply(flow.target, target_admin, changes)
    return done, [c for c in changes if isinstance(c, Notice)]
