"""The provenance header (pure)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from mirrorflow import provenance
from mirrorflow.provenance import HEADER, Provenance

aliases = st.text(st.characters(blacklist_characters="/", blacklist_categories=("Cs",)), min_size=1, max_size=12)
topics = st.text("abcXYZ019._-", min_size=1, max_size=30)


@given(aliases, topics, st.integers(0, 10_000), st.integers(0, 2**62))
def test_a_provenance_value_parses_back(cluster: str, topic: str, partition: int, offset: int) -> None:
    p = Provenance(cluster, topic, partition, offset)
    assert Provenance.parse(p.encode()) == p


def test_a_record_came_from_a_cluster_iff_one_of_its_hops_names_it() -> None:
    hops = [("x", b"1"), (HEADER, Provenance("us-east", "t", 0, 1).encode()),
            (HEADER, Provenance("eu", "us-east.t", 2, 9).encode())]
    assert provenance.came_from(hops, "us-east") and provenance.came_from(hops, "eu")
    assert not provenance.came_from(hops, "us")  # a prefix of an alias is another alias
    assert not provenance.came_from([("x", None), ("other", b"us-east/t/0/1")], "us-east")
    assert not provenance.came_from(None, "eu")
    assert [h.cluster for h in provenance.hops(hops)] == ["us-east", "eu"]
