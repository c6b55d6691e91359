"""The tests' ports (support.ports): no two owners share one, in either lane of `make test`."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from support import ports


def _taken() -> list[tuple[str, int]]:
    taken = [(f"{owner} (lane {lane})" if owner in ("shared", "tls") else owner, port + k)
             for lane, offset in enumerate((0, ports.SECOND_LANE_OFFSET), start=1)
             for owner, brokers in ports.brokers(offset).items() if lane == 1 or owner in ("shared", "tls")
             for port in brokers for k in (0, 1)]
    return taken + [(owner, port) for owner, found in ports.servers().items() for port in found]


def test_no_two_owners_and_no_two_lanes_share_a_port() -> None:
    taken = _taken()
    clashes = [(a, b) for a, b in itertools.combinations(taken, 2) if a[1] == b[1]]
    assert not clashes, clashes
    assert all(1024 < port < 32768 for _, port in taken)  # below Linux's ephemeral range (Spark's own ports)
    assert not [(owner, port) for owner, port in taken if port in ports.BENCHMARKS]


def test_every_benchmark_port_is_in_the_benchmarks_range() -> None:
    found = {int(m) for path in (Path(__file__).parent / "benchmarks").glob("*.py")
             for m in re.findall(r"(?<![\d_])(2[5-9]\d{3})(?![\d_])", path.read_text())}
    assert found and all(port in ports.BENCHMARKS for port in found), sorted(found)


def test_the_second_lanes_offset_is_what_the_lanes_give_it() -> None:
    from support import lanes

    assert int(lanes.PORT_OFFSET) == ports.SECOND_LANE_OFFSET
