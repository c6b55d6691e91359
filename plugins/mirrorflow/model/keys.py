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
    doc: str  # what mirrorflow does with it, one or two sentences (docs/configuration.md is made from these)
    choices: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()  # older names MM2 still reads


FLOW_KEYS: tuple[Key, ...] = (
    Key("enabled", "bool", "false", "Whether the flow `A->B` runs (`A->B.enabled = true`)."),
    Key("topics", "regex-list", DEFAULT_TOPICS, "Source topics the flow mirrors: Java regexes matched against the "
        "whole name, comma-separated.", aliases=("topics.whitelist",)),
    Key("topics.exclude", "regex-list", DEFAULT_TOPICS_EXCLUDE, "Topics never mirrored even when `topics` matches "
        "them (internal topics, other flows' checkpoints and heartbeats' copies are excluded by default).",
        aliases=("topics.blacklist",)),
    Key("groups", "regex-list", DEFAULT_GROUPS, "Consumer groups whose offsets checkpoint rounds translate.",
        aliases=("groups.whitelist",)),
    Key("groups.exclude", "regex-list", DEFAULT_GROUPS_EXCLUDE, "Groups never checkpointed.",
        aliases=("groups.blacklist",)),
    Key("replication.policy.class", "class", "org.apache.kafka.connect.mirror.DefaultReplicationPolicy",
        "How remote topics are named: `DefaultReplicationPolicy` (`A.topic`), `IdentityReplicationPolicy` (same "
        "name) or `mirrorflow.policy.PrefixReplicationPolicy`; custom Java classes are refused."),
    Key("replication.policy.separator", "str", ".", "The separator between the source alias and the topic name "
        "in remote topics and MM2's internal topics."),
    Key("replication.policy.prefix", "str", "", "The prefix `PrefixReplicationPolicy` puts before remote topic "
        "names (MirrorMaker 1's `--prefix`)."),
    Key("replication.policy.internal.topic.separator.enabled", "bool", "true", "Accepted, not used."),
    Key("source.cluster.alias", "str", "", "With `IdentityReplicationPolicy`: the alias remote topics are taken to "
        "come from."),
    Key("replication.factor", "int", "2", "Replication factor of remote topics the metadata sync creates."),
    Key("heartbeats.topic.replication.factor", "int", "3", "Replication factor of the heartbeats topic."),
    Key("checkpoints.topic.replication.factor", "int", "3", "Replication factor of the checkpoints topic."),
    Key("offset-syncs.topic.replication.factor", "int", "3", "Replication factor of the offset-syncs topic and of "
        "mirrorflow's other internal topics on the target."),
    Key("refresh.topics.enabled", "bool", "true", "Accepted, not used."),
    Key("refresh.topics.interval.seconds", "int", "600", "How often the stream's planner lists the source's topics, "
        "so a new matching topic or partition is mirrored within one interval (every 10 s when the file does not give "
        "it), and how often the flow DAG's metadata sync creates and grows remote topics (with the health check's "
        "interval, it sets the DAG's period)."),
    Key("sync.topic.configs.enabled", "bool", "true", "Whether the metadata sync copies topic configs."),
    Key("sync.topic.configs.interval.seconds", "int", "600", "How often topic configs are synced."),
    Key("config.properties.exclude", "regex-list", DEFAULT_CONFIG_PROPERTIES_EXCLUDE, "Topic configs never "
        "copied.", aliases=("config.properties.blacklist",)),
    Key("use.defaults.from", "enum", "target", "A config left at its default on the source: `target` leaves the "
        "target's default, `source` sets the source's default on the remote topic.", choices=("target", "source")),
    Key("sync.topic.acls.enabled", "bool", "true", "Whether the metadata sync copies the literal topic ACLs of "
        "replicated topics under the remote names, ALLOW WRITE left out and ALLOW ALL as ALLOW READ, as MM2 does."),
    Key("sync.topic.acls.interval.seconds", "int", "600", "How often ACLs are synced."),
    Key("emit.heartbeats.enabled", "bool", "true", "Whether the stream writes a heartbeat to the target's heartbeats "
        "topic."),
    Key("emit.heartbeats.interval.seconds", "int", "1", "How often it does."),
    Key("emit.checkpoints.enabled", "bool", "true", "Whether checkpoint rounds run for the flow."),
    Key("emit.checkpoints.interval.seconds", "int", "60", "How often a checkpoint round runs."),
    Key("emit.offset-syncs.enabled", "bool", "true", "Accepted, not used."),
    Key("refresh.groups.enabled", "bool", "true", "Accepted, not used."),
    Key("refresh.groups.interval.seconds", "int", "600", "Accepted, not used."),
    Key("sync.group.offsets.enabled", "bool", "false", "Whether checkpoint rounds also commit translated offsets to "
        "the target's group of the same name, when that group has no active member there."),
    Key("sync.group.offsets.interval.seconds", "int", "60", "Accepted, not used."),
    Key("offset.lag.max", "int", "100", "Used only to show MM2's own answer beside mirrorflow's exact one "
        "(`translate`): mirrorflow writes an offset sync per batch, not one per `offset.lag.max` records."),
    Key("offset-syncs.topic.location", "enum", "source", "Where MirrorMaker 2 keeps the flow's offset syncs (`source`: "
        "`mm2-offset-syncs.{target}.internal` on the source; `target`: `mm2-offset-syncs.{source}.internal` on the "
        "target); read by `mirrorflow takeover --from mm2`. mirrorflow's own always live on the target, in "
        "`mirrorflow-offset-syncs.{source}.internal`.", choices=("source", "target")),
    Key("tasks.max", "int", "1", "Accepted, not used."),
    Key("consumer.poll.timeout.ms", "int", "1000", "Accepted, not used."),
    Key("admin.timeout.ms", "int", "60000", "Accepted, not used."),
    Key("mirrorflow.provenance.header.enabled", "bool", "true", "Whether each mirrored record carries a header "
        "naming its source cluster, topic, partition and offset: the audit and active/active loop refusal read it."),
    Key("mirrorflow.audit.schedule", "str", "0 * * * *", "The cron schedule of the flow's audit DAG (UTC)."),
    Key("mirrorflow.records.fenced", "bool", "true", "At-least-once: the records too commit in the task slot's "
        "transaction, so a writer that lost the lease lands none after the takeover. `false`: idempotent records, "
        "no commit markers among them and a `read_committed` consumer sees each at once, but a frozen writer can "
        "land requests it had built, late."),
    Key("mirrorflow.offset-syncs.anchors.max", "int", "32", "Offset-sync anchors kept per source partition, the "
        "bound of the flow's translation state."),
    Key("mirrorflow.offset-syncs.anchors.spacing", "int", "0", "The least spacing between anchors near the head, "
        "in target offsets; 0: each batch's end until the bound."),
    Key("mirrorflow.offset-syncs.prune.interval.seconds", "int", "60", "How often anchors below the source's log "
        "start are dropped."),
    Key("mirrorflow.data-loss.fail.topics", "regex-list", "", "Topics whose data loss (source records deleted "
        "before the flow read them) stops the flow; by default the loss is recorded and shown, and the partition "
        "goes on from the source's log start."),
    Key("mirrorflow.checkpoints.task.seconds", "int", "600", "The longest one flow DAG run's checkpoint task runs "
        "rounds with the same readers (its run's period when shorter); 0: one round per run."),
    Key("mirrorflow.stream.watch.seconds", "int", "86400", "How long a stream DAG run waits, deferred, for its "
        "flow to need launching before it ends (a stopped flow makes one stream run a day)."),
    Key("mirrorflow.stream.watch.poll.seconds", "int", "15", "How often that wait looks: a stream is launched "
        "within one poll of being needed."),
    Key("mirrorflow.stream.spark.master", "master", "local[*]", "The Spark master of the flow's stream, however it "
        "is launched; when the file sets none, the stream DAG submits to the Airflow connection `mirrorflow_spark`."),
    Key("mirrorflow.stream.driver.memory", "memory", "1g", "The stream's driver memory."),
    Key("mirrorflow.stream.max.records.per.batch", "int", "250000", "Records per micro-batch at most (admission "
        "control)."),
    Key("mirrorflow.stream.trigger.ms", "int", "100", "The micro-batch interval while the flow is idle."),
    Key("mirrorflow.stream.linger.ms", "int", "1500", "How long a micro-batch's tasks go on copying records that "
        "arrive past the batch's end offsets, from its start; 0: no linger."),
    Key("mirrorflow.health.interval.seconds", "int", "600", "The scheduled health check's interval at most (task "
        "`health` of DAG `mirrorflow_flow__A_to_B`)."),
    Key("mirrorflow.health.grace.seconds", "int", "120", "The health check fails (Airflow's failure alerts fire) "
        "when a flow requested running has had no stream for this long."),
    Key("mirrorflow.health.lag.max.seconds", "int", "300", "It fails too when the flow is more than this far "
        "behind."),
    Key("mirrorflow.metrics.port", "port", "", "Where the stream serves Prometheus `/metrics` and JSON `/status`, "
        "however it is launched; no port: no endpoint."),
    Key("mirrorflow.metrics.host", "str", "127.0.0.1", "The address that endpoint listens on."),
)

# Keys of the whole file (`clusters`) or of its clusters, not of a flow.
GLOBAL_KEYS: tuple[Key, ...] = (
    Key("clusters", "list", "", "The cluster aliases, comma-separated."),
    Key("exactly.once.source.support", "enum", "disabled", "`enabled`: the flows into the cluster write each "
        "record exactly once (docs/guarantees.md); any other value: at least once. At top level for every cluster, "
        "or `{alias}.exactly.once.source.support` for one.", choices=("disabled", "preparing", "enabled")),
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
    "emit.offset-syncs.enabled": "offset syncs are always written: the stream resumes from them and checkpoints "
                                 "translate exactly with them",
    "sync.group.offsets.interval.seconds": "group offsets are synced in every checkpoint round "
                                           "(emit.checkpoints.interval.seconds)",
    "refresh.groups.enabled": "every checkpoint round lists the source's groups",
    "refresh.groups.interval.seconds": "every checkpoint round lists the source's groups "
                                       "(emit.checkpoints.interval.seconds)",
    "refresh.topics.enabled": "the stream's planner lists the source's topics every "
                              "refresh.topics.interval.seconds (10 s when not given), so new topics and partitions "
                              "join the next micro-batch after it",
    "tasks.max": "parallelism follows Spark's task slots: each micro-batch's partitions are cut into one set of "
                 "ranges per slot",
    "consumer.poll.timeout.ms": "the copier reads each micro-batch's ranges on its own schedule",
    "admin.timeout.ms": "admin calls wait at most 30 s each, and say which call timed out",
    "replication.policy.internal.topic.separator.enabled": "checkpoints and MM2 offset-syncs topic names always "
                                                           "use the replication policy's separator",
}
CONNECT_NOT_USED = "a Kafka Connect worker key: mirrorflow runs no Connect worker"
# Worker keys of MM2's dedicated mode that say where a running MirrorMaker 2 keeps its state: mirrorflow reads them
# only to take a flow over from it (`mirrorflow takeover --from mm2`).
TAKEOVER_ONLY: dict[str, str] = {
    "offset.storage.topic": "where MirrorMaker 2 committed its source offsets (default mm2-offsets.{source}.internal "
                            "on the target)",
}

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
