from __future__ import annotations

import pytest
from mirrorflow.errors import ConfigError
from mirrorflow.rules.filters import (
    DEFAULT_GROUPS,
    DEFAULT_GROUPS_EXCLUDE,
    DEFAULT_TOPICS,
    DEFAULT_TOPICS_EXCLUDE,
    NameFilter,
    java_regex_to_python,
)

TOPICS = NameFilter.from_lists(DEFAULT_TOPICS, DEFAULT_TOPICS_EXCLUDE)
GROUPS = NameFilter.from_lists(DEFAULT_GROUPS, DEFAULT_GROUPS_EXCLUDE, key="groups")


@pytest.mark.parametrize(("topic", "selected"), [
    ("orders", True),
    ("mm2-offsets.A.internal", False),   # .*[\-\.]internal
    ("connect-status-internal", False),
    ("orders.replica", False),           # .*\.replica
    ("__consumer_offsets", False),       # __.*
    ("internal", True),                  # needs the separator before it
])
def test_mm2_default_topic_filter(topic: str, selected: bool) -> None:
    assert TOPICS.selects(topic) is selected


@pytest.mark.parametrize(("group", "selected"), [
    ("billing", True), ("console-consumer-42", False), ("connect-mirror", False), ("__g", False),
])
def test_mm2_default_group_filter(group: str, selected: bool) -> None:
    assert GROUPS.selects(group) is selected


def test_whole_name_match_not_search() -> None:
    f = NameFilter.from_lists("foo", "")
    assert f.selects("foo") and not f.selects("foobar") and not f.selects("xfoo")


def test_exclude_wins_over_include() -> None:
    f = NameFilter.from_lists("quux-.*, foobar-topic", "quux-secret")
    assert f.selects("quux-1") and f.selects("foobar-topic") and not f.selects("quux-secret")


def test_an_empty_include_list_selects_nothing() -> None:
    assert not NameFilter.from_lists("", "").selects("anything")


@pytest.mark.parametrize(("java", "matches", "rejects"), [
    (r"\Qa.b\E.*", "a.bzzz", "axb"),                 # \Q..\E quotes
    (r"(?<name>ab)c", "abc", "ab"),                  # Java named group
    (r"\p{Alpha}+", "abcXYZ", "ab1"),
    (r"[\p{Digit}_]+", "1_2", "1-2"),
    (r"\P{Digit}+", "abc", "a1"),
    (r"[]a]+", "]a]", "b"),                          # ']' first in a class is literal
    (r"(?i)orders", "ORDERS", "order"),
    (r"a*+b", "aaab", "aaa"),                        # possessive quantifier
])
def test_java_regexes_are_translated_to_the_same_meaning(java: str, matches: str, rejects: str) -> None:
    f = NameFilter.from_lists(java, "")
    assert f.selects(matches) and not f.selects(rejects)


@pytest.mark.parametrize(("java", "reason"), [
    (r"[a-z[A-Z]]", "nested"),
    (r"a(?i)b", "global flags"),                     # Java scopes a mid-pattern flag; Python cannot
    (r"[a-z&&aeiou]", "intersection"),
    (r"\Gfoo", r"\\G"),
    (r"foo\R", r"\\R"),
    (r"foo\Z", r"\\Z"),
    (r"\p{InGreek}", "not supported"),
    (r"foo(", "missing \\)"),
])
def test_regexes_python_cannot_honour_are_rejected_with_the_reason(java: str, reason: str) -> None:
    with pytest.raises(ConfigError, match=reason):
        java_regex_to_python(java)


def test_a_bad_regex_in_a_list_is_a_config_error_naming_the_key_and_line() -> None:
    with pytest.raises(ConfigError, match=r"f:7: topics: bad regex 'a\['"):
        NameFilter.from_lists("ok, a[", "", key="topics", source="f", line=7)
