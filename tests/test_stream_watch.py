"""The stream DAG's watch: how long it waits, and what a cluster that does not answer does to it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.airflow


@pytest.fixture(autouse=True)
def stream_watch(airflow_home: Path) -> Any:
    """The module, imported once Airflow's home is set: Airflow reads its configuration at its first import."""
    from mirrorflow.entry import stream_watch

    return stream_watch


def _events(trigger: Any) -> list[dict[str, Any]]:
    async def collect() -> list[dict[str, Any]]:
        return [e.payload async for e in trigger.run()]
    return asyncio.run(collect())


def test_the_watch_rides_out_brief_failures_to_decide_and_then_launches(
        monkeypatch: pytest.MonkeyPatch, stream_watch: Any) -> None:
    answers: list[Any] = [OSError("target down"), OSError("target down"), (True, "requested running", None)]

    def decide(*_: object) -> Any:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer
    monkeypatch.setattr(stream_watch, "launch_decision", decide)
    trigger = stream_watch.FlowLaunchTrigger("mirror.properties", "a->b", until=time.time() + 60, poll_s=0.01)
    assert _events(trigger) == [{"launch": True, "why": "requested running"}]


def test_the_watch_fails_once_deciding_has_failed_for_its_limit(
        monkeypatch: pytest.MonkeyPatch, stream_watch: Any) -> None:
    def decide(*_: object) -> Any:
        raise OSError("target down")
    monkeypatch.setattr(stream_watch, "launch_decision", decide)
    monkeypatch.setattr(stream_watch, "UNDECIDED_S", 0.2)
    trigger = stream_watch.FlowLaunchTrigger("mirror.properties", "a->b", until=time.time() + 60, poll_s=0.01)
    began = time.monotonic()
    [event] = _events(trigger)
    assert event["error"] and not event["launch"] and "target down" in event["why"]
    assert 0.2 <= time.monotonic() - began < 5


def test_the_watch_ends_without_launching_at_its_end(
        monkeypatch: pytest.MonkeyPatch, stream_watch: Any) -> None:
    monkeypatch.setattr(stream_watch, "launch_decision", lambda *_: (False, "flow stopped", None))
    trigger = stream_watch.FlowLaunchTrigger("mirror.properties", "a->b", until=time.time() + 0.1, poll_s=0.02)
    assert _events(trigger) == [{"launch": False, "why": "flow stopped"}]
