"""The configuration keys mirrorflow reads, with MM2's defaults and types (one table, one place)."""

from __future__ import annotations

from dataclasses import dataclass

from mirrorflow.rules.filters import (
    DEFAULT_GROUPS,
    DEFAULT_GROUPS_EXCLUDE,
    DEFAULT_TOPICS,
    DEFAULT_TOPICS_EXCLUDE,
)

DEFAULT_CONFIG_PROPERTIES_EXCLUDE = (
    r"follower\.replication\.throttled\.replicas, leader\.replication\.throttled\.replicas, "
    r"message\.timestamp\.difference\.max\.ms, message\.timestamp\.type, "
    r"unclean\.leader\.election\.enable, min\.insync\.replicas"
)


@dataclass(frozen=True)
class Key:
    name: str
    kind: str  # bool | int | port | str | regex-list | list | enum | class | memory | master
    default: str
    choices: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()  # older names MM2 still reads


FLOW_KEYS: tuple[Key, ...] = (
    Key("enabled", "bool", "false"),
    Key("topics", "regex-list", DEFAULT_TOPICS, aliases=("topics.whitelist",)),
    Key("topics.exclude", "regex-list", DEFAULT_TOPICS_EXCLUDE, aliases=("topics.blacklist",)),
    Key("groups", "regex-list", DEFAULT_GROUPS, aliases=("groups.whitelist",)),
    Key("groups.exclude", "regex-list", DEFAULT_GROUPS_EXCLUDE, aliases=("groups.blacklist",)),
    Key("replication.policy.class", "class", "org.apache.kafka.connect.mirror.DefaultReplicationPolicy"),
    Key("replication.policy.separator", "str", "."),
    Key("replication.policy.prefix", "str", ""),
    Key("replication.policy.internal.topic.separator.enabled", "bool", "true"),
    Key("source.cluster.alias", "str", ""),
    Key("replication.factor", "int", "2"),
    Key("heartbeats.topic.replication.factor", "int", "3"),
    Key("checkpoints.topic.replication.factor", "int", "3"),
    Key("offset-syncs.topic.replication.factor", "int", "3"),
    Key("refresh.topics.enabled", "bool", "true"),
    Key("refresh.topics.interval.seconds", "int", "600"),
    Key("sync.topic.configs.enabled", "bool", "true"),
    Key("sync.topic.configs.interval.seconds", "int", "600"),
    Key("config.properties.exclude", "regex-list", DEFAULT_CONFIG_PROPERTIES_EXCLUDE,
        aliases=("config.properties.blacklist",)),
    Key("use.defaults.from", "enum", "target", choices=("target", "source")),
    Key("sync.topic.acls.enabled", "bool", "true"),
    Key("sync.topic.acls.interval.seconds", "int", "600"),
    Key("emit.heartbeats.enabled", "bool", "true"),
    Key("emit.heartbeats.interval.seconds", "int", "1"),
    Key("emit.checkpoints.enabled", "bool", "true"),
    Key("emit.checkpoints.interval.seconds", "int", "60"),
    Key("emit.offset-syncs.enabled", "bool", "true"),
    Key("refresh.groups.enabled", "bool", "true"),
    Key("refresh.groups.interval.seconds", "int", "600"),
    Key("sync.group.offsets.enabled", "bool", "false"),
    Key("sync.group.offsets.interval.seconds", "int", "60"),
    Key("offset.lag.max", "int", "100"),
    Key("offset-syncs.topic.location", "enum", "source", choices=("source", "target")),
    Key("tasks.max", "int", "1"),
    Key("consumer.poll.timeout.ms", "int", "1000"),
    Key("admin.timeout.ms", "int", "60000"),
    Key("mirrorflow.provenance.header.enabled", "bool", "true"),
    Key("mirrorflow.audit.schedule", "str", "0 * * * *"),
    # At-least-once: the records too commit in the task slot's transaction, so a writer that lost the lease lands
    # none after the takeover (flow_lease, W4); false: idempotent records, no commit markers among them and a
    # read_committed consumer sees each at once, but a frozen writer can land requests it had built, late.
    Key("mirrorflow.records.fenced", "bool", "true"),
    # Offset-sync anchors kept per source partition (with its position and loss record: 257 live records, plus one
    # incarnation record per topic), and the least spacing between them near the head in target offsets; 0: each
    # batch's end until the bound (anchors.py).
    Key("mirrorflow.offset-syncs.anchors.max", "int", "255"),
    Key("mirrorflow.offset-syncs.anchors.spacing", "int", "0"),
    Key("mirrorflow.offset-syncs.prune.interval.seconds", "int", "60"),
    # Topics whose data loss (source records deleted before the flow read them) stops the flow; by default no
    # topic: the loss is recorded and shown, and the partition goes on from the source's log start.
    Key("mirrorflow.data-loss.fail.topics", "regex-list", ""),
    # The longest a flow DAG run's checkpoint task runs rounds with the same readers (it runs them for the run's
    # period, `deployment.flow_period`, when that is shorter); 0: one round per run.
    Key("mirrorflow.checkpoints.task.seconds", "int", "600"),
    # How long a stream DAG run waits (deferred, in Airflow's triggerer) for its flow to need launching before it
    # ends; the run after it starts within 30 s. So a stopped flow, or one whose stream runs elsewhere, makes one
    # stream run a day, and a stream is launched within one poll (`.poll.seconds`) of being needed.
    Key("mirrorflow.stream.watch.seconds", "int", "86400"),
    Key("mirrorflow.stream.watch.poll.seconds", "int", "15"),
    # The stream's Spark job, however it is launched (`mirrorflow stream`'s flags win for that run). The stream
    # DAG submits to the master its Airflow connection `mirrorflow_spark` names, unless the file sets one here.
    Key("mirrorflow.stream.spark.master", "master", "local[*]"),
    Key("mirrorflow.stream.driver.memory", "memory", "1g"),
    # Records per micro-batch at most (admission control), and the micro-batch interval when idle.
    Key("mirrorflow.stream.max.records.per.batch", "int", "250000"),
    Key("mirrorflow.stream.trigger.ms", "int", "100"),
    # How long a micro-batch's tasks go on copying what arrives past the batch's end offsets, from its start.
    Key("mirrorflow.stream.linger.ms", "int", "1500"),
    # The scheduled health check (task `health` of DAG mirrorflow_flow__A_to_B, at least every `.interval.seconds`)
    # fails, so that Airflow's failure alerts fire, when a flow requested running has had no stream for
    # `.grace.seconds` (its stream DAG relaunches a dead one within a minute) or is more than `.lag.max.seconds`
    # behind.
    Key("mirrorflow.health.interval.seconds", "int", "600"),
    Key("mirrorflow.health.grace.seconds", "int", "120"),
    Key("mirrorflow.health.lag.max.seconds", "int", "300"),
    # Where the flow's stream serves Prometheus /metrics and JSON /status, however it is launched (Airflow,
    # spark-submit, the CLI; `stream --metrics-port/--metrics-host` win); no port: no endpoint.
    Key("mirrorflow.metrics.port", "port", ""),
    Key("mirrorflow.metrics.host", "str", "127.0.0.1"),
)

# Keys valid at top level only.
GLOBAL_KEYS: tuple[Key, ...] = (
    Key("clusters", "list", ""),
    Key("exactly.once.source.support", "enum", "disabled", choices=("disabled", "preparing", "enabled")),
)

# Keys of Kafka Connect and of MM2's dedicated mode that a MirrorMaker 2 file may carry. mirrorflow
# accepts them so that an existing file validates unchanged, and does not use them.
CONNECT_KEYS = frozenset({
    "dedicated.mode.enable.internal.rest", "listeners", "rest.advertised.host.name",
    "rest.advertised.port", "rest.advertised.listener", "key.converter", "value.converter",
    "header.converter", "offset.storage.topic", "config.storage.topic", "status.storage.topic",
    "offset.storage.replication.factor", "config.storage.replication.factor",
    "status.storage.replication.factor", "offset.flush.interval.ms", "offset.flush.timeout.ms",
    "task.shutdown.graceful.timeout.ms", "scheduled.rebalance.max.delay.ms", "topic.filter.class",
    "group.filter.class", "config.property.filter.class", "forwarding.admin.class",
    "sync.topic.acls.enabled", "replication.policy.class",
    "checkpoints.topic.replication.factor", "heartbeats.topic.replication.factor",
    "config.providers", "metric.reporters", "group.id", "errors.tolerance", "errors.log.enable",
    "exactly.once.support", "transaction.boundary", "admin.timeout.ms", "topic.creation.enable",
})
CONNECT_PREFIXES = ("config.providers.", "producer.override.", "consumer.override.", "admin.override.",
                    "listeners.https.", "rest.", "metric.reporters.")

# MirrorMaker 2 keys mirrorflow accepts and does not act on, with what it does instead (`validate` reports each one a
# file sets). Invariant: every key here is a FLOW_KEYS name (so it validates) that no code reads.
NOT_USED: dict[str, str] = {
    "offset-syncs.topic.location": "offset syncs always live on the target, in mirrorflow-offset-syncs.{source}"
                                   ".internal, beside the records they describe",
    "emit.offset-syncs.enabled": "offset syncs are always written: the stream resumes from them and checkpoints "
                                 "translate exactly with them",
    "sync.group.offsets.interval.seconds": "group offsets are synced in every checkpoint round "
                                           "(emit.checkpoints.interval.seconds)",
    "refresh.groups.enabled": "every checkpoint round lists the source's groups",
    "refresh.groups.interval.seconds": "every checkpoint round lists the source's groups "
                                       "(emit.checkpoints.interval.seconds)",
    "refresh.topics.enabled": "the stream subscribes by pattern: new topics and partitions are read from the next "
                              "micro-batch; the flow DAG still syncs topics every refresh.topics.interval.seconds",
    "tasks.max": "parallelism follows Spark's cores: one task per core, one Kafka reader per source partition",
    "consumer.poll.timeout.ms": "Spark's Kafka source polls on its own schedule (trigger every 100 ms)",
    "admin.timeout.ms": "admin calls wait at most 30 s each, and say which call timed out",
    "replication.policy.internal.topic.separator.enabled": "checkpoints and MM2 offset-syncs topic names always "
                                                           "use the replication policy's separator",
}
CONNECT_NOT_USED = "a Kafka Connect worker key: mirrorflow runs no Connect worker"

# Client keys that apply to every client of a cluster when written as `{alias}.{key}` or at top level
# (MM2's MirrorClientConfig: common, SSL and SASL client settings).
CLIENT_KEY_PREFIXES = ("ssl.", "sasl.", "security.", "client.", "metrics.", "reconnect.", "retry.",
                       "socket.", "connections.", "request.", "receive.", "send.", "metadata.")
CLIENT_KEYS = frozenset({"bootstrap.servers", "client.dns.lookup", "client.id",
                         "default.api.timeout.ms", "security.protocol", "security.providers"})
CLIENT_ROLES = ("consumer", "producer", "admin")

FLOW_KEY_BY_NAME = {k.name: k for k in FLOW_KEYS} | {a: k for k in FLOW_KEYS for a in k.aliases}
GLOBAL_KEY_BY_NAME = {k.name: k for k in GLOBAL_KEYS}

POLICY_CLASSES = {
    "DefaultReplicationPolicy": "default",
    "org.apache.kafka.connect.mirror.DefaultReplicationPolicy": "default",
    "IdentityReplicationPolicy": "identity",
    "org.apache.kafka.connect.mirror.IdentityReplicationPolicy": "identity",
    "mirrorflow.policy.PrefixReplicationPolicy": "prefix",
    "PrefixReplicationPolicy": "prefix",
}


def is_client_key(key: str) -> bool:
    return key in CLIENT_KEYS or key.startswith(CLIENT_KEY_PREFIXES)


def is_sensitive(key: str) -> bool:
    """Keys whose values are secrets: never printed, never logged."""
    k = key.lower()
    return any(w in k for w in ("password", "secret", "jaas", "token", "credential", "user.info",
                                "private")) or k.endswith((".key", "keystore.key", "key.pem"))
