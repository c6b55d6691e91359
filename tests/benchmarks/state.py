"""Replication state at scale: offset-sync state and checkpoint rounds as history and groups grow.

    make bench-state    # or: .venv/bin/python tests/benchmarks/state.py [--history 10000,100000] [--groups 100,5000]

Three local clusters (ports 26492, 26592, 26692) under a temporary MIRRORFLOW_HOME:
  1. history: a 4-partition source topic written by 4 transactional producers (4 records per transaction, so
     a commit marker after every 4 records), mirrored by `mirrorflow stream` (at-least-once, read_committed).
     After 10,000 transactions, produced 32 at a time while the stream mirrors them (a live source), and
     after 100,000, the other 90,000 produced at once (a catch-up) (`--history`): the live offset-sync
     records (what compaction keeps), the records the topic received, and a checkpoint round for 20 groups
     at random committed offsets (whose translations are checked against the target's records). The same
     for an exactly-once flow into a third cluster, counted in micro-batches;
  2. groups: checkpoint-round time for 100, 1,000 and 5,000 groups on a 12-partition topic, each group at a
     random offset per partition;
  3. start-up: time from launching the stream until a new record is mirrored, for the flow with the whole
     history and for a flow whose offset syncs are empty.
Prints Markdown tables; writes bench-state-results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: support
PORTS = {"src": 26492, "dst": 26592, "eos": 26692}
QUIET = {"log_level": 3}
HIST, EOS_TOPIC, WIDE = "history-tx", "exactly-once-tx", "wide-12"


def bootstrap(alias: str) -> str:
    return f"127.0.0.1:{PORTS[alias]}"


def produce_transactions(topic: str, partitions: int, transactions: int, per_transaction: int = 4,
                         tag: str = "a") -> float:
    """`transactions` in all, one transactional producer per partition in its own thread; seconds taken."""
    def run(p: int) -> None:
        tx = Producer({"bootstrap.servers": bootstrap("src"), "transactional.id": f"bench-{topic}-{tag}-{p}",
                       "linger.ms": 0, **QUIET})
        tx.init_transactions(30)
        for t in range(transactions // partitions):
            tx.begin_transaction()
            for i in range(per_transaction):
                tx.produce(topic, f"{tag}-{p}-{t}-{i}".encode(), partition=p)
            tx.commit_transaction(30)

    begun = time.monotonic()
    threads = [threading.Thread(target=run, args=(p,)) for p in range(partitions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.monotonic() - begun


def wait_mirrored(cfg: Any, flow: str, topic: str, stream: Any, timeout: float = 1800, poll_s: float = 1.0) -> float:
    from mirrorflow.kafka import offset_sync_log
    from mirrorflow.rules import offset_syncs
    from support.streams import end_offsets, wait_for

    source = cfg.flow(flow).source
    target = bootstrap(cfg.flow(flow).target)
    ends = end_offsets(bootstrap("src"), topic)
    begun = time.monotonic()

    def caught_up() -> bool:
        positions = offset_sync_log.read({"bootstrap.servers": target, **QUIET},
                                      offset_syncs.topic_name(source)).positions
        return all(positions.get((topic, p)) is not None and positions[(topic, p)].upstream_next >= e
                   for p, e in enumerate(ends))

    deadline = time.monotonic() + timeout
    while not caught_up():
        if time.monotonic() > deadline or not stream.alive():
            wait_for(caught_up, 1, f"{topic} mirrored by {flow}", stream)  # raises with the stream's log
        time.sleep(poll_s)
    return time.monotonic() - begun


def syncs_size(target: str, source: str) -> dict[str, int]:
    from mirrorflow.kafka import offset_sync_log
    from mirrorflow.rules import offset_syncs
    from support.streams import end_offsets

    state = offset_sync_log.read({"bootstrap.servers": target, **QUIET}, offset_syncs.topic_name(source))
    return {"live": state.live_records(), "written": end_offsets(target, offset_syncs.topic_name(source))[0],
            "anchors_max": max((len(a) for a in state.anchors.values()), default=0)}


def commit_groups(topic: str, partitions: int, groups: list[str], rng: random.Random) -> dict[str, dict[int, int]]:
    from support.streams import end_offsets

    ends = end_offsets(bootstrap("src"), topic)
    admin = AdminClient({"bootstrap.servers": bootstrap("src"), **QUIET})
    chosen: dict[str, dict[int, int]] = {}
    for at in range(0, len(groups), 200):
        futures = []
        for g in groups[at:at + 200]:
            chosen[g] = {p: rng.randrange(0, ends[p] + 1) for p in range(partitions)}
            request = [ConsumerGroupTopicPartitions(g, [TopicPartition(topic, p, o) for p, o in chosen[g].items()])]
            futures.append(admin.alter_consumer_group_offsets(request)[g])
        for f in futures:
            f.result(60)
    return chosen


def timed_round(cfg: Any, flow: str) -> tuple[float, list[Any]]:
    from mirrorflow.jobs import checkpoints
    from mirrorflow.kafka.link import FlowLink

    begun = time.monotonic()
    results = checkpoints.run_round(FlowLink.of(cfg, flow))
    return time.monotonic() - begun, results


def check_exact(results: list[Any], groups: set[str], target: str) -> int:
    """Every translation of the groups is exact and agrees with the target's records; partitions checked."""
    from support.streams import origin, read_partition

    cache: dict[tuple[str, int], list[tuple[int, int]]] = {}
    checked = 0
    for r in results:
        if r.group not in groups:
            continue
        for p in r.partitions:
            assert p.exact, f"{r.group} {p.source_topic}-{p.partition}: {p.note}"
            key = (p.target_topic, p.partition)
            if key not in cache:
                cache[key] = [(origin(m).offset, m.offset()) for m in read_partition(target, *key, committed=True)]
            consumed = [d for v, d in cache[key] if v < p.source_offset]
            past = consumed[-1] + 1 if consumed else 0
            # the first mirrored record at or after that (a transaction marker may sit in between)
            expected = next((d for _, d in cache[key] if d >= past), past)
            assert p.target_offset == expected, (r.group, p, expected)
            checked += 1
    return checked


def start_up(stream: Any, topic: str, cfg: Any, flow: str) -> float:
    """Seconds from launching the stream until one new transaction is mirrored."""
    stream.start()
    begun = time.monotonic()
    produce_transactions(topic, 1, 1, tag=f"start{time.time_ns()}")
    wait_mirrored(cfg, flow, topic, stream, timeout=600)
    return time.monotonic() - begun


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--history", default="10000,100000", help="transactions mirrored when each row is measured")
    ap.add_argument("--live-chunk", type=int, default=32, help="transactions per step of the first, live history")
    ap.add_argument("--eos-batches", type=int, default=2_000)
    ap.add_argument("--groups", default="100,1000,5000")
    ap.add_argument("--wide-records", type=int, default=10_000, help="records per partition of the 12-partition topic")
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="mirrorflow-bench-state-"))
    os.environ["MIRRORFLOW_HOME"] = str(home)
    os.environ.setdefault("MIRRORFLOW_JAR_CACHE", str(REPO / ".mirrorflow" / "jars"))
    from mirrorflow.dev import local
    from mirrorflow.model import config
    from support.streams import StreamProcess, create_topic

    text = "\n".join([
        "clusters = src, dst, eos", *(f"{a}.bootstrap.servers = {bootstrap(a)}" for a in PORTS),
        "replication.factor = 1", "offset-syncs.topic.replication.factor = 1",
        "checkpoints.topic.replication.factor = 1", "src.consumer.isolation.level = read_committed",
        "src->dst.enabled = true", f"src->dst.topics = {HIST}, {WIDE}", "src->eos.enabled = true",
        f"src->eos.topics = {EOS_TOPIC}", "eos.exactly.once.source.support = enabled",
        "emit.heartbeats.enabled = false", "groups = bench-.*", ""])
    path = home / "bench.properties"
    path.write_text(text)
    cfg = config.load(path)
    local.up(cfg)
    results: dict[str, Any] = {"transactions": int(args.history.split(",")[-1])}
    rng = random.Random(7)
    streams = []
    try:
        for topic, n in ((HIST, 4), (EOS_TOPIC, 1), (WIDE, 12)):
            create_topic(bootstrap("src"), topic, n)
        alo = StreamProcess(path, "src->dst", home / "alo")
        eos = StreamProcess(path, "src->eos", home / "eos")
        streams += [alo, eos]
        results["start_empty_s"] = start_up(eos, EOS_TOPIC, cfg, "src->eos")
        alo.start()
        history_groups = [f"bench-hist-{i}" for i in range(20)]

        # 1. history, at-least-once
        rows = []
        done = 0
        for step, total in enumerate(int(t) for t in args.history.split(",")):
            begun = time.monotonic()
            if step == 0:  # mirrored as it is produced, as a running mirror sees a live source
                for at in range(0, total, args.live_chunk):
                    produce_transactions(HIST, 4, min(args.live_chunk, total - at), tag=f"live{at}")
                    wait_mirrored(cfg, "src->dst", HIST, alo, poll_s=0.05)
            else:  # the rest in bulk: a catch-up after a pause
                produce_transactions(HIST, 4, total - done, tag=f"h{total}")
                wait_mirrored(cfg, "src->dst", HIST, alo)
            seconds, done = time.monotonic() - begun, total
            commit_groups(HIST, 4, history_groups, rng)
            round_s, found = timed_round(cfg, "src->dst")
            checked = check_exact(found, set(history_groups), bootstrap("dst"))
            size = syncs_size(bootstrap("dst"), "src")
            rows.append({"history": f"{total:,} transactions", "produce_s": seconds, "round_s": round_s,
                         "checked": checked, **size})
            print("history", rows[-1], flush=True)
        results["history"] = rows

        # 1b. exactly-once: micro-batches of a few transactions each, until the flow has run enough batches
        eos_rows = []
        for batches in (args.eos_batches // 10, args.eos_batches):
            while _batches(eos) < batches:
                produce_transactions(EOS_TOPIC, 1, 20, tag=f"e{_batches(eos)}")
            wait_mirrored(cfg, "src->eos", EOS_TOPIC, eos)
            commit_groups(EOS_TOPIC, 1, history_groups, rng)
            round_s, found = timed_round(cfg, "src->eos")
            checked = check_exact(found, set(history_groups), bootstrap("eos"))
            size = syncs_size(bootstrap("eos"), "src")
            eos_rows.append({"history": f"{_batches(eos):,} micro-batches", "round_s": round_s, "checked": checked,
                             **size})
            print("exactly-once", eos_rows[-1], flush=True)
        results["exactly_once"] = eos_rows

        # 3. start-up with the whole history
        alo.stop()
        results["start_history_s"] = start_up(alo, HIST, cfg, "src->dst")

        # 2. groups
        p = Producer({"bootstrap.servers": bootstrap("src"), "linger.ms": 20, **QUIET})
        for i in range(args.wide_records * 12):
            p.produce(WIDE, b"x" * 100, partition=i % 12)
            if i % 10_000 == 0:
                p.poll(0)
        p.flush(120)
        wait_mirrored(cfg, "src->dst", WIDE, alo)
        group_rows = []
        made: list[str] = []
        for n in (int(g) for g in args.groups.split(",")):
            new = [f"bench-wide-{i}" for i in range(len(made), n)]
            commit_groups(WIDE, 12, new, rng)
            made += new
            round_s, found = timed_round(cfg, "src->dst")
            wide = [r for r in found if r.group.startswith("bench-wide-")]
            sample = {r.group for r in rng.sample(wide, min(20, len(wide)))}
            checked = check_exact(found, sample, bootstrap("dst"))
            group_rows.append({"groups": n, "round_s": round_s, "checked": checked,
                               "group_partitions": sum(len(r.partitions) for r in wide)})
            print("groups", group_rows[-1], flush=True)
        results["groups"] = group_rows
    finally:
        for s in streams:
            if s.alive():
                s.stop()
        local.down(cfg)
    report(results)
    (REPO / "bench-state-results.json").write_text(json.dumps(results, indent=2))


def _batches(stream: Any) -> int:
    """Micro-batches the stream has completed, from its status file."""
    from mirrorflow.model import paths
    from mirrorflow.status import metrics

    source, target = stream.flow.split("->")
    data = metrics.read_status(paths.home() / "streams" / f"{source}-{target}" / "status.json")
    return int(data.get("batches", 0)) if data else 0


def report(r: dict[str, Any]) -> None:
    machine = f"{os.cpu_count()} cores, {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB"
    print(f"\n### Replication state at scale ({machine}, one run)\n")
    print("| flow | history | live offset-sync records | records written to the topic | most anchors in a partition "
          "| checkpoint round, 20 groups |")
    print("|---|---|---:|---:|---:|---:|")
    for label, rows in (("at-least-once, transactional source", r.get("history", [])),
                        ("exactly-once", r.get("exactly_once", []))):
        for row in rows:
            print(f"| {label} | {row['history']} | {row['live']:,} | {row['written']:,} | {row['anchors_max']} "
                  f"| {row['round_s']:.2f} s |")
        if len(rows) >= 2:
            print(f"| {label} | ratio last / first | {rows[-1]['live'] / rows[0]['live']:.2f} | | "
                  f"| {rows[-1]['round_s'] / rows[0]['round_s']:.2f} |")
    print("\n| consumer groups (12 partitions each) | checkpoint round | translations checked against the target |")
    print("|---:|---:|---:|")
    for row in r.get("groups", []):
        print(f"| {row['groups']:,} | {row['round_s']:.1f} s | {row['checked']} |")
    if "start_history_s" in r:
        print(f"\nstream start-up until a new record is mirrored: {r['start_empty_s']:.1f} s with empty offset syncs, "
              f"{r['start_history_s']:.1f} s after {r['transactions']:,} transactions "
              f"(ratio {r['start_history_s'] / r['start_empty_s']:.2f})")


if __name__ == "__main__":
    main()
