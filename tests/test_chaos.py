"""Chaos in short (support.chaos; `make chaos` runs it with 20 kills a mode): in every delivery mode, under steady
traffic and a backlog, a kill of a copying Python worker, of the planner, of the whole tree and of a target broker,
most of them with records in flight; then every source record on the target, first copies in order, none twice
under exactly-once. Real brokers (a source and a three-broker target of its own) and real Spark."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import chaos

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


@pytest.mark.timeout(1800)  # three modes, each a stream relaunched and a broker restarted
def test_every_record_survives_kills_of_a_worker_the_planner_the_tree_and_a_target_broker_in_every_mode(
        cluster_env: dict[str, str], tmp_path: Path) -> None:
    kills = len(chaos.KINDS)
    runs = chaos.run(list(chaos.MODES), kills, seed=7, backlog=20_000, work=tmp_path)
    print(chaos.table(runs))
    failures = [f for r in runs for f in r.failures(kills)]
    assert not failures, "\n".join([chaos.table(runs), *failures])
    assert all(sorted(k.kind for k in r.kills) == sorted(chaos.KINDS) for r in runs)
