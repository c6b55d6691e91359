"""The stream at 12 and at 1,200 source partitions in each delivery mode (MODES): start-up and throughput.

    make bench-eos                  # or: .venv/bin/python tests/benchmarks/eos.py [MODE:PARTITIONS ...]

Two local clusters (ports 26892 and 26992) under a temporary MIRRORFLOW_HOME. For each mode and partition count a
new topic gets RECORDS records of VALUE_BYTES bytes spread evenly over its partitions, then `mirrorflow stream`
starts on a flow that replicates only that topic. Start-up is the time from the launch until the first copy is
counted, throughput the records counted after the first micro-batch over the time until the last (micro-batches
of PER_BATCH records; the stream's own /status, polled every 0.25 s). Each row is one run. Prints a Markdown table;
writes bench-eos-results.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCE_PORT, TARGET_PORT, METRICS_PORT = 26892, 26992, 26995  # brokers use port + 1 for controllers
RECORDS, VALUE_BYTES, PER_BATCH = 120_000, 512, 60_000
QUIET = {"log_level": 3}


def _status() -> dict[str, object] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/status", timeout=2) as answer:
            [snapshot] = json.loads(answer.read())
            return dict(snapshot)
    except OSError:
        return None


def _produce(topic: str, partitions: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": f"127.0.0.1:{SOURCE_PORT}", "linger.ms": 20, **QUIET})
    value = b"x" * VALUE_BYTES
    for i in range(RECORDS):
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(60) == 0


MODES = {  # mode -> the flow's settings
    "at-least-once": [],
    "at-least-once-idempotent": ["src->dst.mirrorflow.records.fenced = false"],
    "exactly-once": ["dst.exactly.once.source.support = enabled"],
}


def _run(work: Path, mode: str, partitions: int, run: int) -> dict[str, object]:
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"bench-{mode}-{partitions}-{run}"
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{SOURCE_PORT}", **QUIET})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(60)
    _produce(topic, partitions)
    cfg = work / f"{topic}.properties"
    cfg.write_text("\n".join([
        "clusters = src, dst", f"src.bootstrap.servers = 127.0.0.1:{SOURCE_PORT}",
        f"dst.bootstrap.servers = 127.0.0.1:{TARGET_PORT}", "src->dst.enabled = true", f"src->dst.topics = {topic}",
        "replication.factor = 1", "offset-syncs.topic.replication.factor = 1", "emit.heartbeats.enabled = false",
        *MODES[mode], ""]))
    launched = time.monotonic()
    log = (work / f"{topic}.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "mirrorflow", "--config", str(cfg), "stream", "--flow",
                             "src->dst", "--checkpoint", str(work / f"{topic}-checkpoint"), "--metrics-port",
                             str(METRICS_PORT), "--max-records-per-batch", str(PER_BATCH)],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    first = done = None
    first_count = 0
    status: dict[str, object] = {}
    try:
        deadline = launched + 1800
        while done is None and time.monotonic() < deadline and proc.poll() is None:
            status = _status() or status
            count = int(status.get("record-count", 0) or 0)
            now = time.monotonic()
            if count and first is None:
                first, first_count = now, count
            if count >= RECORDS:
                done = now
            time.sleep(0.25)
    finally:
        proc.terminate()
        proc.wait(120)
        log.close()
    if first is None or done is None:
        raise SystemExit(f"{mode} at {partitions} partitions did not finish: see {work / (topic + '.log')}")
    return {"mode": mode, "partitions": partitions, "start-up s": round(first - launched, 1),
            "records/s": round((RECORDS - first_count) / max(done - first, 1e-3)), "batches": status.get("batches"),
            "producer inits": status.get("transactional-producer-inits"),
            "stuck": len(status.get("stuck-partitions") or ())}  # type: ignore[arg-type]


def main() -> None:
    home = Path(tempfile.mkdtemp(prefix="mirrorflow-bench-eos-"))
    os.environ["MIRRORFLOW_HOME"] = str(home)
    os.environ.setdefault("MIRRORFLOW_JAR_CACHE", str(REPO / ".mirrorflow" / "jars"))
    from mirrorflow.dev import local
    from mirrorflow.model import config

    cfg = config.from_text(f"clusters = src, dst\nsrc.bootstrap.servers = 127.0.0.1:{SOURCE_PORT}\n"
                           f"dst.bootstrap.servers = 127.0.0.1:{TARGET_PORT}\n", source="bench")
    local.up(cfg)
    runs = [(m, int(n)) for m, n in (a.split(":") for a in sys.argv[1:])] or [
        (mode, partitions) for mode in MODES for partitions in (12, 1200)]
    if unknown := {m for m, _ in runs} - set(MODES):
        raise SystemExit(f"unknown mode {sorted(unknown)[0]!r}: one of {', '.join(MODES)}")
    rows = []
    try:
        for run, (mode, partitions) in enumerate(runs):
            rows.append(_run(home, mode, partitions, run))
            print(rows[-1], flush=True)
    finally:
        local.down(cfg, purge=True)
    print(f"\n{RECORDS:,} records of {VALUE_BYTES} bytes, one run each\n")
    print("| mode | source partitions | start-up until the first copy | records/s | micro-batches | "
          "transactional producers initialised | partitions paused as stuck |\n|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['mode']} | {r['partitions']:,} | {r['start-up s']} s | {r['records/s']:,} | {r['batches']} | "
              f"{r['producer inits']} | {r['stuck']} |")
    (REPO / "bench-eos-results.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
