"""Processes a launcher starts to outlive the call that started them: brokers, the embedded Airflow, sample
traffic. Each is stopped later by its pid (a pid file), often by another process.

The handle stays here rather than being dropped while its process runs, which Python reports (a ResourceWarning
from `Popen.__del__`, and the pytest suite treats every warning as an error); and a daemon this process stopped is
reaped here if its stopper has not done so.

Bound: one handle per daemon this process started whose end it has not seen; an ended one leaves at the next
`keep`.
"""

from __future__ import annotations

import subprocess

_kept: list[subprocess.Popen[bytes]] = []


def keep(proc: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
    """Holds `proc` until it ends; returns it."""
    _kept[:] = [p for p in _kept if p.poll() is None]
    _kept.append(proc)
    return proc
