"""The lease's verdict on a description of its group (flow_lease W1), pure; its host lock (L1) with real processes."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid

from mirrorflow.kafka.flow_lease import (
    CONFIRMED_FOR_S,
    DELIVERY_TIMEOUT_MS,
    FENCED_TAKEOVER_WAIT_S,
    TAKEOVER_WAIT_S,
    HostLock,
    group_of,
    is_lease_group,
    process_alive,
    process_client_id,
    taken_over_by,
    verdict,
)


def test_a_writer_holds_the_lease_only_when_its_own_member_is_assigned_in_a_stable_group() -> None:
    assert verdict(True, [("me", True)], "me") == "held"
    assert verdict(True, [("me", True), ("zombie", False)], "me") == "held"


def test_another_assigned_member_supersedes_the_writer_even_mid_rebalance() -> None:
    assert verdict(True, [("me", False), ("new", True)], "me") == "superseded"
    assert verdict(False, [("new", True)], "me") == "superseded"
    assert verdict(True, [("new", True)], "me") == "superseded"


def test_an_earlier_member_id_of_the_same_instance_is_no_other_instance() -> None:
    assert verdict(True, [("old-me", True), ("me", False)], "me", ("old-me",)) == "unknown"
    assert verdict(True, [("old-me", True), ("other", True)], "me", ("old-me",)) == "superseded"


def test_a_lease_regained_under_a_new_member_id_of_this_instances_static_id_is_not_taken_over() -> None:
    # (member id, static id, host, assigned): this consumer joined again, and the group assigned its new member
    # before its own poll heard of it
    me = "mirrorflow@h"
    assert taken_over_by([("new-id", me, "/10.0.0.1", True)], me, ("old-id",)) is None
    assert taken_over_by([("old-id", None, "/10.0.0.1", True)], me, ("old-id",)) is None
    assert taken_over_by([("other", "mirrorflow@h2", "/10.0.0.2", True)], me, ()) == "/10.0.0.2"
    assert taken_over_by([("other", None, "/10.0.0.2", True)], me, ()) == "/10.0.0.2"
    assert taken_over_by([("other", "mirrorflow@h2", "/10.0.0.2", False)], me, ()) is None
    assert taken_over_by([("other", None, "/10.0.0.2", True)], None, ()) == "/10.0.0.2"  # no static id known


def test_a_rebalance_or_an_empty_group_is_no_confirmation() -> None:
    assert verdict(False, [("me", True)], "me") == "unknown"
    assert verdict(True, [("me", False)], "me") == "unknown"
    assert verdict(True, [], "me") == "unknown"


def test_a_takeover_waits_longer_than_a_confirmation_and_a_delivery_last() -> None:
    assert TAKEOVER_WAIT_S > CONFIRMED_FOR_S + DELIVERY_TIMEOUT_MS / 1000


def test_a_takeover_of_transactional_writes_waits_longer_than_a_confirmation_lasts() -> None:
    assert CONFIRMED_FOR_S < FENCED_TAKEOVER_WAIT_S < TAKEOVER_WAIT_S


def test_a_flows_lease_group_is_recognised_so_runbooks_and_checkpoints_leave_it_alone() -> None:
    assert is_lease_group(group_of("primary->backup"))
    assert not is_lease_group("orders-app") and not is_lease_group("mirrorflow-app")


_HOLD = """
import sys, time
from mirrorflow.kafka.flow_lease import HostLock
lock = HostLock.take(sys.argv[1])
print("held" if lock is not None else "refused", flush=True)
time.sleep(60)
"""


def test_the_host_lock_has_one_holder_and_is_let_go_when_its_process_is_killed() -> None:
    key, began = f"test|{uuid.uuid4()}", time.time() - 1
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, key], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert HostLock.take(key) is None  # a live process of this host holds it
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        mine = HostLock.take(key)
        assert mine is not None  # its holder is gone, however it died
        second = subprocess.run([sys.executable, "-c", _HOLD.replace("time.sleep(60)", ""), key],
                                capture_output=True, text=True, timeout=30)
        assert second.stdout.strip() == "refused"
        mine.release()
        again = HostLock.take(key)
        assert again is not None
        again.release()
    finally:
        for lock in HostLock.DIRECTORY.glob("*.lock"):
            if lock.stat().st_mtime >= began:
                lock.unlink(missing_ok=True)
        holder.kill()
        holder.wait(10)
        holder.stdout.close()  # type: ignore[union-attr]


def test_a_lease_members_client_id_says_whether_its_process_still_runs_on_this_host() -> None:
    assert process_alive(process_client_id())
    child = subprocess.run([sys.executable, "-c", "from mirrorflow.kafka.flow_lease import process_client_id; "
                            "print(process_client_id())"], capture_output=True, text=True, timeout=30)
    assert not process_alive(child.stdout.strip())  # exited
    pid, ticks = process_client_id().rsplit("-", 2)[1:]
    assert not process_alive(f"mirrorflow-lease-{pid}-{int(ticks) + 1}")  # a later process under the same pid
    assert not process_alive("rdkafka") and not process_alive(None)
