"""Kafka protocol primitives used by the internal topics' records (MM2's and mirrorflow's): big-endian."""

from __future__ import annotations

import struct


def string(text: str) -> bytes:
    """A STRING: int16 length, then UTF-8 bytes."""
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def read_string(buf: bytes, at: int) -> tuple[str, int]:
    """The STRING at `at`, and the position just past it."""
    (n,) = struct.unpack_from(">h", buf, at)
    if n < 0 or at + 2 + n > len(buf):
        raise ValueError(f"malformed string at byte {at}")
    return buf[at + 2: at + 2 + n].decode(), at + 2 + n
