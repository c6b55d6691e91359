"""Exactly-once start-up: fencing every transactional id of a flow, one at a time (as before) and 32 at a time.

    make bench-fence                # or: .venv/bin/python tests/benchmarks/fence.py

One local cluster (port 26792) under a temporary MIRRORFLOW_HOME. For 12 and 1,200 source partitions the ids are
initialised once untimed (the coordinator creates their state, as a flow's first start does), then fenced
sequentially and concurrently, each timed once. Versions before task slots fenced one id per source partition at
every start and before every query restart; now only a flow upgraded from them does, once (a flow fences one id per
task slot). Prints a Markdown table; writes bench-fence-results.json.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PORT = 26792


def main() -> None:
    home = Path(tempfile.mkdtemp(prefix="mirrorflow-bench-fence-"))
    os.environ["MIRRORFLOW_HOME"] = str(home)
    from mirrorflow.dev import local
    from mirrorflow.kafka.writers import fence, partition_transactional_id
    from mirrorflow.model import config

    cfg = config.from_text(f"clusters = eos\neos.bootstrap.servers = 127.0.0.1:{PORT}\n", source="bench")
    local.up(cfg)
    settings = {"bootstrap.servers": f"127.0.0.1:{PORT}", "log_level": 3}
    rows = []
    try:
        for n in (12, 1200):
            partitions = [partition_transactional_id("src", "eos", (f"bench-{n}", p)) for p in range(n)]
            fence("bench", "eos", settings, partitions, threads=64)  # the ids' first start, untimed
            timed = {}
            for label, threads in (("sequential", 1), ("32 at a time", 32)):
                begun = time.monotonic()
                fence("bench", "eos", settings, partitions, threads=threads)
                timed[label] = time.monotonic() - begun
            rows.append({"partitions": n, **{k: round(v, 2) for k, v in timed.items()},
                         "ratio": round(timed["sequential"] / timed["32 at a time"], 1)})
            print(rows[-1], flush=True)
    finally:
        local.down(cfg, purge=True)
    print("\n| source partitions | fencing one at a time | 32 at a time | ratio |\n|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['partitions']:,} | {r['sequential']:.2f} s | {r['32 at a time']:.2f} s | {r['ratio']}x |")
    (REPO / "bench-fence-results.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
