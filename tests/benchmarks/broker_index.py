"""A local broker taking writes to new partitions, with Kafka's 10 MiB index files and with the launcher's.

    .venv/bin/python tests/benchmarks/broker_index.py

For each index size, one local broker (port 26892) under a temporary MIRRORFLOW_HOME; 120 topics of 12 partitions
are created, then rounds of one producer each (the stream writer's batching: 1 MiB batches, linger 5 ms, acks=all,
idempotent) write 1,667 records of 1 KiB to each of 240 partitions never written before, 20 partitions at a time,
each 20 in a transaction of their own (as a stream task's) or, in the third round, flushed without one. The kernel's
read-ahead of the broker's disk is printed: each index is a sparse memory-mapped file whose first touch is read
around as far as it allows. Prints records/s per round.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PORT = 26892
ROUNDS = (("transactional", True), ("transactional", True), ("idempotent", False), ("transactional", True),
          ("transactional", True))
PARTITIONS_AT_ONCE, RECORDS_PER_PARTITION = 20, 1_667


def read_ahead_kb(path: Path) -> str:
    device = os.stat(path).st_dev
    sysfs = Path(f"/sys/dev/block/{os.major(device)}:{os.minor(device)}")
    for candidate in (sysfs / "queue" / "read_ahead_kb", sysfs / ".." / "queue" / "read_ahead_kb"):
        if candidate.exists():
            return candidate.read_text().strip()
    return "unknown"


def one_size() -> list[float]:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from mirrorflow.dev import local
    from mirrorflow.model import config

    cfg = config.from_text(f"clusters = b\nb.bootstrap.servers = 127.0.0.1:{PORT}\n", source="bench")
    local.up(cfg)
    try:
        bootstrap = {"bootstrap.servers": f"127.0.0.1:{PORT}", "log_level": 3}
        admin = AdminClient(bootstrap)
        topics = [f"round{r}-{i:03d}" for r in range(len(ROUNDS)) for i in range(20)]
        for created in admin.create_topics([NewTopic(t, 12, 1) for t in topics]).values():
            created.result(60)
        value = os.urandom(1024)
        rates = []
        for r, (_, transactional) in enumerate(ROUNDS):
            producer = Producer({**bootstrap, "linger.ms": 5, "batch.size": 1_048_576, "acks": "all",
                                 "enable.idempotence": True, "queue.buffering.max.kbytes": 65_536,
                                 **({"transactional.id": f"bench-{r}"} if transactional else {})})
            if transactional:
                producer.init_transactions(30)
            partitions = [(f"round{r}-{i:03d}", p) for i in range(20) for p in range(12)]
            began = time.monotonic()
            for k in range(0, len(partitions), PARTITIONS_AT_ONCE):
                if transactional:
                    producer.begin_transaction()
                for topic, partition in partitions[k:k + PARTITIONS_AT_ONCE]:
                    for _ in range(RECORDS_PER_PARTITION):
                        while True:
                            try:
                                producer.produce(topic, value, partition=partition)
                                break
                            except BufferError:
                                producer.poll(0.01)
                if transactional:
                    producer.commit_transaction(60)
                elif producer.flush(60):
                    raise SystemExit("records not acknowledged within 60 s")
            rates.append(len(partitions) * RECORDS_PER_PARTITION / (time.monotonic() - began))
        return rates
    finally:
        local.down(cfg, purge=True)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        print(" ".join(f"{rate:.0f}" for rate in one_size()))
        return
    from mirrorflow.dev import local

    home = Path(tempfile.mkdtemp(prefix="mirrorflow-bench-index-"))
    print(f"read-ahead of the brokers' disk: {read_ahead_kb(home)} KiB")
    print("| index files | " + " | ".join(f"round {r + 1} ({kind}) records/s" for r, (kind, _) in enumerate(ROUNDS))
          + " |")
    print("|---|" + "---:|" * len(ROUNDS))
    sizes = (("10 MiB (Kafka's default)", 10 << 20),
             (f"{local.INDEX_BYTES >> 10} KiB (the launcher's)", local.INDEX_BYTES))
    for label, size in sizes:
        env = {**os.environ, "MIRRORFLOW_HOME": str(home / str(size)), "MIRRORFLOW_BROKER_INDEX_BYTES": str(size)}
        env.setdefault("MIRRORFLOW_JAR_CACHE", str(Path(__file__).resolve().parents[2] / ".mirrorflow" / "jars"))
        out = subprocess.run([sys.executable, __file__, "--one"], env=env, check=True, capture_output=True,
                             text=True).stdout.split()
        print(f"| {label} | " + " | ".join(f"{float(rate):,.0f}" for rate in out) + " |", flush=True)


if __name__ == "__main__":
    main()
