"""Which source topics a flow mirrors, as an exact decision and as a Java regex for Spark's source.

Invariants, each tested:
  A. `replicates(flow, t)` is MM2's decision (filter or heartbeats, not internal, not a cycle) and
     never selects mirrorflow's own offset-syncs topics;
  B. the subscription pattern matches every topic the flow replicates (it may match more: the
     stream drops those records by `replicates`, so a wider pattern costs reads, never data).
"""

from __future__ import annotations

import re

from mirrorflow.model.config import Flow
from mirrorflow.rules import offset_syncs
from mirrorflow.rules.filters import split_list
from mirrorflow.rules.policy import DefaultReplicationPolicy, should_replicate


def replicates(flow: Flow, topic: str) -> bool:
    """True when the flow copies this source topic to its target."""
    return (not offset_syncs.is_offset_syncs_topic(topic)
            and should_replicate(flow.policy, topic, flow.target, flow.topic_filter.selects(topic)))


def subscription_pattern(flow: Flow) -> str:
    """A Java regex (matched whole, as `subscribePattern` does) covering every replicated topic."""
    sep = re.escape(flow.policy.separator)
    never = [r"__.*", r"\..*", f"mm2.*{sep}internal", f".*{sep}checkpoints{sep}internal",
             "mirrorflow-offset-syncs.*"]
    cycle = _cycle_pattern(flow)
    if cycle:
        never.append(cycle)
    include = _any(split_list(flow.value("topics")))
    exclude = split_list(flow.value("topics.exclude"))
    selected = f"(?!{_any(exclude)}$){include}" if exclude else include
    return f"(?!{_any(never)}$)(?:.*heartbeats|{selected})"


def _cycle_pattern(flow: Flow) -> str | None:
    # With the default policy and a one-character separator that the target's alias does not
    # contain, a name loops back iff the target is one of its segments before a non-empty last one.
    policy, target = flow.policy, flow.target
    sep = policy.separator
    if not isinstance(policy, DefaultReplicationPolicy) or len(sep) != 1 or sep in target:
        return None
    s = re.escape(sep)
    return f"(?:.*{s})?{re.escape(target)}{s}.*[^{s}].*"


def _any(patterns: list[str]) -> str:
    return "(?:" + "|".join(f"(?:{p})" for p in patterns) + ")"
