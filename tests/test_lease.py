"""The lease's verdict on a description of its group (flow_lease W1), pure."""

from __future__ import annotations

from mirrorflow.kafka.flow_lease import (
    CONFIRMED_FOR_S,
    DELIVERY_TIMEOUT_MS,
    FENCED_TAKEOVER_WAIT_S,
    TAKEOVER_WAIT_S,
    group_of,
    is_lease_group,
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
