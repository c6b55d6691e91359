"""Offset syncs an older mirrorflow wrote (one record per run) become anchors at the stream's start, on real brokers."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import ConfigResource
from mirrorflow.jobs.stream import StreamOptions, _Driver
from mirrorflow.kafka import admin_sync, offset_sync_log
from mirrorflow.kafka.link import FlowLink
from mirrorflow.kafka.target_reader import TargetRecords
from mirrorflow.model import config
from mirrorflow.rules.offset_syncs import OffsetRun, Position
from mirrorflow.rules.provenance import HEADER, Provenance
from mirrorflow.rules.translation import PartitionSyncs, target_offsets
from support.clusters import PORTS
from support.streams import QUIET, config_text, create_topic

pytestmark = [pytest.mark.kafka]
ALPHA = f"127.0.0.1:{PORTS['alpha']}"
BETA = f"127.0.0.1:{PORTS['beta']}"
SYNCS = "mirrorflow-offset-syncs-alpha-internal"
REMOTE = "alpha-mig.orders"


def test_runs_of_an_older_version_become_anchors_and_translate_exactly(local_clusters: config.MirrorConfig,
                                                                       tmp_path: Path) -> None:
    path = tmp_path / "mirror.properties"
    path.write_text(config_text(("alpha", "beta"), (PORTS["alpha"], PORTS["beta"]), ["alpha->beta"],
                                "alpha->beta.topics = mig\\..*\nreplication.policy.separator = -\n"))
    cfg = config.load(path)
    create_topic(ALPHA, "mig.orders", 1)
    create_topic(BETA, REMOTE, 1)
    create_topic(BETA, SYNCS, 1, **{"cleanup.policy": "compact"})
    # What the old stream left: transactions of 3 records (a marker after each), a foreign record, and a replay.
    visible = [u for u in range(400) if u % 4 != 3]
    mirrored = visible[:200] + visible[180:]  # the batch from visible[180] was written twice
    p = Producer({"bootstrap.servers": BETA, **QUIET})
    target: list[int | None] = []
    for i, u in enumerate(mirrored):
        if i == 100:
            p.produce(REMOTE, b"another writer", partition=0)
            target.append(None)
        p.produce(REMOTE, b"v", partition=0, headers=[(HEADER, Provenance("alpha", "mig.orders", 0, u).encode())])
        target.append(u)
    pairs = [(u, d) for d, u in enumerate(target) if u is not None]
    runs: list[OffsetRun] = []
    for u, d in pairs:
        last = runs[-1] if runs else None
        if last and u == last.upstream + last.length and d == last.downstream + last.length:
            runs[-1] = OffsetRun("mig.orders", 0, last.upstream, last.downstream, last.length + 1)
        else:
            runs.append(OffsetRun("mig.orders", 0, u, d, 1))
    for record in [*runs, Position("mig.orders", 0, 400, len(target))]:
        p.produce(SYNCS, record.value(), record.key(), partition=0)
    assert p.flush(30) == 0
    before = offset_sync_log.read({"bootstrap.servers": BETA, **QUIET}, SYNCS)
    assert len(before.runs[("mig.orders", 0)]) == len({r.upstream for r in runs}) > 100

    driver = _Driver(FlowLink.of(cfg, "alpha->beta"), StreamOptions())
    admin_sync.ensure_internal_topic(driver.link.target_admin, "beta", SYNCS, 1, admin_sync.COMPACTED)
    resource = ConfigResource(ConfigResource.Type.TOPIC, SYNCS)
    configs = driver.link.target_admin.describe_configs([resource])[resource].result(30)
    assert {k: configs[k].value for k in admin_sync.COMPACTED} == admin_sync.COMPACTED, "an older topic is altered"
    driver._load_syncs()

    after = offset_sync_log.read({"bootstrap.servers": BETA, **QUIET}, SYNCS)
    assert not after.runs.get(("mig.orders", 0)), "the old runs are tombstoned"
    anchors = sorted(after.anchors[("mig.orders", 0)].values(), key=lambda a: a.downstream)
    assert 2 <= len(anchors) <= 255 and anchors[0].origin
    syncs = PartitionSyncs(tuple(anchors), after.positions[("mig.orders", 0)])
    records = TargetRecords({"bootstrap.servers": BETA, **QUIET}, "alpha")
    try:
        answers = target_offsets(syncs, range(401), records.partition(REMOTE, "mig.orders", 0))
    finally:
        records.close()
    for u, got in answers.items():
        consumed = [d for v, d in pairs if v < u]
        past = consumed[-1] + 1 if consumed else 0
        expected = next(d for d, v in enumerate(target) if d >= past and v is not None) if past < len(target) \
            else past
        assert got.exact and got.offset == expected, u
