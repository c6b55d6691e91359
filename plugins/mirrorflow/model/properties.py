"""Java `.properties` syntax, as `java.util.Properties.load` reads it, keeping line numbers.

Invariants:
  A. a key is read up to the first unescaped `=`, `:` or white space; the separator's surrounding
     white space is not part of the key or value;
  B. a line ending in an odd number of backslashes continues on the next line, whose leading white
     space is dropped;
  C. `#` and `!` start a comment only as the first non-blank character of a (non-continued) line;
  D. a key that appears twice keeps its last value (and both lines are reported).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mirrorflow.errors import ConfigError

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_WHITESPACE = " \t\f"


@dataclass(frozen=True)
class Entry:
    """One key/value pair and the line where its key starts."""

    key: str
    value: str
    line: int


def _logical_lines(text: str) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    physical = text.splitlines()
    i = 0
    while i < len(physical):
        start = i
        line = physical[i].lstrip(_WHITESPACE)
        i += 1
        if not line or line[0] in "#!":
            continue
        while _ends_with_odd_backslashes(line) and i <= len(physical):
            line = line[:-1]
            if i == len(physical):
                break
            line += physical[i].lstrip(_WHITESPACE)
            i += 1
        out.append((start + 1, line))
    return out


def _ends_with_odd_backslashes(line: str) -> bool:
    count = len(line) - len(line.rstrip("\\"))
    return count % 2 == 1


def _unescape(raw: str, *, source: str, line: int) -> str:
    out: list[str] = []
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch != "\\" or i + 1 >= len(raw):
            out.append(ch)
            i += 1
            continue
        nxt = raw[i + 1]
        if nxt == "u":
            digits = raw[i + 2 : i + 6]
            if len(digits) != 4 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise ConfigError(f"malformed \\uxxxx escape {raw[i:i + 6]!r}", source=source, line=line)
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
    return "".join(out)


def _split_key(line: str) -> tuple[str, str]:
    i = 0
    while i < len(line):
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "=:" or ch in _WHITESPACE:
            break
        i += 1
    key, rest = line[:i], line[i:]
    rest = rest.lstrip(_WHITESPACE)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_WHITESPACE)
    return key, rest


def parse(text: str, *, source: str = "<string>") -> list[Entry]:
    """Every entry of a properties text in file order (duplicates kept; the caller decides)."""
    entries = []
    for number, line in _logical_lines(text):
        raw_key, raw_value = _split_key(line)
        entries.append(Entry(_unescape(raw_key, source=source, line=number),
                             _unescape(raw_value, source=source, line=number), number))
    return entries


def load(path: str | Path) -> list[Entry]:
    """Read a properties file (UTF-8, as Java 9+ reads them); a missing file is a ConfigError."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("file not found", source=str(p)) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text ({exc.reason} at byte {exc.start})", source=str(p)) from None
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", source=str(p)) from None
    return parse(text, source=str(p))
