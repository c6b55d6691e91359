"""The provenance header (pure)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from mirrorflow.rules import provenance
from mirrorflow.rules.provenance import HEADER, Provenance

aliases = st.text(st.characters(blacklist_characters="/", blacklist_categories=("Cs",)), min_size=1, max_size=12)
topics = st.text("abcXYZ019._-", min_size=1, max_size=30)


@given(aliases, topics, st.integers(0, 10_000), st.integers(0, 2**62))
def test_a_provenance_value_parses_back(cluster: str, topic: str, partition: int, offset: int) -> None:
    p = Provenance(cluster, topic, partition, offset)
    assert Provenance.parse(p.encode()) == p


def test_a_record_returns_to_a_topic_iff_one_of_its_hops_names_that_cluster_and_topic() -> None:
    hops = [("x", b"1"), (HEADER, Provenance("us-east", "t", 0, 1).encode()),
            (HEADER, Provenance("eu", "us-east.t", 2, 9).encode())]
    assert provenance.returns_to(hops, "us-east", "t") and provenance.returns_to(hops, "eu", "us-east.t")
    assert not provenance.returns_to(hops, "us-east", "other")  # forwarded by an application: new data
    assert not provenance.returns_to(hops, "eu", "t")
    assert not provenance.returns_to(hops, "us", "t")  # a prefix of an alias is another alias
    assert not provenance.returns_to(hops, "us-east", "t.x") and not provenance.returns_to(hops, "eu", "us-east")
    assert not provenance.returns_to([("x", None), ("other", b"us-east/t/0/1")], "us-east", "t")
    assert not provenance.returns_to(None, "eu", "t")
    assert [h.cluster for h in provenance.hops(hops)] == ["us-east", "eu"]


@given(aliases, topics, aliases, topics, st.integers(0, 99), st.integers(0, 2**40))
def test_returns_to_matches_exactly_the_hops_cluster_and_topic(cluster: str, topic: str, other_cluster: str,
                                                                other_topic: str, partition: int, offset: int) -> None:
    headers = [(HEADER, Provenance(cluster, topic, partition, offset).encode())]
    assert provenance.returns_to(headers, other_cluster, other_topic) == (
        (other_cluster, other_topic) == (cluster, topic))
