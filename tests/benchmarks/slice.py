"""What one slice of a lingering task costs on a bare broker: a transaction of a few records over a few partitions.

    .venv/bin/python tests/benchmarks/slice.py [--partitions 6] [--records 30] [--rounds 400]

One local broker (port 26292) under a temporary MIRRORFLOW_HOME. Each round is a slice as the writer makes it
(spark/stream_writer._commit_slice): records produced into an open transaction with the writer's linger, a flush
(every record acknowledged), one offset-sync record, the commit, the next transaction begun. Printed: the flush's,
the commit's and the whole slice's median and p99, with the broker's check of each partition's first write in a
transaction (KIP-890's `transaction.partition.verification.enable`, Kafka's default) and without it, twice each in
turn after a warm-up round. One run; not part of `make test`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

BROKER = "127.0.0.1:26292"


def _quantiles(values: list[float]) -> str:
    ordered = sorted(values)
    return f"p50 {statistics.median(ordered):5.1f} p99 {ordered[int(len(ordered) * 0.99) - 1]:5.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=6, help="partitions a slice writes (a task's, at a trickle)")
    ap.add_argument("--records", type=int, default=30, help="records a slice writes")
    ap.add_argument("--rounds", type=int, default=400)
    args = ap.parse_args()
    os.environ["MIRRORFLOW_HOME"] = tempfile.mkdtemp(prefix="mirrorflow-bench-slice-")
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
    from mirrorflow.dev import local
    from mirrorflow.kafka.writers import writer_config as producer_config
    from mirrorflow.model import config

    cfg = config.from_text(f"clusters = t\nt.bootstrap.servers = {BROKER}\n", source="benchmark_slice")
    local.up(cfg)
    try:
        admin = AdminClient({"bootstrap.servers": BROKER, "log_level": 3})
        for created in admin.create_topics([NewTopic("slice.records", args.partitions, 1),
                                            NewTopic("slice.syncs", 1, 1)]).values():
            created.result(30)

        def verification(on: bool) -> None:
            entry = ConfigEntry("transaction.partition.verification.enable", str(on).lower(),
                                incremental_operation=AlterConfigOpType.SET)
            for done in admin.incremental_alter_configs([ConfigResource("BROKER", "1",
                                                                        incremental_configs=[entry])]).values():
                done.result(30)
            time.sleep(2)

        def slices(label: str) -> None:
            settings = producer_config({}, transactional_id=f"slice-{label}-{time.monotonic_ns()}")
            producer = Producer({**settings, "bootstrap.servers": BROKER, "log_level": 3})
            producer.init_transactions(30)
            producer.begin_transaction()
            value = os.urandom(1024)
            flushes, commits, whole = [], [], []
            for _ in range(args.rounds):
                begun = time.monotonic()
                for k in range(args.records):
                    producer.produce("slice.records", value, partition=k % args.partitions)
                produced = time.monotonic()
                producer.flush(10)
                flushed = time.monotonic()
                producer.produce("slice.syncs", b"position", key=b"partition", partition=0)
                producer.commit_transaction(10)
                committed = time.monotonic()
                producer.begin_transaction()
                flushes.append(1000 * (flushed - produced))
                commits.append(1000 * (committed - flushed))
                whole.append(1000 * (committed - begun))
                time.sleep(0.005)
            producer.abort_transaction(10)
            print(f"{label:28s} flush {_quantiles(flushes)} | offset sync + commit {_quantiles(commits)} | "
                  f"slice {_quantiles(whole)} ms", flush=True)

        print(f"{args.rounds} slices of {args.records} records of 1 KiB over {args.partitions} partitions")
        slices("warm-up (checked)")
        for _ in range(2):
            slices("partitions checked")
            verification(False)
            slices("partitions not checked")
            verification(True)
    finally:
        local.down(cfg, purge=True)


if __name__ == "__main__":
    main()
