"""The deployment's scheduled work, as the functions the Airflow tasks call.

Each loads the config, does one thing for one flow, logs one line per change or group, and returns a
JSON-able summary (the task's XCom). A failure raises a MirrorflowError whose message is the one line the
task log ends with.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from mirrorflow import checkpoints, clients, config

log = logging.getLogger("mirrorflow")
clients.quiet()  # a task's log ends with the one-line cause, not librdkafka's retries


def checkpoint_round(config_path: Path, flow_name: str) -> dict[str, Any]:
    cfg = config.load(config_path)
    flow = cfg.flow(flow_name)
    results = checkpoints.run_round(cfg, flow)
    for result in results:
        log.info("%s", result.line(flow))
    if not results:
        log.info("flow %s: no consumer group with offsets on mirrored topics", flow.name)
    return {"flow": flow.name, "groups": len(results),
            "partitions": sum(len(r.partitions) for r in results),
            "inexact": sum(not p.exact for r in results for p in r.partitions)}
