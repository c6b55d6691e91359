from __future__ import annotations

import pytest
from mirrorflow.errors import ConfigError
from mirrorflow.model import properties


def kv(text: str) -> dict[str, str]:
    return {e.key: e.value for e in properties.parse(text)}


@pytest.mark.parametrize(("line", "key", "value"), [
    ("a=b", "a", "b"),
    ("a = b", "a", "b"),
    ("a:b", "a", "b"),
    ("a : b", "a", "b"),
    ("a b", "a", "b"),           # white space separates too
    ("a", "a", ""),              # a key alone has an empty value
    ("a=", "a", ""),
    ("a==b", "a", "=b"),         # only the first separator separates
    ("a\\=b=c", "a=b", "c"),     # an escaped separator belongs to the key
    ("a\\ b = c", "a b", "c"),
    ("k = x\\ty", "k", "x\ty"),
    ("k = \\u0041\\u00e9", "k", "Aé"),
    ("k = a\\\\", "k", "a\\"),   # an even number of backslashes does not continue
    ("us-west->us-east.enabled = true", "us-west->us-east.enabled", "true"),
])
def test_one_line_reads_as_java_properties_does(line: str, key: str, value: str) -> None:
    assert kv(line) == {key: value}


def test_comments_start_only_a_line_and_inline_hashes_stay_in_the_value() -> None:
    text = "# comment\n  ! also a comment\ntopics = .* # not a comment\n"
    assert kv(text) == {"topics": ".* # not a comment"}


def test_continuation_lines_join_and_drop_leading_blanks() -> None:
    text = "k = one, \\\n     two, \\\n     three\nnext = 1\n"
    assert kv(text) == {"k": "one, two, three", "next": "1"}


def test_line_numbers_point_at_the_key() -> None:
    entries = properties.parse("\n# c\na = 1\\\n  2\nb = 3\n")
    assert [(e.key, e.line) for e in entries] == [("a", 3), ("b", 5)]


def test_a_malformed_unicode_escape_names_its_line() -> None:
    with pytest.raises(ConfigError, match=r"<string>:2: malformed"):
        properties.parse("a = 1\nb = \\u12\n")


def test_a_missing_file_is_a_config_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="file not found"):
        properties.load(tmp_path / "nope.properties")
