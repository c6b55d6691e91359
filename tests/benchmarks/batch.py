"""What the batch jobs cost on this machine: a backfill (seed) of a topic, a second run, and a content audit.

    make bench-batch                # or: .venv/bin/python tests/benchmarks/batch.py [--records N]

Two local clusters (ports 26092, 26192) under a temporary MIRRORFLOW_HOME; a 12-partition topic of 512 B
records with two headers. Each job runs in its own Spark session (local[*]) as `mirrorflow backfill` and
`mirrorflow audit` do; records/s is source records (backfill) or records compared, both sides (audit), over
the job's wall time including Spark's start. Prints a Markdown table; writes bench-batch-results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parents[2]
SRC, DST = 26092, 26192
PARTITIONS, SIZE = 12, 512
QUIET = {"log_level": 3}


def produce(records: int) -> float:
    p = Producer({"bootstrap.servers": f"127.0.0.1:{SRC}", "linger.ms": 20, "batch.size": 1_000_000, **QUIET})
    value = b"x" * SIZE
    begun = time.monotonic()
    for i in range(records):
        while True:
            try:
                p.produce("bench", value, f"k{i}".encode(), partition=i % PARTITIONS,
                          headers=[("trace", str(i).encode()), ("app", b"bench")])
                break
            except BufferError:
                p.poll(0.1)
    p.flush(120)
    return records / (time.monotonic() - begun)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="mirrorflow-bench-"))
    os.environ["MIRRORFLOW_HOME"] = str(home)
    os.environ.setdefault("MIRRORFLOW_JAR_CACHE", str(REPO / ".mirrorflow" / "jars"))
    from mirrorflow.dev import local
    from mirrorflow.jobs import audit, backfill
    from mirrorflow.kafka.link import FlowLink
    from mirrorflow.model import config
    from mirrorflow.spark import spark_session

    text = (f"clusters = src, dst\nsrc.bootstrap.servers = 127.0.0.1:{SRC}\ndst.bootstrap.servers = 127.0.0.1:{DST}\n"
            "src->dst.enabled = true\nsrc->dst.topics = bench\nreplication.factor = 1\n"
            "offset-syncs.topic.replication.factor = 1\n")
    cfg = config.from_text(text, source="bench")
    local.up(cfg)
    try:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{SRC}", **QUIET})  # kept until the answer
        admin.create_topics([NewTopic("bench", PARTITIONS, 1)])["bench"].result(30)
        produced = produce(args.records)
        everything = {"bench": {p: -2 for p in range(PARTITIONS)}}
        results: dict[str, dict[str, float]] = {}
        for name in ("backfill (seed)", "backfill again (writes nothing)", "audit (complete)"):
            spark = spark_session.build(f"bench {name}")
            begun = time.monotonic()
            if name.startswith("audit"):
                report = audit.run(FlowLink.of(cfg, "src->dst"), spark=spark)
                assert report.complete, report.summary()
                count = report.total("source_records") + report.total("copies")
            else:
                done = backfill.run(FlowLink.of(cfg, "src->dst"), from_offsets=everything, spark=spark)
                count = args.records
                assert done.written == (args.records if "seed" in name else 0), done.summary()
            seconds = time.monotonic() - begun
            spark.stop()
            results[name] = {"records": count, "seconds": seconds, "rps": count / seconds}
            print(name, results[name], flush=True)
        machine = f"{os.cpu_count()} cores, {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB"
        rows = ["| job | records | seconds | records/s |", "|---|---:|---:|---:|",
                f"| producer (confluent-kafka, for scale) | {args.records:,} | | {produced:,.0f} |"]
        rows += [f"| {n} | {r['records']:,.0f} | {r['seconds']:.1f} | {r['rps']:,.0f} |" for n, r in results.items()]
        table = "\n".join(rows)
        print(f"\n{args.records:,} records of {SIZE} B, {PARTITIONS} partitions, {machine}\n\n{table}")
        Path("bench-batch-results.json").write_text(json.dumps(
            {"records": args.records, "machine": machine, "produced_rps": produced, "jobs": results, "table": table},
            indent=1))
    finally:
        local.down(cfg, purge=True)


if __name__ == "__main__":
    main()
