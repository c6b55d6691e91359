from __future__ import annotations

from pathlib import Path

import pytest
from mirrorflow.errors import InvalidConfig
from mirrorflow.model import config, keys
from mirrorflow.rules.policy import DefaultReplicationPolicy, IdentityReplicationPolicy

EXAMPLES = Path(__file__).resolve().parent.parent / "include" / "examples"
PACKAGE = Path(config.__file__).resolve().parent
DAGS = Path(__file__).resolve().parent.parent / "dags"
BASE = "clusters = A, B\nA.bootstrap.servers = a:9092\nB.bootstrap.servers = b:9092\n"


def load(text: str, env: dict[str, str] | None = None) -> config.MirrorConfig:
    return config.from_text(text, source="mm2.properties", env=env or {})


def problems(text: str) -> list[str]:
    with pytest.raises(InvalidConfig) as info:
        load(text)
    return [str(p) for p in info.value.problems]


def test_active_passive_example_of_the_mm2_docs() -> None:
    cfg = config.load(EXAMPLES / "active-passive.properties")
    (flow,) = cfg.enabled_flows
    assert flow.name == "primary->secondary"
    assert flow.topic_filter.selects("quux-1") and not flow.topic_filter.selects("other")
    assert flow.policy.remote_topic("primary", "foobar-topic") == "primary.foobar-topic"


def test_active_active_example_is_read_despite_the_docs_case_typo() -> None:
    cfg = config.load(EXAMPLES / "active-active.properties")
    assert [f.name for f in cfg.enabled_flows] == ["us-west->us-east", "us-east->us-west"]
    assert cfg.clusters["us-east"].bootstrap_servers == "broker3-east:9092,broker4-east:9092"
    assert any("Us-east.bootstrap.servers: names cluster 'us-east' in another case" in w for w in cfg.warnings)


def test_six_cluster_xdcr_example() -> None:
    cfg = config.load(EXAMPLES / "xdcr-six-clusters.properties")
    assert len(cfg.clusters) == 6 and len(cfg.enabled_flows) == 12
    assert cfg.select_clusters(["west-1", "west-2"]).enabled_flows == tuple(
        f for f in cfg.enabled_flows if f.target in ("west-1", "west-2"))


def test_flow_override_beats_top_level_beats_default() -> None:
    cfg = load(BASE + "A->B.enabled = true\ntopics = t.*\nreplication.factor = 3\n"
               "A->B.replication.factor = 1\n")
    flow = cfg.flow("A->B")
    assert flow.number("replication.factor") == 1
    assert flow.settings["replication.factor"].key == "A->B.replication.factor"
    assert flow.value("topics") == "t.*"
    assert flow.number("offset.lag.max") == 100 and flow.settings["offset.lag.max"].line is None


def test_legacy_blacklist_key_is_read_as_topics_exclude() -> None:
    flow = load(BASE + "A->B.enabled = true\ntopics.blacklist = secret.*\n").flow("A->B")
    assert not flow.topic_filter.selects("secret1") and flow.topic_filter.selects("public")


def test_identity_policy_by_short_and_full_class_name() -> None:
    for cls in ("IdentityReplicationPolicy", "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"):
        flow = load(BASE + f"A->B.enabled = true\nreplication.policy.class = {cls}\n").flow("A->B")
        assert isinstance(flow.policy, IdentityReplicationPolicy)
    flow = load(BASE + "A->B.enabled = true\nA->B.replication.policy.separator = _\n").flow("A->B")
    assert flow.policy == DefaultReplicationPolicy("_")


def test_client_overrides_follow_mm2_precedence() -> None:
    cfg = load(BASE + "security.protocol = SSL\nA.security.protocol = SASL_SSL\n"
               "A.consumer.isolation.level = read_committed\nA.producer.acks = all\n"
               "A.admin.bootstrap.servers = admin-a:9092\nconsumer.fetch.min.bytes = 10\n")
    a, b = cfg.clusters["A"], cfg.clusters["B"]
    assert a.client_config("consumer")["security.protocol"] == "SASL_SSL"
    assert a.client_config("consumer")["isolation.level"] == "read_committed"
    assert a.client_config("consumer")["fetch.min.bytes"] == "10"
    assert "acks" not in a.client_config("consumer") and a.client_config("producer")["acks"] == "all"
    assert a.client_config("admin")["bootstrap.servers"] == "admin-a:9092"
    assert b.client_config("producer")["security.protocol"] == "SSL"


def test_secrets_come_from_placeholders_and_are_never_shown() -> None:
    cfg = load(BASE + 'A.sasl.jaas.config = x required password="${env:PW}";\n'
               "A.ssl.key.password = ${env:PW}\nA->B.enabled = true\n", env={"PW": "hunter2"})
    a = cfg.clusters["A"]
    assert a.client_config("admin")["sasl.jaas.config"] == 'x required password="hunter2";'
    assert a.settings["ssl.key.password"].shown == "[hidden]"
    assert "hunter2" not in repr(a.settings["sasl.jaas.config"].shown)


def test_file_placeholder(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets.properties"
    secrets.write_text("pw = from-file\n")
    cfg = load(BASE + f"A.ssl.key.password = ${{file:{secrets}:pw}}\n")
    assert cfg.clusters["A"].client_config("admin")["ssl.key.password"] == "from-file"


@pytest.mark.parametrize(("text", "expected"), [
    (BASE + "A->C.enabled = true\n", "mm2.properties:4: A->C.enabled: flow A->C... names no known target"),
    (BASE + "X->B.enabled = true\n", "mm2.properties:4: X->B.enabled: unknown cluster alias 'X' in flow"),
    (BASE + "A->A.enabled = true\n", "mm2.properties:4: A->A.enabled: a flow from cluster 'A' to itself"),
    ("clusters = A, B\nA.bootstrap.servers = a:9092\n", "mm2.properties:1: B.bootstrap.servers: cluster 'B' has no"),
    (BASE + "topics = ok, bad[\n", "mm2.properties:4: topics: bad regex 'bad['"),
    (BASE + "A->B.topics.exclude = (?<=x\n", "mm2.properties:4: A->B.topics.exclude: bad regex"),
    (BASE + "A->B.enabled = true\nA->B.offset.lag.max = lots\n",
     "mm2.properties:5: A->B.offset.lag.max: expected a whole number, got 'lots'"),
    (BASE + "replication.factor = 0\n", "mm2.properties:4: replication.factor: must be positive"),
    (BASE + "A->B.enabled = yes\n", "mm2.properties:4: A->B.enabled: expected true or false, got 'yes'"),
    (BASE + "offset-syncs.topic.location = middle\n", "offset-syncs.topic.location: expected one of source, target"),
    (BASE + "B.exactly.once.source.support = on\n", "B.exactly.once.source.support: expected one of disabled"),
    (BASE + "replication.policy.class = com.acme.MyPolicy\n", "unsupported replication policy 'com.acme.MyPolicy'"),
    (BASE + "A.sasl.jaas.config = ${env:NOPE_NOT_SET}\n", "A.sasl.jaas.config: environment variable NOPE_NOT_SET"),
    ("A.bootstrap.servers = a:1\n", "clusters: required key is missing: list the cluster aliases (bootstrap"),
    ("clusters = A, A\nA.bootstrap.servers = a:1\n", "cluster alias 'A' is listed twice"),
    (BASE + "A->B.enabled = true\nB.exactly.once.source.support = enabled\n"
            "A.consumer.isolation.level = read_uncommitted\n",
     "mm2.properties:6: A.consumer.isolation.level: flow A->B is exactly-once (B.exactly.once.source.support = "
     "enabled): it reads A read_committed, not read_uncommitted"),
])
def test_bad_input_is_reported_with_file_line_and_key(text: str, expected: str) -> None:
    assert any(expected in p for p in problems(text)), problems(text)


def test_an_exactly_once_flow_reads_its_source_committed() -> None:
    cfg = config.from_text(BASE + "A->B.enabled = true\nB.exactly.once.source.support = enabled\n")
    assert cfg.reads_committed(cfg.flow("A->B"))
    plain = config.from_text(BASE + "A->B.enabled = true\n")
    assert not plain.reads_committed(plain.flow("A->B"))


def test_every_problem_is_reported_not_only_the_first() -> None:
    found = problems(BASE + "A->C.enabled = true\nreplication.factor = x\n")
    assert len(found) == 2


@pytest.mark.parametrize(("text", "warning"), [
    (BASE + "A->B.enabled = true\ntopcis = .*\n", "topcis: unknown key, ignored; did you mean 'topics'?"),
    (BASE + "A->B.enabled = true\nA->B.emit.heartbeats = false\n",
     "unknown flow setting 'emit.heartbeats'; did you mean 'emit.heartbeats.enabled'?"),
    (BASE + "A->B.enabled = true\ntopics = .* # all\n", "properties files have no inline comments"),
    (BASE + "A->B.enabled = true\ntopics = a\ntopics = b\n", "set again (first on line 5)"),
    (BASE, "no flow is enabled"),
])
def test_suspicious_input_is_a_warning_not_an_error(text: str, warning: str) -> None:
    assert any(warning in w for w in load(text).warnings), load(text).warnings


def test_connect_keys_of_an_mm2_file_are_accepted_silently() -> None:
    cfg = load(BASE + "A->B.enabled = true\ntasks.max = 4\ndedicated.mode.enable.internal.rest = true\n"
               "listeners = http://localhost:8080\nkey.converter = x\nconfig.providers = env\n"
               "config.providers.env.class = org.apache.kafka.common.config.provider.EnvVarConfigProvider\n")
    assert cfg.warnings == ()


def test_mm2_keys_mirrorflow_does_not_act_on_are_listed_with_what_it_does_instead() -> None:
    cfg = load(BASE + "A->B.enabled = true\ntasks.max = 4\nA->B.offset-syncs.topic.location = target\n"
               "offset.storage.topic = mm2-offsets\nA->B.emit.checkpoints.enabled = true\n")
    assert cfg.not_used == (
        "mm2.properties:5: tasks.max: accepted, not used: " + keys.NOT_USED["tasks.max"],
        "mm2.properties:7: offset.storage.topic: read only by `mirrorflow takeover --from mm2`: "
        + keys.TAKEOVER_ONLY["offset.storage.topic"],
    )
    assert cfg.warnings == ()


def test_a_key_listed_as_not_used_is_a_flow_key_that_no_module_reads() -> None:
    sources = "\n".join(p.read_text() for p in [*PACKAGE.rglob("*.py"), *DAGS.glob("*.py")])
    for name in keys.NOT_USED:
        assert name in keys.FLOW_KEY_BY_NAME, name
        for read in ("value", "flag", "number"):  # a Flow's accessors
            assert f'.{read}("{name}")' not in sources, f"{name} is read: drop it from keys.NOT_USED"


def test_a_flows_metrics_port_is_a_tcp_port_or_nothing() -> None:
    assert load(BASE + "A->B.enabled = true\n").flow("A->B").metrics_port is None
    assert load(BASE + "A->B.enabled = true\nA->B.mirrorflow.metrics.port = 9095\n").flow("A->B").metrics_port == 9095
    assert problems(BASE + "A->B.enabled = true\nmirrorflow.metrics.port = 99999\n") == [
        "mm2.properties:5: mirrorflow.metrics.port: expected a TCP port (1-65535) or nothing, got '99999'"]


def test_a_flows_stream_settings_come_from_the_file_with_each_default_in_the_key_table() -> None:
    plain = load(BASE + "A->B.enabled = true\nB->A.enabled = true\n")
    defaults = {k.name: k.default for k in keys.FLOW_KEYS}
    assert plain.flow("A->B").stream == config.StreamSettings(
        defaults["mirrorflow.stream.spark.master"], defaults["mirrorflow.stream.driver.memory"],
        int(defaults["mirrorflow.stream.max.records.per.batch"]), int(defaults["mirrorflow.stream.trigger.ms"]),
        int(defaults["mirrorflow.stream.linger.ms"]))
    assert not plain.flow("A->B").given("mirrorflow.stream.spark.master")
    tuned = load(BASE + "A->B.enabled = true\nB->A.enabled = true\nmirrorflow.stream.trigger.ms = 0\n"
                 "A->B.mirrorflow.stream.linger.ms = 0\n"
                 "A->B.mirrorflow.stream.max.records.per.batch = 60000\nA->B.mirrorflow.stream.driver.memory = 2g\n"
                 "A->B.mirrorflow.stream.spark.master = spark://m:7077\n")
    assert tuned.flow("A->B").stream == config.StreamSettings("spark://m:7077", "2g", 60_000, 0, 0)
    assert tuned.flow("A->B").given("mirrorflow.stream.spark.master")
    assert tuned.flow("B->A").stream.trigger_ms == 0 and tuned.flow("B->A").stream.max_records_per_batch == 250_000
    assert tuned.flow("B->A").stream.linger_ms == 1_500


def test_a_stream_setting_out_of_range_is_one_line_naming_file_line_and_key() -> None:
    assert sorted(problems(BASE + "A->B.enabled = true\nA->B.mirrorflow.stream.max.records.per.batch = 0\n"
                           "A->B.mirrorflow.stream.driver.memory = lots\n"
                           "A->B.mirrorflow.stream.spark.master = local[x]\n"
                           "A->B.mirrorflow.stream.trigger.ms = -5\n")) == [
        "mm2.properties:5: A->B.mirrorflow.stream.max.records.per.batch: must be positive, got 0",
        "mm2.properties:6: A->B.mirrorflow.stream.driver.memory: expected a JVM memory size such as 512m or 2g, "
        "got 'lots'",
        "mm2.properties:7: A->B.mirrorflow.stream.spark.master: expected a Spark master URL (local[*], local[N], "
        "spark://HOST:PORT, yarn, k8s://URL), got 'local[x]'",
        "mm2.properties:8: A->B.mirrorflow.stream.trigger.ms: must be at least 0, got -5"]


def test_a_runs_flags_override_the_flows_stream_settings() -> None:
    from mirrorflow.jobs.stream import StreamOptions

    settings = config.StreamSettings("yarn", "2g", 250_000, 50, 1_000)
    assert StreamOptions().over(settings) == settings
    assert StreamOptions(master="local[1]", max_records_per_batch=60, trigger_ms=0, driver_memory="640m",
                         linger_ms=0).over(settings) == config.StreamSettings("local[1]", "640m", 60, 0, 0)


def test_cluster_selection_rejects_an_unknown_alias() -> None:
    with pytest.raises(config.ConfigError, match="unknown cluster alias 'C'"):
        load(BASE).select_clusters(["C"])


def test_a_flow_dag_runs_at_its_shortest_interval_and_its_checkpoint_rounds_end_within_it() -> None:
    from mirrorflow.entry import deployment

    flow = load(BASE + "A->B.enabled = true\n").flow("A->B")
    assert deployment.flow_period(flow) == deployment.checkpoint_window(flow) == 600  # MM2's defaults
    flow = load(BASE + "A->B.enabled = true\nsync.topic.acls.interval.seconds = 120\n"
                "mirrorflow.checkpoints.task.seconds = 900\n").flow("A->B")
    assert deployment.flow_period(flow) == deployment.checkpoint_window(flow) == 120
    flow = load(BASE + "A->B.enabled = true\nsync.topic.acls.enabled = false\nsync.topic.acls.interval.seconds = 120"
                "\nmirrorflow.health.interval.seconds = 300\nmirrorflow.checkpoints.task.seconds = 0\n").flow("A->B")
    assert (deployment.flow_period(flow), deployment.checkpoint_window(flow)) == (300, 0)


def test_the_dags_find_the_config_in_the_environment_without_asking_the_metadata_database(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from mirrorflow.entry import deployment

    monkeypatch.delenv("MIRRORFLOW_CONFIG", raising=False)
    monkeypatch.delenv("AIRFLOW_VAR_MIRRORFLOW_CONFIG", raising=False)
    assert deployment.config_path(tmp_path) == tmp_path / "include" / "mirrorflow.properties"
    monkeypatch.setenv("AIRFLOW_VAR_MIRRORFLOW_CONFIG", "/etc/mirrorflow/variable.properties")
    assert deployment.config_path(tmp_path) == Path("/etc/mirrorflow/variable.properties")
    monkeypatch.setenv("MIRRORFLOW_CONFIG", "/etc/mirrorflow/env.properties")
    assert deployment.config_path(tmp_path) == Path("/etc/mirrorflow/env.properties")
