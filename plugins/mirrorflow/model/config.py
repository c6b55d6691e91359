"""The configuration model: MirrorMaker 2's `connect-mirror-maker.properties`, read unchanged.

A file declares cluster aliases (`clusters`), their clients (`{alias}.bootstrap.servers`,
`{alias}.{consumer|producer|admin}.*`, `{alias}.{client key}`), top-level defaults, and flows
(`{source}->{target}.enabled`), whose settings are `{source}->{target}.{key}` over the top-level key
over MM2's default. Loading validates everything and reports each problem on one line naming file,
line and key; unknown keys are warnings (MM2 passes Connect keys through), with a "did you mean".
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

from mirrorflow.errors import ConfigError, InvalidConfig, PlaceholderError
from mirrorflow.model import keys, placeholders, properties
from mirrorflow.rules.filters import NameFilter
from mirrorflow.rules.policy import (
    DefaultReplicationPolicy,
    IdentityReplicationPolicy,
    PrefixReplicationPolicy,
    ReplicationPolicy,
)

_ALIAS = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_TRUE_FALSE = {"true": True, "false": False}


@dataclass(frozen=True)
class Setting:
    """A configured value with where it came from (`line` None: MM2's default)."""

    key: str
    value: str
    line: int | None = None
    raw: str | None = None  # the text as written, placeholders unresolved

    @property
    def shown(self) -> str:
        """What may be printed: placeholders as written, secrets masked."""
        if keys.is_sensitive(self.key):
            return "[hidden]"
        return self.raw if self.raw is not None else self.value


@dataclass(frozen=True)
class Cluster:
    """One Kafka cluster: its alias and every client setting given for it (Java client keys)."""

    alias: str
    settings: Mapping[str, Setting]
    shared: Mapping[str, Setting] = field(default_factory=dict)  # top-level client keys

    @property
    def bootstrap_servers(self) -> str:
        s = self.settings.get("bootstrap.servers") or self.shared.get("bootstrap.servers")
        return s.value if s else ""

    def client_settings(self, role: str) -> dict[str, Setting]:
        """Settings for one client role, MM2's precedence: `{alias}.{role}.k` > `{alias}.k` > top level."""
        assert role in keys.CLIENT_ROLES
        out: dict[str, Setting] = {}
        for source in (self.shared, self.settings):
            for k, s in source.items():
                if keys.is_client_key(k):
                    out[k] = s
        for source in (self.shared, self.settings):
            for k, s in source.items():
                if k.startswith(role + "."):
                    out[k[len(role) + 1:]] = s
        return out

    def client_config(self, role: str) -> dict[str, str]:
        """Java client properties for one role, placeholders resolved (secrets included: never print)."""
        return {k: s.value for k, s in self.client_settings(role).items()}

    @property
    def exactly_once(self) -> bool:
        s = self.settings.get("exactly.once.source.support") or self.shared.get("exactly.once.source.support")
        return s is not None and s.value.strip().lower() == "enabled"


@dataclass(frozen=True)
class StreamSettings:
    """A flow's stream job (`mirrorflow.stream.*`); `mirrorflow stream`'s flags override them for one run."""

    spark_master: str
    driver_memory: str
    max_records_per_batch: int
    trigger_ms: int
    linger_ms: int  # a batch's tasks read on past their ranges' ends for this long from its start (copier C6)


@dataclass(frozen=True)
class Flow:
    """A directional replication flow `source->target` and its effective settings.

    Filters and the policy are built once per flow (cached): callers ask for them once per topic.
    """

    source: str
    target: str
    settings: Mapping[str, Setting]

    @property
    def name(self) -> str:
        return f"{self.source}->{self.target}"

    @property
    def enabled(self) -> bool:
        return self.flag("enabled")

    def value(self, key: str) -> str:
        return self.settings[key].value

    def flag(self, key: str) -> bool:
        return _TRUE_FALSE[self.value(key).strip().lower()]

    def number(self, key: str) -> int:
        return int(self.value(key).strip())

    def given(self, key: str) -> bool:
        """Whether the file sets `key` for this flow (at top level or for the flow), rather than its default."""
        return self.settings[key].line is not None

    @property
    def stream(self) -> StreamSettings:
        return StreamSettings(self.value("mirrorflow.stream.spark.master").strip(),
                              self.value("mirrorflow.stream.driver.memory").strip(),
                              self.number("mirrorflow.stream.max.records.per.batch"),
                              self.number("mirrorflow.stream.trigger.ms"),
                              self.number("mirrorflow.stream.linger.ms"))

    @cached_property
    def topic_filter(self) -> NameFilter:
        return self._filter("topics", "topics.exclude")

    @cached_property
    def group_filter(self) -> NameFilter:
        return self._filter("groups", "groups.exclude")

    @cached_property
    def data_loss_fails(self) -> NameFilter:
        """The topics whose data loss stops the flow (`mirrorflow.data-loss.fail.topics`)."""
        s = self.settings["mirrorflow.data-loss.fail.topics"]
        return NameFilter.from_lists(s.value, "", key=s.key, line=s.line)

    @cached_property
    def config_exclude(self) -> NameFilter:
        s = self.settings["config.properties.exclude"]
        return NameFilter.from_lists(s.value, "", key=s.key, line=s.line)

    @property
    def metrics_port(self) -> int | None:
        """The port the flow's stream serves its metrics on; None: no endpoint."""
        port = self.value("mirrorflow.metrics.port").strip()
        return int(port) if port else None

    def _filter(self, include: str, exclude: str) -> NameFilter:
        inc, exc = self.settings[include], self.settings[exclude]
        return NameFilter.from_lists(inc.value, exc.value, key=inc.key, line=inc.line,
                                     exclude_key=exc.key, exclude_line=exc.line)

    @cached_property
    def policy(self) -> ReplicationPolicy:
        kind = keys.POLICY_CLASSES[self.value("replication.policy.class").strip()]
        sep = self.value("replication.policy.separator")
        if kind == "identity":
            return IdentityReplicationPolicy(sep, self.value("source.cluster.alias") or None)
        if kind == "prefix":
            return PrefixReplicationPolicy(self.value("replication.policy.prefix"), sep)
        return DefaultReplicationPolicy(sep)


@dataclass(frozen=True)
class MirrorConfig:
    """A whole validated configuration. `flows` holds every declared flow, enabled or not."""

    source: str
    clusters: Mapping[str, Cluster]
    flows: tuple[Flow, ...]
    top_level: Mapping[str, Setting]
    warnings: tuple[str, ...] = ()
    not_used: tuple[str, ...] = ()  # "file:line: key: accepted, not used: what mirrorflow does instead"

    @property
    def enabled_flows(self) -> tuple[Flow, ...]:
        return tuple(f for f in self.flows if f.enabled)

    def flow(self, name: str, *, or_else: str = "") -> Flow:
        """The enabled flow named `source->target`. ConfigError if it is not enabled (naming the key that enables it,
        then `or_else`, another way out) or not a flow of this file (naming the enabled ones)."""
        for f in self.flows:
            if f.name == name and f.enabled:
                return f
            if f.name == name:
                raise ConfigError(f"flow {name} is not enabled (set {name}.enabled = true{or_else})",
                                  source=self.source)
        known = ", ".join(f.name for f in self.enabled_flows) or "none"
        raise ConfigError(f"no enabled flow {name!r} (enabled flows: {known})", source=self.source)

    def reads_committed(self, flow: Flow) -> bool:
        """Whether the flow reads its source under read_committed: when the source's consumer says so, and always
        for an exactly-once target (validation refuses any other explicit setting)."""
        level = self.cluster(flow.source).client_config("consumer").get("isolation.level", "")
        return level.strip().lower() == "read_committed" or self.cluster(flow.target).exactly_once

    def cluster(self, alias: str) -> Cluster:
        if alias not in self.clusters:
            raise ConfigError(f"unknown cluster alias {alias!r}{_did_you_mean(alias, self.clusters)}"
                              f" (clusters: {', '.join(self.clusters)})", source=self.source)
        return self.clusters[alias]

    def select_clusters(self, aliases: Iterable[str]) -> MirrorConfig:
        """MM2's `--clusters`: keep only the flows whose target is one of these aliases."""
        chosen = list(aliases)
        for a in chosen:
            self.cluster(a)
        return replace(self, flows=tuple(f for f in self.flows if f.target in chosen))


def load(path: str | Path, env: Mapping[str, str] | None = None) -> MirrorConfig:
    """Read and validate a `connect-mirror-maker.properties` file."""
    return from_entries(properties.load(path), source=str(path), env=env)


def from_text(text: str, *, source: str = "<string>", env: Mapping[str, str] | None = None) -> MirrorConfig:
    return from_entries(properties.parse(text, source=source), source=source, env=env)


def from_entries(entries: list[properties.Entry], *, source: str,
                 env: Mapping[str, str] | None = None) -> MirrorConfig:
    return _Reader(entries, source, env).read()


class _Reader:
    def __init__(self, entries: list[properties.Entry], source: str, env: Mapping[str, str] | None) -> None:
        self.source, self.env = source, env
        self.errors: list[ConfigError] = []
        self.warnings: list[str] = []
        self.not_used: list[str] = []
        self.entries: dict[str, properties.Entry] = {}
        for e in entries:
            if e.key in self.entries:
                self.warn(e.line, e.key, f"set again (first on line {self.entries[e.key].line}); "
                          "the last value wins")
            self.entries[e.key] = e

    def error(self, line: int | None, key: str | None, message: str) -> None:
        self.errors.append(ConfigError(message, source=self.source, line=line, key=key))

    def warn(self, line: int | None, key: str | None, message: str) -> None:
        self.warnings.append(str(ConfigError(message, source=self.source, line=line, key=key)))

    def note_not_used(self, name: str, e: properties.Entry, key: str) -> None:
        """A MirrorMaker 2 or Connect key the file sets and mirrorflow accepts without acting on it."""
        instead = keys.NOT_USED.get(name)
        if instead is None and name not in keys.FLOW_KEY_BY_NAME and (
                name in keys.CONNECT_KEYS or name.startswith(keys.CONNECT_PREFIXES)):
            instead = keys.CONNECT_NOT_USED
        if name in keys.TAKEOVER_ONLY:
            self.not_used.append(str(ConfigError(f"read only by `mirrorflow takeover --from mm2`: "
                                                 f"{keys.TAKEOVER_ONLY[name]}", source=self.source, line=e.line,
                                                 key=key)))
        elif instead is not None:
            self.not_used.append(str(ConfigError(f"accepted, not used: {instead}", source=self.source,
                                                 line=e.line, key=key)))

    def setting(self, key: str, e: properties.Entry) -> Setting:
        value = e.value
        if placeholders.has_placeholder(value):
            try:
                value = placeholders.resolve(value, self.env)
            except PlaceholderError as exc:
                self.error(e.line, e.key, str(exc))
            return Setting(key, value, e.line, raw=e.value)
        return Setting(key, value, e.line)

    def read(self) -> MirrorConfig:
        aliases = self.read_aliases()
        cluster_settings: dict[str, dict[str, Setting]] = {a: {} for a in aliases}
        top: dict[str, Setting] = {}
        flow_overrides: dict[tuple[str, str], dict[str, Setting]] = {}

        for key, e in self.entries.items():
            if key == "clusters":
                continue
            if " #" in e.value or e.value.startswith("#"):
                self.warn(e.line, key, "value contains '#': properties files have no inline comments, "
                          "so it is part of the value")
            if "->" in key:
                parsed = self.split_flow_key(key, e, aliases)
                if parsed:
                    src, tgt, rest = parsed
                    flow_overrides.setdefault((src, tgt), {})[rest] = self.setting(key, e)
                    self.note_not_used(rest, e, key)
                continue
            alias, rest = self.alias_prefix(key, aliases, line=e.line, key=key)
            if alias is not None:
                cluster_settings[alias][rest] = self.setting(key, e)
                continue
            self.check_top_level_key(key, e)
            self.note_not_used(key, e, key)
            top[key] = self.setting(key, e)

        shared = {k: s for k, s in top.items() if keys.is_client_key(k)
                  or k.startswith(tuple(r + "." for r in keys.CLIENT_ROLES))
                  or k == "exactly.once.source.support"}
        clusters = {a: Cluster(a, cluster_settings[a], shared) for a in aliases}
        for c in clusters.values():
            if not c.bootstrap_servers.strip():
                line = self.entries["clusters"].line if "clusters" in self.entries else None
                self.error(line, f"{c.alias}.bootstrap.servers",
                           f"cluster {c.alias!r} has no bootstrap.servers")
            self.check_enum(c.settings.get("exactly.once.source.support"),
                            keys.GLOBAL_KEY_BY_NAME["exactly.once.source.support"])

        for k in top:
            if k in keys.FLOW_KEY_BY_NAME:
                self.check_value(top[k], keys.FLOW_KEY_BY_NAME[k])
        flows = tuple(self.build_flow(src, tgt, top, over) for (src, tgt), over in flow_overrides.items())
        for f in flows:
            level = clusters[f.source].client_settings("consumer").get("isolation.level")
            enabled = f.settings["enabled"].value.strip().lower() == "true"  # an invalid value is reported above
            if (enabled and clusters[f.target].exactly_once and level is not None
                    and level.value.strip().lower() != "read_committed"):
                self.error(level.line, level.key, f"flow {f.name} is exactly-once ({f.target}.exactly.once.source."
                           f"support = enabled): it reads {f.source} read_committed, not {level.value.strip()} "
                           "(aborted source records would be committed on the target)")
        if self.errors:
            raise InvalidConfig(self.errors)
        if not any(f.enabled for f in flows):
            self.warn(None, None, "no flow is enabled: add {source}->{target}.enabled = true")
        return MirrorConfig(self.source, clusters, flows, top, tuple(self.warnings), tuple(self.not_used))

    def read_aliases(self) -> list[str]:
        e = self.entries.get("clusters")
        if e is None:
            found = sorted({k.split(".", 1)[0] for k in self.entries if k.endswith(".bootstrap.servers")})
            hint = f" (bootstrap servers are given for: {', '.join(found)})" if found else ""
            self.error(None, "clusters", f"required key is missing: list the cluster aliases{hint}")
            return []
        aliases: list[str] = []
        for a in (x.strip() for x in e.value.split(",")):
            if not a:
                continue
            if not _ALIAS.fullmatch(a) or "->" in a:
                self.error(e.line, "clusters", f"bad cluster alias {a!r}: use letters, digits, '.', '_', '-'")
            elif a in aliases:
                self.error(e.line, "clusters", f"cluster alias {a!r} is listed twice")
            else:
                aliases.append(a)
        if not aliases and not self.errors:
            self.error(e.line, "clusters", "no cluster alias listed")
        return aliases

    def alias_prefix(self, text: str, aliases: list[str], *, line: int, key: str) -> tuple[str | None, str]:
        """Split `alias.rest` on the longest declared alias (aliases may contain dots)."""
        for a in sorted(aliases, key=len, reverse=True):
            if text.startswith(a + "."):
                return a, text[len(a) + 1:]
        for a in sorted(aliases, key=len, reverse=True):
            if text.lower().startswith(a.lower() + "."):
                rest = text[len(a) + 1:]
                self.warn(line, key, f"names cluster {a!r} in another case; read as {a}.{rest} "
                          "(MM2 itself would not match it)")
                return a, rest
        return None, text

    def split_flow_key(self, key: str, e: properties.Entry, aliases: list[str]) -> tuple[str, str, str] | None:
        src, _, rest = key.partition("->")
        if src not in aliases:
            self.error(e.line, key, f"unknown cluster alias {src!r} in flow{_did_you_mean(src, aliases)} "
                       f"(clusters: {', '.join(aliases) or 'none'})")
            return None
        tgt, setting = self.alias_prefix(rest, aliases, line=e.line, key=key)
        if tgt is None:
            guess = rest.rsplit(".", 1)[0] if "." in rest else rest
            self.error(e.line, key, f"flow {src}->{rest.split('.')[0]}... names no known target cluster"
                       f"{_did_you_mean(guess, aliases)} (clusters: {', '.join(aliases)})")
            return None
        if tgt == src:
            self.error(e.line, key, f"a flow from cluster {src!r} to itself is not allowed")
            return None
        if setting not in keys.FLOW_KEY_BY_NAME and not self.known_passthrough(setting):
            self.warn(e.line, key, f"unknown flow setting {setting!r}"
                      f"{_did_you_mean(setting, keys.FLOW_KEY_BY_NAME)}")
        return src, tgt, setting

    def known_passthrough(self, key: str) -> bool:
        return (key in keys.CONNECT_KEYS or key.startswith(keys.CONNECT_PREFIXES) or keys.is_client_key(key)
                or key.startswith(tuple(r + "." for r in keys.CLIENT_ROLES))
                or key.startswith("mirrorflow.") or key in keys.GLOBAL_KEY_BY_NAME)

    def check_top_level_key(self, key: str, e: properties.Entry) -> None:
        if key in keys.FLOW_KEY_BY_NAME or key in keys.GLOBAL_KEY_BY_NAME:
            if key in keys.GLOBAL_KEY_BY_NAME:
                self.check_enum(Setting(key, e.value, e.line), keys.GLOBAL_KEY_BY_NAME[key])
            return
        if self.known_passthrough(key):
            return
        known = list(keys.FLOW_KEY_BY_NAME) + list(keys.GLOBAL_KEY_BY_NAME)
        self.warn(e.line, key, f"unknown key, ignored{_did_you_mean(key, known)}")

    def build_flow(self, src: str, tgt: str, top: Mapping[str, Setting],
                   overrides: Mapping[str, Setting]) -> Flow:
        settings: dict[str, Setting] = {}
        for k in keys.FLOW_KEYS:
            chosen = Setting(k.name, k.default)
            for name in (k.name, *k.aliases):
                if name in top:
                    chosen = top[name]
            for name in (k.name, *k.aliases):
                if name in overrides:
                    chosen = replace(overrides[name], key=f"{src}->{tgt}.{name}")
            settings[k.name] = chosen
            if chosen.line is not None and chosen.key.startswith(f"{src}->{tgt}."):
                self.check_value(chosen, k)
        for name, s in overrides.items():
            if name not in keys.FLOW_KEY_BY_NAME:
                settings[name] = replace(s, key=f"{src}->{tgt}.{name}")
        return Flow(src, tgt, settings)

    def check_value(self, s: Setting, k: keys.Key) -> None:
        v = s.value.strip()
        if k.kind == "bool" and v.lower() not in _TRUE_FALSE:
            self.error(s.line, s.key, f"expected true or false, got {s.shown!r}")
        elif k.kind == "int":
            try:
                n = int(v)
            except ValueError:
                self.error(s.line, s.key, f"expected a whole number, got {s.shown!r}")
                return
            if n < 0 or (n == 0 and k.name.endswith(("replication.factor", "tasks.max", "max.records.per.batch"))):
                self.error(s.line, s.key, f"must be {'positive' if n == 0 else 'at least 0'}, got {n}")
        elif k.kind == "port" and v and not (v.isdigit() and 0 < int(v) < 65536):
            self.error(s.line, s.key, f"expected a TCP port (1-65535) or nothing, got {s.shown!r}")
        elif k.kind == "memory" and not _JVM_SIZE.fullmatch(v):
            self.error(s.line, s.key, f"expected a JVM memory size such as 512m or 2g, got {s.shown!r}")
        elif k.kind == "master" and not _SPARK_MASTER.fullmatch(v):
            self.error(s.line, s.key, "expected a Spark master URL (local[*], local[N], spark://HOST:PORT, yarn, "
                       f"k8s://URL), got {s.shown!r}")
        elif k.kind == "regex-list":
            try:
                NameFilter.from_lists(v, "", key=s.key, source=self.source, line=s.line)
            except ConfigError as exc:
                self.errors.append(exc)
        elif k.kind == "enum":
            self.check_enum(s, k)
        elif k.kind == "class" and v not in keys.POLICY_CLASSES:
            self.error(s.line, s.key, f"unsupported replication policy {v!r}: mirrorflow runs "
                       "DefaultReplicationPolicy, IdentityReplicationPolicy and "
                       "mirrorflow.policy.PrefixReplicationPolicy (custom Java policies cannot be loaded)")
        elif k.name == "replication.policy.separator" and not s.value:
            self.error(s.line, s.key, "the separator must not be empty")

    def check_enum(self, s: Setting | None, k: keys.Key) -> None:
        if s is not None and s.value.strip().lower() not in k.choices:
            self.error(s.line, s.key, f"expected one of {', '.join(k.choices)}, got {s.shown!r}")


_JVM_SIZE = re.compile(r"\d+[kmgtKMGT]?")
_SPARK_MASTER = re.compile(r"local(\[(\*|\d+)(,\d+)?\])?|local-cluster\[\d+,\d+,\d+\]|(spark|k8s|mesos)://\S+|yarn")


def _did_you_mean(word: str, candidates: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.75)
    return f"; did you mean {close[0]!r}?" if close else ""
