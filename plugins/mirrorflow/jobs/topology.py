"""The replication graph as the clusters themselves show it, through their heartbeats topics.

Two readings per cluster:
  by name     MM2's `RemoteClusterUtils`: upstream clusters are the sources named along each heartbeats
              topic's name (`B.A.heartbeats`: B and A), and the hops to an alias count the names down to it;
  by content  the heartbeats themselves: a record (A, B) in `C.heartbeats` on D says A->B->...->D is live.
              It also sees clusters MM2's names miss (a chain whose first cluster emits no heartbeats of its
              own), and how old the newest heartbeat of each path is.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from mirrorflow.errors import OperationalError
from mirrorflow.kafka import admin_sync, clients, heartbeats
from mirrorflow.model.config import MirrorConfig
from mirrorflow.rules.policy import ReplicationPolicy, is_heartbeats_topic


def sources_in_name(policy: ReplicationPolicy, topic: str) -> list[str]:
    """The clusters a topic's name says it passed through, nearest first (MM2's `allSources`, ordered)."""
    out: list[str] = []
    seen: str | None = topic
    while seen is not None:
        source = policy.topic_source(seen)
        if source is None or source in out:
            break
        out.append(source)
        seen = policy.upstream_topic(seen)
    return out


def hops_in_name(policy: ReplicationPolicy, topic: str, alias: str) -> int:
    """MM2's `countHopsForTopic`: 1 + the position of `alias` among the topic's named sources, -1 if absent."""
    names = sources_in_name(policy, topic)
    return names.index(alias) + 1 if alias in names else -1


@dataclass(frozen=True)
class Path:
    """A live path into a cluster: the heartbeat (source, target) carried through `via` to here."""

    source: str
    target: str
    topic: str
    hops: int
    age_s: float


@dataclass
class ClusterView:
    alias: str
    error: str = ""
    heartbeat_topics: list[str] = field(default_factory=list)
    upstream: list[str] = field(default_factory=list)  # by name, as MM2 computes it
    hops: dict[str, int] = field(default_factory=dict)  # by name, as MM2 computes it
    paths: list[Path] = field(default_factory=list)  # by content

    def reached_from(self) -> dict[str, int]:
        """Every cluster with a live path here, and its fewest hops (by content)."""
        out: dict[str, int] = {}
        for p in self.paths:
            out[p.source] = min(out.get(p.source, p.hops), p.hops)
        return out


def view(cfg: MirrorConfig, now: float | None = None) -> list[ClusterView]:
    policy = cfg.flows[0].policy if cfg.flows else None
    out = []
    for alias, cluster in cfg.clusters.items():
        v = ClusterView(alias)
        out.append(v)
        if policy is None:
            continue
        try:
            counts, _ = admin_sync.partition_counts(clients.admin(cluster), alias)
        except OperationalError as exc:
            v.error = str(exc)
            continue
        v.heartbeat_topics = sorted(t for t in counts if is_heartbeats_topic(policy, t))
        v.upstream = sorted({s for t in v.heartbeat_topics for s in sources_in_name(policy, t)})
        for other in cfg.clusters:
            found = [h for t in v.heartbeat_topics if (h := hops_in_name(policy, t, other)) > 0]
            if found:
                v.hops[other] = min(found)
        try:
            newest = heartbeats.newest_in(clients.settings(cluster, "consumer"),
                                          {t: counts[t] for t in v.heartbeat_topics})
        except OperationalError as exc:
            v.error = str(exc)
            continue
        at = time.time() if now is None else now
        for topic in v.heartbeat_topics:
            carried = len(sources_in_name(policy, topic))
            for beat in newest.get(topic, {}).values():
                v.paths.append(Path(beat.source, beat.target, topic, carried + 1,
                                    heartbeats.age_s(beat.timestamp_ms, at)))
    return out


def lines(cfg: MirrorConfig, views: list[ClusterView]) -> list[str]:
    out = [f"clusters: {', '.join(cfg.clusters)}",
           f"flows (enabled): {', '.join(f.name for f in cfg.enabled_flows) or 'none'}"]
    for v in views:
        if v.error:
            out.append(f"{v.alias}: unreachable ({v.error})")
            continue
        hops = ", ".join(f"{a} ({n} hop{'s' if n > 1 else ''})" for a, n in sorted(v.hops.items()))
        heard = sorted({f"{p.source}->{p.target}" for p in v.paths})
        out.append(f"{v.alias}: upstream clusters by MM2's naming rule {', '.join(v.upstream) or 'none'}"
                   + (f"; replication hops {hops}" if hops else "")
                   + f"; flows heard in its heartbeats {', '.join(heard) or 'none'}")
        for p in sorted(v.paths, key=lambda p: (p.hops, p.source, p.target)):
            via = "" if p.topic == "heartbeats" else f" via {p.topic}"
            out.append(f"  heard {p.source}->{p.target}{via}: {p.hops} hop(s) from {p.source}, newest "
                       f"{p.age_s:.1f} s ago")
    return out
