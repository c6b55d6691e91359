"""Every port the tests, the drill and the benchmarks open on this machine, in one table.

A broker of the project's launcher listens on its port and runs its controller on the next one (dev/local). The
second lane of `make test` (support.lanes) moves the session's shared clusters (and test_tls's) by LANE_OFFSET; every
other port belongs to one module, which runs in one lane. tests/test_ports.py holds the table free of overlaps, the
shared clusters counted in both lanes.
"""

from __future__ import annotations

import os

LANE_OFFSET = int(os.environ.get("MIRRORFLOW_TEST_PORT_OFFSET", "0"))
SECOND_LANE_OFFSET = 3000  # support.lanes gives the second lane this

# The session's shared clusters (support.clusters).
ALPHA, BETA, GAMMA = 25092 + LANE_OFFSET, 25192 + LANE_OFFSET, 25292 + LANE_OFFSET
BETA_SECOND_BROKER = 25196  # test_stream_faults: a second broker of beta, for one test
# Brokers of one module's own.
DELTA = 25392  # test_metadata_sync, test_local_clusters (a cluster the test stops and removes)
SECURE_LOCAL = 25492  # test_local_clusters: a SASL broker of its own
QUORUM = (25510, 25512, 25514)  # test_local_clusters: a controller quorum that changed
SIGMA, TAU = 27092 + LANE_OFFSET, 27192 + LANE_OFFSET  # test_tls
# The drills' two three-broker clusters, each broker's second listener (+20) and the Toxiproxy port it advertises
# (+30); Toxiproxy's API.
DRILL_NODES = 3
DRILL_SOURCE = tuple(25600 + 2 * n for n in range(DRILL_NODES))
DRILL_TARGET = tuple(25700 + 2 * n for n in range(DRILL_NODES))
TOXIPROXY_API = 25474
# The chaos run (support.chaos, tests/test_chaos.py): a source broker and a three-broker target.
CHAOS_SOURCE = 25540
CHAOS_TARGET = (25550, 25552, 25554)
# make drill (support.dr_drill): primary and backup, three brokers each.
DR_PRIMARY, DR_BACKUP = (25800, 25802, 25804), (25900, 25902, 25904)
# Other servers: metrics endpoints of one stream each, the embedded Airflow, a Spark standalone master.
STREAM_METRICS = 25464  # test_stream
LINGER_METRICS = 25467  # test_stream
STUCK_METRICS = 25465  # test_stream_faults
KEEP_METRICS = 25466  # test_stream_guarantees
AIRFLOW_API = 25080  # test_embedded_airflow
SPARK_MASTER = 25777  # test_stream_cluster (and its web UI on the next port)
# The benchmarks (tests/benchmarks/) run one at a time, never beside the tests: their own ports are in this range.
BENCHMARKS = range(26000, 27000)


def brokers(offset: int = LANE_OFFSET) -> dict[str, tuple[int, ...]]:
    """Every broker port by owner, the shared clusters' and test_tls's moved by `offset`: each also takes the next
    port for its controller."""
    moved = offset - LANE_OFFSET
    return {"shared": (ALPHA + moved, BETA + moved, GAMMA + moved), "beta's second": (BETA_SECOND_BROKER,),
            "delta": (DELTA,), "secure": (SECURE_LOCAL,),
            "quorum": QUORUM, "tls": (SIGMA + moved, TAU + moved), "drill": DRILL_SOURCE + DRILL_TARGET,
            "dr": DR_PRIMARY + DR_BACKUP, "chaos": (CHAOS_SOURCE, *CHAOS_TARGET)}


def servers() -> dict[str, tuple[int, ...]]:
    """Every other port: the drills' second listeners and proxies, Toxiproxy's API, the metrics endpoints, Airflow
    and Spark's master (with its web UI)."""
    drill = DRILL_SOURCE + DRILL_TARGET
    return {"drill listeners": tuple(p + 20 for p in drill), "drill proxies": tuple(p + 30 for p in drill),
            "toxiproxy": (TOXIPROXY_API,), "metrics": (STREAM_METRICS, LINGER_METRICS, STUCK_METRICS, KEEP_METRICS),
            "airflow": (AIRFLOW_API,), "spark": (SPARK_MASTER, SPARK_MASTER + 1)}
