"""How a stream query's watch ended, from the failed query's error text: a pure reading, tested on its own."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mirrorflow.errors import FATAL, RECREATED


@dataclass(frozen=True)
class QueryEnd:
    """How the driver's watch of a query ended, which says what the supervisor does next: return (`stopped`), start
    a query again (`lease regained`), from a new Spark checkpoint at the positions (`new checkpoint`), stop the
    flow with one line (`fatal`), or restart from the checkpoint after a pause (`failed`)."""

    kind: Literal["stopped", "lease regained", "new checkpoint", "fatal", "failed"]
    detail: str = ""  # the fatal error's line, or the failed query's first line


def query_end(error: str) -> QueryEnd:
    """A failed query's end, from its error's text: the markers of a fatal error (errors.FATAL) and of re-created
    source topics (errors.RECREATED) cross Spark's JVM as text inside its exception."""
    at = error.find(FATAL)
    if at >= 0:
        return QueryEnd("fatal", error[at + len(FATAL):].splitlines()[0].strip())
    if RECREATED in error:
        return QueryEnd("new checkpoint", _first_line(error))
    return QueryEnd("failed", _first_line(error))


def _first_line(error: str) -> str:
    for line in error.splitlines():
        if line.strip():
            return line.strip()[:300]
    return "unknown error"
