"""Topic and group selection with Java-regex whole-name semantics, as MM2's default filters.

A filter is a comma list of Java regexes (split on commas as Kafka's LIST type does, so a regex
cannot contain a comma); a name is selected when it matches an include regex whole
(`Pattern.matcher(name).matches()`) and no exclude regex. Exclude wins over include.

Python's `re` reads most Java regexes the same way. What it reads differently is translated:
  `\\Q...\\E` quoting, `(?<name>...)` groups, `\\z`, and the POSIX/Java classes `\\p{Alpha}` and
  friends (ASCII, as Java's defaults).
What it cannot honour is rejected with the reason, never silently changed:
  class intersection `[a&&b]`, nested classes `[a[b]]`, `\\G`, `\\R`, `\\X`, `\\h`, `\\H`, `\\v`,
  `\\V`, Java's `\\Z` (end before a final line terminator) and other `\\p{...}` properties.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mirrorflow.errors import ConfigError

DEFAULT_TOPICS = ".*"
DEFAULT_TOPICS_EXCLUDE = r".*[\-\.]internal, .*\.replica, __.*"
DEFAULT_GROUPS = ".*"
DEFAULT_GROUPS_EXCLUDE = "console-consumer-.*, connect-.*, __.*"

_POSIX = {
    "Lower": "a-z", "Upper": "A-Z", "ASCII": "\\x00-\\x7f", "Alpha": "a-zA-Z", "Digit": "0-9",
    "Alnum": "a-zA-Z0-9", "Punct": "!-/:-@\\[-`{-~", "Graph": "!-~", "Print": " -~",
    "Blank": " \\t", "Cntrl": "\\x00-\\x1f\\x7f", "XDigit": "0-9a-fA-F", "Space": " \\t\\n\\x0b\\f\\r",
    "javaLowerCase": "a-z", "javaUpperCase": "A-Z", "L": "^\\W\\d_", "IsAlphabetic": "^\\W\\d_",
}
_UNSUPPORTED_ESCAPES = {
    "G": "\\G (end of previous match)", "R": "\\R (linebreak matcher)", "X": "\\X (grapheme cluster)",
    "h": "\\h (horizontal white space)", "H": "\\H", "v": "\\v (Java: vertical white space)",
    "V": "\\V", "Z": "\\Z (Java: end before a final line terminator; use $ or \\z)",
}


def split_list(value: str) -> list[str]:
    """Kafka's LIST parsing: split on commas, trim, drop empty items."""
    return [item.strip() for item in value.split(",") if item.strip()]


def java_regex_to_python(pattern: str) -> str:
    """Translate one Java regex to an equivalent Python one, or raise ConfigError with the reason."""
    out: list[str] = []
    i, in_class = 0, 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if nxt == "Q":
                end = pattern.find("\\E", i + 2)
                literal = pattern[i + 2 :] if end < 0 else pattern[i + 2 : end]
                out.append(re.escape(literal))
                i = len(pattern) if end < 0 else end + 2
                continue
            if nxt == "z":
                out.append("\\Z")
            elif nxt in "pP":
                m = re.match(r"\{(\w+)\}", pattern[i + 2 :])
                name = m.group(1) if m else pattern[i + 2 : i + 3]
                body = _POSIX.get(name.removeprefix("Is"), _POSIX.get(name))
                if body is None:
                    raise ConfigError(f"\\{nxt}{{{name}}} is not supported")
                negate = (nxt == "P") != body.startswith("^")
                body = body.removeprefix("^")
                text = ("^" if negate else "") + body
                if in_class and negate:
                    raise ConfigError(f"a negated \\{nxt}{{{name}}} inside a character class is not supported")
                out.append(text if in_class else f"[{text}]")
                i += 2 + (len(m.group(0)) if m else 1)
                continue
            elif nxt in _UNSUPPORTED_ESCAPES:
                raise ConfigError(f"{_UNSUPPORTED_ESCAPES[nxt]} is not supported")
            else:
                out.append(ch + nxt)
            i += 2
            continue
        if in_class:
            if ch == "[":
                raise ConfigError("nested character classes are not supported")
            if pattern.startswith("&&", i):
                raise ConfigError("character class intersection (&&) is not supported")
            if ch == "]":
                in_class = 0
            out.append(ch)
            i += 1
            continue
        if ch == "[":
            in_class = 1
            out.append(ch)
            i += 1
            # a ']' right after '[' or '[^' is a literal in both dialects
            for lead in ("^", "]"):
                if pattern.startswith(lead, i):
                    out.append(lead)
                    i += 1
            continue
        if pattern.startswith("(?<", i) and not pattern.startswith(("(?<=", "(?<!"), i):
            out.append("(?P<")
            i += 3
            continue
        out.append(ch)
        i += 1
    translated = "".join(out)
    try:
        re.compile(translated)
    except re.error as exc:
        raise ConfigError(exc.msg) from None
    return translated


@dataclass(frozen=True)
class NameFilter:
    """Selects names matched whole by an include regex and by no exclude regex."""

    include: tuple[str, ...]
    exclude: tuple[str, ...]

    @classmethod
    def from_lists(cls, include: str, exclude: str, *, key: str = "topics", source: str | None = None,
                   line: int | None = None, exclude_key: str | None = None,
                   exclude_line: int | None = None) -> NameFilter:
        return cls(_compile_list(include, key=key, source=source, line=line),
                   _compile_list(exclude, key=exclude_key or f"{key}.exclude", source=source,
                                 line=exclude_line))

    def __post_init__(self) -> None:
        # Compiled one by one: Java allows a leading (?i) in each list item, Python only at the start.
        object.__setattr__(self, "_inc", tuple(re.compile(p) for p in self.include))
        object.__setattr__(self, "_exc", tuple(re.compile(p) for p in self.exclude))

    def selects(self, name: str) -> bool:
        """True iff some include regex matches the whole name and no exclude regex does."""
        inc: tuple[re.Pattern[str], ...] = self._inc  # type: ignore[attr-defined]
        exc: tuple[re.Pattern[str], ...] = self._exc  # type: ignore[attr-defined]
        return (any(p.fullmatch(name) for p in inc)
                and not any(p.fullmatch(name) for p in exc))


def _compile_list(value: str, *, key: str, source: str | None, line: int | None) -> tuple[str, ...]:
    out = []
    for item in split_list(value):
        try:
            out.append(java_regex_to_python(item))
        except ConfigError as exc:
            raise ConfigError(f"bad regex {item!r}: {exc}", source=source, line=line, key=key) from None
    return tuple(out)
