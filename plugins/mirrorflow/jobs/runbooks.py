"""DR runbooks: fail consumer groups over from a cluster to its mirror, and back, step by step.

A runbook moves groups along one enabled flow S->T, from S (where they consume now) to T:
  failover  S = the primary, T = its backup, over the primary's flow;
  failback  S = the backup, T = the original primary, over the reverse flow, once the primary is back.

Steps (each a function here, each an Airflow task, all run in turn by `mirrorflow failover|failback`):
  1. preflight      read-only: parameters, clusters, the flow's health, newest checkpoint age, lag and RPO.
                    Anything wrong stops the run here, before anything changed;
  2. (approval)     a person approves the preflight summary (Airflow's HITL operator, or a CLI prompt);
  3. drain          planned: wait until the flow has mirrored every record (bounded); unplanned: skip;
  4. move groups    planned: a final checkpoint round, then commit each group's translated offsets on T;
                    unplanned (S down): commit the newest checkpoints. Groups active on T are refused;
  5. switch flows   planned: stop S->T cleanly; then start T->S so what is produced on T reaches S later;
  6. report         markdown: groups, partitions, offsets, RPO and the runbook's own duration (RTO).

`dry_run` runs the reading steps and says what the others would do. Step results are JSON-able dicts, so
Airflow passes them between tasks as XComs.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from confluent_kafka import ConsumerGroupState

from mirrorflow.errors import ConfigError, OperationalError
from mirrorflow.jobs import checkpoints, lifecycle
from mirrorflow.jobs.checkpoints import GroupOffsets, PartitionTranslation
from mirrorflow.kafka import admin_sync, clients
from mirrorflow.kafka.link import FlowLink
from mirrorflow.model.config import Flow, MirrorConfig
from mirrorflow.rules.filters import java_regex_to_python

log = logging.getLogger(__name__)
PLANNED, UNPLANNED = "planned", "unplanned"
FAILOVER, FAILBACK = "failover", "failback"
_IDLE = (ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD)


@dataclass(frozen=True)
class Runbook:
    """What a person on call asked for: move `groups` from `source` to `target`."""

    kind: str
    source: str
    target: str
    groups: str = ".*"
    mode: str = PLANNED
    dry_run: bool = False
    switch_flows: bool = True  # failover: start target->source; failback: restart target->source
    drain_timeout_s: float = 300.0
    stop_timeout_s: float = 120.0

    @property
    def flow_name(self) -> str:
        return f"{self.source}->{self.target}"

    @property
    def reverse_name(self) -> str:
        return f"{self.target}->{self.source}"

    @property
    def title(self) -> str:
        mode = f" ({self.mode})" if self.kind == FAILOVER else ""
        return f"{self.kind} {self.flow_name}{mode}" + (", dry run" if self.dry_run else "")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Runbook:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def failback(original: str, backup: str, **options: Any) -> Runbook:
    """Groups go back from `backup` to `original` over the flow backup->original; always planned."""
    return Runbook(FAILBACK, backup, original, mode=PLANNED, **options)


# -- 1. preflight ---------------------------------------------------------------------------------

def preflight(cfg: MirrorConfig, rb: Runbook) -> dict[str, Any]:
    """Check everything the run needs, change nothing, and summarise; raises on the first thing that is wrong."""
    started = time.time()
    flow = _flow(cfg, rb)
    link = FlowLink(cfg, flow)
    reverse = _reverse(cfg, rb) if rb.switch_flows else None
    pattern = _group_pattern(rb.groups)
    target_error = _reachable(cfg, rb.target)
    if target_error:
        raise OperationalError(f"{rb.title}: target cluster {rb.target} is unreachable: {target_error}")
    source_error = _reachable(cfg, rb.source)
    if source_error and rb.mode == PLANNED:
        raise OperationalError(f"{rb.title}: source cluster {rb.source} is unreachable ({source_error}); "
                               f"a planned {rb.kind} drains it first. Use mode unplanned if it is down")
    health = lifecycle.health(link, with_lag=not source_error)
    if source_error:
        groups = sorted({g for g, _, _ in _newest_checkpoints(link)})
        where = f"the checkpoints on {rb.target} ({rb.source} is down)"
    else:
        groups = GroupOffsets(link).groups()
        where = f"{rb.source}'s groups that flow {flow.name} replicates"
    selected = [g for g in groups if pattern.fullmatch(g)]
    notices = []
    if not selected:
        known = ", ".join(groups[:10]) or "none"
        unmatched = f"groups regex {rb.groups!r} matches none of {where} ({known})"
        if not rb.dry_run:
            raise ConfigError(f"{rb.title}: {unmatched}")
        notices.append(f"{unmatched}: a real run would stop here")  # a dry run still reports health and RPO
    active = _active_groups(cfg, rb.target, selected)
    if active:
        raise OperationalError(f"{rb.title}: consumer groups active on {rb.target} would be overwritten: "
                               f"{', '.join(active)}; stop their consumers there first")
    if not source_error:
        busy = _active_groups(cfg, rb.source, selected)
        if busy:
            notices.append(f"groups still active on {rb.source} (commits after the move are not carried over): "
                           f"{', '.join(busy)}")
    if rb.mode == PLANNED and not health.alive and health.lag_records:
        notices.append(f"flow {flow.name} is not running and {health.lag_records} records behind: the drain "
                       f"waits for it to be started")
    if reverse is not None and not reverse.flag("emit.checkpoints.enabled"):
        notices.append(f"flow {reverse.name} emits no checkpoints: groups cannot be translated back later")
    rpo = _rpo(link, health, started)
    summary = {
        "runbook": rb.as_dict(), "started": started, "flow": flow.name,
        "reverse_flow": reverse.name if reverse else None,
        "source_reachable": not source_error, "source_error": source_error,
        "stream": health.as_dict(), "stream_line": health.line(),
        "checkpoint_age_s": checkpoints.newest_checkpoint_age_s(link), "groups": selected,
        "rpo": rpo, "notices": notices,
    }
    summary["markdown"] = preflight_markdown(summary)
    return summary


def _flow(cfg: MirrorConfig, rb: Runbook) -> Flow:
    if rb.mode not in (PLANNED, UNPLANNED):
        raise ConfigError(f"{rb.title}: mode must be planned or unplanned, not {rb.mode!r}")
    for alias in (rb.source, rb.target):
        if alias not in cfg.clusters:
            raise ConfigError(f"{rb.title}: unknown cluster {alias!r} (clusters in {cfg.source}: "
                              f"{', '.join(cfg.clusters)})")
    if rb.source == rb.target:
        raise ConfigError(f"{rb.title}: source and target are the same cluster")
    try:
        return cfg.flow(rb.flow_name)
    except ConfigError as exc:
        raise ConfigError(f"{rb.title}: {exc.reason}", source=exc.source) from None


def _reverse(cfg: MirrorConfig, rb: Runbook) -> Flow:
    try:
        return cfg.flow(rb.reverse_name, or_else=", or run with switch_flows off")
    except ConfigError as exc:
        action = "start" if rb.kind == FAILOVER else "restart"
        raise ConfigError(f"{rb.title}: cannot {action} the reverse flow: {exc.reason}", source=exc.source) from None


def _group_pattern(text: str) -> re.Pattern[str]:
    try:
        return re.compile(java_regex_to_python(text))
    except (re.error, ConfigError) as exc:
        raise ConfigError(f"groups regex {text!r} is not valid: {exc}") from None


def _reachable(cfg: MirrorConfig, alias: str) -> str:
    """'' when the cluster answers a metadata request, else why not."""
    try:
        admin_sync.partition_counts(clients.admin(cfg.cluster(alias), **{"socket.timeout.ms": 10_000}), alias)
    except OperationalError as exc:
        return str(exc)
    return ""


def _active_groups(cfg: MirrorConfig, alias: str, groups: Sequence[str]) -> list[str]:
    if not groups:  # the admin client refuses an empty list
        return []
    admin = clients.admin(cfg.cluster(alias))
    described = admin_sync.wait(admin.describe_consumer_groups(list(groups)),
                                f"cannot describe the consumer groups on {alias}:")
    return sorted(g for g, d in described.items() if d.state not in _IDLE)


def _newest_checkpoints(link: FlowLink) -> list[tuple[str, str, int]]:
    return list(checkpoints.read_checkpoints(link.settings("target", "consumer"), link.checkpoints_topic))


def _rpo(link: FlowLink, health: lifecycle.FlowHealth, started: float) -> dict[str, Any]:
    """Records and seconds not yet mirrored, from the clusters wherever the runbook runs: measured when the source
    answers; else at least what the stream's last view of the source (kept on the target) shows above the positions
    the offset syncs hold, and the time before which every record the source acknowledged is on the target
    (source_view V1-V3: never later than the moment that view's ends were asked for)."""
    flow = link.flow
    if health.lags is not None:
        return {"records": health.lag_records, "seconds": round(health.lag_seconds or 0.0, 1), "measured": True,
                "behind": [f"{b.topic}-{b.partition}: {b.records}" for b in health.behind()]}
    seen = lifecycle.unmirrored(link)
    if seen is None:
        beat = ("" if health.heartbeat_age_s is None else
                f"; the newest heartbeat mirrored from {flow.source} is {health.heartbeat_age_s:.0f} s old")
        return {"records": None, "seconds": None, "measured": False,
                "note": f"{flow.source} unreachable and the stream left no view of it on {flow.target}: records "
                        f"written to {flow.source} after the newest mirrored ones are unknown{beat}"}
    view, records, through = seen.view, seen.records, seen.through
    note = (f"{flow.source} unreachable: its ends as the stream last read them, at "
            f"{lifecycle.utc_time(view.as_of)} UTC ({max(started - view.as_of, 0):.0f} s "
            f"before this runbook), against what {flow.target} holds; records written after that are unknown")
    if through is not None:
        note += (f"; every record {flow.source} had acknowledged to its producers before "
                 f"{lifecycle.utc_time(through)} UTC is on {flow.target}")
    return {"records": records, "at_least": True, "measured": False, "as_of": view.as_of,
            "seconds": None if through is None else round(max(started - through, 0.0), 1),
            "mirrored_through": through, "note": note}


def preflight_markdown(p: Mapping[str, Any]) -> str:
    rb = Runbook.from_dict(p["runbook"])
    rpo = p["rpo"]
    rpo_text = _rpo_words(rpo) + (" (measured on the source)" if rpo["measured"] else "")
    age = p["checkpoint_age_s"]
    lines = [
        f"### {rb.title}: preflight",
        f"- flow: {p['stream_line']}",
        f"- source {rb.source}: " + ("reachable" if p["source_reachable"] else f"unreachable ({p['source_error']})"),
        f"- newest checkpoint: {'none' if age is None else f'{age} s old'}",
        f"- RPO (not yet mirrored): {rpo_text}",
        f"- groups to move ({len(p['groups'])}): {', '.join(p['groups']) or 'none'}",
    ]
    lines += [f"- behind: {b}" for b in rpo.get("behind", [])[:10]]
    lines += [f"- note: {n}" for n in p["notices"]]
    lines.append(f"- then: {_plan_text(rb, p)}")
    return "\n".join(lines)


def _plan_text(rb: Runbook, p: Mapping[str, Any]) -> str:
    steps = []
    if rb.mode == PLANNED:
        steps.append(f"wait until {p['flow']} has mirrored everything (at most {rb.drain_timeout_s:.0f} s)")
        steps.append(f"final checkpoint round, commit translated offsets on {rb.target}")
        steps.append(f"stop {p['flow']}")
    else:
        steps.append(f"commit the newest checkpoints on {rb.target}")
    if p["reverse_flow"]:
        steps.append(f"{'start' if rb.kind == FAILOVER else 'restart'} {p['reverse_flow']}")
    return "; ".join(steps)


# -- 3. drain -------------------------------------------------------------------------------------

def drain(cfg: MirrorConfig, rb: Runbook) -> dict[str, Any]:
    """Planned: wait until the flow's lag is 0 on every partition; raises naming those still behind."""
    link = FlowLink.of(cfg, rb.flow_name)
    if rb.mode == UNPLANNED:
        log.info("%s: unplanned, the source is not drained: what was mirrored is what the target has", rb.title)
        return {"drained": False, "waited_s": 0.0}
    if rb.dry_run:
        behind = [lag for lag in lifecycle.lags(link) if lag.records]
        log.info("%s: dry run: would wait until %d partition(s) with %d records are mirrored", rb.title,
                 len(behind), sum(b.records for b in behind))
        return {"drained": False, "waited_s": 0.0, "behind": len(behind)}
    began = time.monotonic()

    def progress(behind: list[lifecycle.PartitionLag]) -> None:
        log.info("%s: draining, %d records behind on %d partition(s)", rb.title,
                 sum(b.records for b in behind), len(behind))

    measured = lifecycle.wait_caught_up(link, rb.drain_timeout_s, progress)
    waited = round(time.monotonic() - began, 1)
    log.info("%s: drained: %d partition(s) fully mirrored after %.1f s", rb.title, len(measured), waited)
    return {"drained": True, "waited_s": waited, "partitions": len(measured)}


# -- 4. move groups -------------------------------------------------------------------------------

def move_groups(cfg: MirrorConfig, rb: Runbook, groups: Sequence[str]) -> dict[str, Any]:
    """Commit each group's position on the target; refuses (changing nothing) if one is active there."""
    flow = cfg.flow(rb.flow_name)
    active = _active_groups(cfg, rb.target, groups)
    if active:
        raise OperationalError(f"{rb.title}: consumer groups active on {rb.target}, nothing committed: "
                               f"{', '.join(active)}")
    link = FlowLink(cfg, flow)
    offsets = GroupOffsets(link)
    if rb.mode == PLANNED and rb.dry_run:
        translations = {g: offsets.translate(g, offsets.committed(g)) for g in groups}
    elif rb.mode == PLANNED:  # the final round: every group's checkpoint is current, and these are its offsets
        translations = {r.group: r.partitions for r in checkpoints.run_round(link)}
    else:
        translations = _from_checkpoints(link, groups)
    moved = []
    for group in groups:
        parts = translations.get(group, [])
        if rb.dry_run:
            outcome = f"would commit {len(parts)} partition(s)"
        elif not parts:
            outcome = "nothing to commit: no offsets on mirrored topics"
        else:
            offsets.sync_to_target(group, parts)
            outcome = _landed(offsets, group, parts, rb.target)
        log.info("%s: group %s: %s", rb.title, group, outcome)
        moved.append({"group": group, "outcome": outcome, "partitions": [
            {"source_topic": p.source_topic, "target_topic": p.target_topic, "partition": p.partition,
             "source_offset": p.source_offset, "target_offset": p.target_offset, "exact": p.exact,
             "note": p.note} for p in parts]})
    return {"groups": moved}


def _landed(offsets: GroupOffsets, group: str, parts: Sequence[PartitionTranslation], alias: str) -> str:
    """What the target's group holds now: the translated offsets, or offsets it already had further on."""
    now = offsets.target_committed(group)
    ahead = [f"{p.target_topic}-{p.partition} at {now[(p.target_topic, p.partition)]}" for p in parts
             if now.get((p.target_topic, p.partition), -1) > p.target_offset]
    short = [f"{p.target_topic}-{p.partition}" for p in parts
             if now.get((p.target_topic, p.partition), -1) < p.target_offset]
    if short:
        raise OperationalError(f"group {group} on {alias}: commit not visible for {', '.join(short)}")
    text = f"{len(parts) - len(ahead)} partition(s) at their translated offsets on {alias}"
    return text + (f"; {len(ahead)} already further, kept (never moved back): {', '.join(ahead)}" if ahead else "")


def _from_checkpoints(link: FlowLink, groups: Sequence[str]) -> dict[str, list[PartitionTranslation]]:
    """The newest checkpoint of every partition of the groups, as translations (the source is down)."""
    flow = link.flow
    newest = checkpoints.read_checkpoints(link.settings("target", "consumer"), link.checkpoints_topic)
    out: dict[str, list[PartitionTranslation]] = {g: [] for g in groups}
    for (group, target_topic, partition), c in sorted(newest.items()):
        if group in out:
            source_topic = flow.policy.upstream_topic(target_topic) or target_topic
            out[group].append(PartitionTranslation(group, source_topic, target_topic, partition, c.upstream_offset,
                                                   c.downstream_offset, True, "from the newest checkpoint",
                                                   c.metadata))
    return out


# -- 5. switch flows ------------------------------------------------------------------------------

def switch_flows(cfg: MirrorConfig, rb: Runbook) -> dict[str, Any]:
    """Planned: stop the drained flow cleanly. Then request the reverse flow running."""
    flow = cfg.flow(rb.flow_name)
    done = []
    if rb.mode == PLANNED:
        if rb.dry_run:
            done.append(f"would stop {flow.name}")
        else:
            lifecycle.stop(FlowLink.of(cfg, flow), f"{rb.kind} to {rb.target}", rb.stop_timeout_s)
            done.append(f"stopped {flow.name}")
    if rb.switch_flows:
        reverse = cfg.flow(rb.reverse_name)
        if rb.dry_run:
            done.append(f"would start {reverse.name}")
        else:
            runs = lifecycle.start(FlowLink.of(cfg, reverse), f"{rb.kind} from {rb.source}", wait_s=0)
            done.append(f"started {reverse.name}" if runs else
                        f"requested {reverse.name} running (its stream DAG or `mirrorflow stream` starts it)")
    for line in done:
        log.info("%s: %s", rb.title, line)
    return {"flows": done}


# -- 6. report ------------------------------------------------------------------------------------

def report(pre: Mapping[str, Any], drained: Mapping[str, Any] | None, moved: Mapping[str, Any] | None,
           switched: Mapping[str, Any] | None, approval: str = "") -> dict[str, Any]:
    """The run's result: a markdown report and the figures in it."""
    rb = Runbook.from_dict(pre["runbook"])
    took = round(time.time() - pre["started"], 1)
    groups = (moved or {}).get("groups", [])
    partitions = sum(len(g["partitions"]) for g in groups)
    started = f"- started {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(pre['started']))} UTC"
    lines = [f"## mirrorflow {rb.title}", ""]
    if rb.dry_run:
        lines += ["**DRY RUN: nothing was changed.** Each step below says what a real run would do.", "",
                  f"{started}; the dry run took {took} s (a real run also waits for the drain and commits the "
                  "offsets: this is not the runbook's RTO)",
                  f"- RPO a real run would leave: {_rpo_line(pre['rpo'], drained, rb)}"]
    else:
        lines += [f"{started}, took {took} s (the runbook's RTO{', approval wait included' if approval else ''})",
                  f"- RPO: {_rpo_line(pre['rpo'], drained, rb)}"]
    lines.append(f"- stream before: {pre['stream_line']}")
    if approval:
        lines.append(f"- approval: {approval}")
    if drained and drained.get("drained"):
        lines.append(f"- drained: every partition mirrored after {drained['waited_s']} s")
    if rb.mode == UNPLANNED:
        age = pre["checkpoint_age_s"]
        lines.append(f"- offsets: the newest checkpoints on {rb.target}" + ("" if age is None else f", {age} s old"))
    lines += [f"- flows: {line}" for line in (switched or {}).get("flows", [])]
    lines += [f"- note: {n}" for n in pre.get("notices", [])]
    if groups:
        lines += ["", f"| group | source partition | source offset | {rb.target} partition | {rb.target} offset | "
                      "resumes |", "|---|---|---:|---|---:|---|"]
    parts = [p for g in groups for p in g["partitions"]]
    for g in groups:
        for p in g["partitions"]:
            resumes = "exactly where it left off" if p["exact"] else f"not exactly: {p['note']}"
            lines.append(f"| {g['group']} | {p['source_topic']}-{p['partition']} | {p['source_offset']} | "
                         f"{p['target_topic']}-{p['partition']} | {p['target_offset']} | {resumes} |")
    lines += ["", *(f"- group {g['group']}: {g['outcome']}" for g in groups)]
    lines += _report_explanations(rb, parts)
    return {"title": rb.title, "took_s": took, "groups": len(groups), "partitions": partitions,
            "rpo": pre["rpo"], "markdown": "\n".join(lines)}


def _rpo_line(rpo: Mapping[str, Any], drained: Mapping[str, Any] | None, rb: Runbook) -> str:
    if drained and drained.get("drained"):
        return "0 records (drained before the move)"
    if rb.dry_run and rb.mode == PLANNED:
        return f"0 records, once the drain a real run waits for is over (not mirrored now: {_rpo_words(rpo)})"
    return _rpo_words(rpo)


def _report_explanations(rb: Runbook, parts: Sequence[Mapping[str, Any]]) -> list[str]:
    """What an operator may misread in the table, said in words."""
    out = []
    if any(p["target_offset"] > p["source_offset"] for p in parts):
        out.append(f"- {rb.target}'s offsets run ahead of {rb.source}'s: each transaction the stream commits leaves "
                   f"a commit marker, which takes an offset on {rb.target}. The translation counts them; nothing "
                   "is lost or duplicated by it.")
    if any("past what the flow has read" in p.get("note", "") for p in parts):
        out.append(f"- \"Past what the flow has read\": the group had consumed records on {rb.source} that the "
                   "flow had not mirrored yet, which is normal while traffic flows. It resumes at the newest mirrored "
                   "record and reads those records again once they are mirrored. "
                   + ("A real planned run drains the flow first, so its groups resume exactly." if rb.mode == PLANNED
                      else "An unplanned failover cannot drain: these records are what the RPO counts."))
    return ["", *out] if out else []


def _rpo_words(rpo: Mapping[str, Any]) -> str:
    if rpo["records"] is None:
        return f"unknown: {rpo['note']}"
    if rpo.get("at_least"):
        seconds = "" if rpo["seconds"] is None else f", all acknowledged by the source in the last {rpo['seconds']} s"
        return f"at least {rpo['records']} records not mirrored{seconds} ({rpo['note']})"
    text = f"{rpo['records']} records, {rpo['seconds']} s not mirrored"
    return text + ("" if rpo["measured"] else f" ({rpo['note']})")


# -- all steps, for the command line --------------------------------------------------------------

def run(cfg: MirrorConfig, rb: Runbook, approve: Callable[[str], bool] | None = None) -> dict[str, Any]:
    """Every step in turn; `approve` (given the preflight summary) can stop the run before anything changes."""
    pre = preflight(cfg, rb)
    log.info("%s", pre["markdown"])
    approval = ""
    if approve is not None and not rb.dry_run:
        if not approve(pre["markdown"]):
            raise OperationalError(f"{rb.title}: not approved; nothing changed")
        approval = "approved at the prompt"
    drained = drain(cfg, rb)
    moved = move_groups(cfg, rb, pre["groups"])
    switched = switch_flows(cfg, rb)
    return report(pre, drained, moved, switched, approval)
