"""The lease against a real broker: a process killed on this host is replaced at once (flow_lease L1), a stopped
one holds nothing though its static member is still listed (L2), a live one is never replaced."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mirrorflow.kafka import clients, flow_lease
from mirrorflow.kafka.link import FlowLink
from mirrorflow.model import config

pytestmark = [pytest.mark.kafka]

_HOLD = """
import sys, time
from mirrorflow.kafka.link import FlowLink
from mirrorflow.model import config
cfg = config.load(sys.argv[1])
lease = FlowLink.of(cfg, cfg.flow("alpha->beta")).lease()
lease.acquire(wait_s=float(sys.argv[2]))
print("held", lease.instance_id, flush=True)
time.sleep(120)
"""


def _holder(clusters_file: Path, wait_s: float = 30) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", _HOLD, str(clusters_file), str(wait_s)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_a_killed_holder_on_this_host_is_replaced_at_once_and_a_stopped_one_holds_nothing(
        local_clusters: config.MirrorConfig, clusters_file: Path) -> None:
    link = FlowLink.of(local_clusters, local_clusters.flow("alpha->beta"))
    link.ensure_syncs_topic()
    admin = clients.admin(local_clusters.cluster("beta"))
    first = _holder(clusters_file)
    processes = [first]
    try:
        assert first.stdout is not None
        held = first.stdout.readline().split()
        assert held == ["held", flow_lease.host_instance_id()], first.stderr.read() if first.poll() else held
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        began = time.monotonic()
        lease = link.lease()
        lease.acquire()  # the killed process's static member is still listed: replaced, not waited for
        took = time.monotonic() - began
        assert lease.instance_id == flow_lease.host_instance_id()
        assert took < flow_lease.SESSION_TIMEOUT_MS / 1000 / 2, took
        assert len(flow_lease.holders(admin, link.name)) == 1
        # A live process of this host is never replaced: it joins under its own id and waits, then is refused.
        second = _holder(clusters_file, wait_s=5)
        processes.append(second)
        assert second.wait(60) == 1 and "already running" in (second.stderr.read() if second.stderr else "")
        lease.release()
        listed = flow_lease.describe(admin, link.name).members
        assert [m.group_instance_id for m in listed] == [flow_lease.host_instance_id()]  # kept by a static id...
        assert flow_lease.holders(admin, link.name) == []  # ...yet it said it left: nobody runs the flow
    finally:
        for p in processes:
            p.kill()
            p.wait(10)
            for stream in (p.stdout, p.stderr):
                if stream is not None:
                    stream.close()


def test_a_lease_consumer_that_does_not_join_again_after_a_loss_is_replaced_and_the_lease_regained(
        local_clusters: config.MirrorConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    link = FlowLink.of(local_clusters, local_clusters.flow("alpha->beta"))
    link.ensure_syncs_topic()
    admin = clients.admin(local_clusters.cluster("beta"))
    lease = link.lease()
    lease.acquire()
    try:
        first = lease.member_id
        stuck = lease._consumer
        assert stuck is not None
        stuck.unsubscribe()  # lost, and never joining again: what a coordinator's restart once left
        lease.held, lease.lost = False, True
        monkeypatch.setattr(flow_lease, "REJOIN_AFTER_S", 2.0)
        began = time.monotonic()
        lease.regain()
        assert lease.held and not lease.lost and time.monotonic() - began < 30
        assert lease.member_id != first
        assert flow_lease.holders(admin, link.name) and lease.keep()
    finally:
        lease.release()
