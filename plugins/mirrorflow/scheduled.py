"""The deployment's scheduled work, as the functions the Airflow tasks call.

Each loads the config, does one thing for one flow, logs one line per change or group, and returns a
JSON-able summary (the task's XCom). A failure raises a MirrorflowError whose message is the one line the
task log ends with.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from mirrorflow import admin_sync, checkpoints, clients, config

log = logging.getLogger("mirrorflow")


def _load(config_path: Path) -> config.MirrorConfig:
    clients.quiet()  # a task's log ends with the one-line cause, not librdkafka's retries
    return config.load(config_path)


def checkpoint_round(config_path: Path, flow_name: str) -> dict[str, Any]:
    cfg = _load(config_path)
    flow = cfg.flow(flow_name)
    results = checkpoints.run_round(cfg, flow)
    for result in results:
        log.info("%s", result.line(flow))
    if not results:
        log.info("flow %s: no consumer group with offsets on mirrored topics", flow.name)
    return {"flow": flow.name, "groups": len(results),
            "partitions": sum(len(r.partitions) for r in results),
            "inexact": sum(not p.exact for r in results for p in r.partitions)}


def plan(config_path: Path, flow_name: str) -> dict[str, Any]:
    """Log the flow's drift plan, one line per change or notice."""
    cfg = _load(config_path)
    flow = cfg.flow(flow_name)
    changes = admin_sync.flow_plan(cfg, flow)
    for change in changes:
        log.info("flow %s plan: %s", flow.name, change)
    if not changes:
        log.info("flow %s plan: in sync", flow.name)
    return {"flow": flow.name, "planned": [str(c) for c in changes]}


def sync(config_path: Path, flow_name: str, part: str) -> dict[str, Any]:
    """Apply one part (topics, configs or acls) of the flow's metadata sync; log every change made."""
    cfg = _load(config_path)
    flow = cfg.flow(flow_name)
    done, notices = admin_sync.sync_flow(cfg, flow, (part,))
    for change in done:
        log.info("flow %s %s: %s", flow.name, part, change)
    for notice in notices:
        log.info("flow %s %s: %s", flow.name, part, notice)
    if not done:
        log.info("flow %s %s: nothing to change", flow.name, part)
    return {"flow": flow.name, "part": part, "changed": [str(c) for c in done]}
