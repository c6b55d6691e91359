"""`make test`: the suite in two pytest sessions side by side, since it mostly waits on brokers and streams.

    PYTHONPATH=tests .venv/bin/python -m support.lanes [pytest arguments for both lanes]

The second lane runs SECOND_LANE's modules with its shared clusters moved by MIRRORFLOW_TEST_PORT_OFFSET (every
other port a test opens belongs to one module, so a module runs in one lane only); the first runs the rest. The
first lane prints as it goes, the second's output follows it; the exit status is the first non-zero one.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from support import ports

REPO = Path(__file__).resolve().parents[2]
# Long modules with no port in common with the rest: about half the suite's time (a clean clone on 2 cores: 30 min
# for these beside 27 for the rest; before the stream faults moved here, 19 beside 37).
SECOND_LANE = ("tests/test_drills.py", "tests/test_stream_faults.py", "tests/test_stream_guarantees.py",
               "tests/test_takeover.py")
PORT_OFFSET = str(ports.SECOND_LANE_OFFSET)  # support.ports: where the second lane's shared clusters are


def main(args: list[str]) -> int:
    pytest = str(Path(sys.executable).parent / "pytest")
    work = Path(tempfile.mkdtemp(prefix="mirrorflow-lanes-"))
    began = time.monotonic()
    second_log = work / "second-lane.log"
    with open(second_log, "w") as out:
        second = subprocess.Popen(
            [pytest, *SECOND_LANE, "-p", "no:cacheprovider", f"--basetemp={work / 'second'}", *args],
            cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, "MIRRORFLOW_TEST_PORT_OFFSET": PORT_OFFSET})
        try:
            first = subprocess.run(
                [pytest, *(f"--ignore={m}" for m in SECOND_LANE), *args], cwd=REPO,
                env={**os.environ, "MIRRORFLOW_TEST_PORT_OFFSET": "0"}).returncode
            first_s = time.monotonic() - began
            second_rc = second.wait()
        except BaseException:
            second.terminate()
            second.wait()
            raise
    print(f"\n===== second lane ({', '.join(SECOND_LANE)}) =====", flush=True)
    sys.stdout.write(second_log.read_text())
    print(f"\nlanes: first {first_s:.0f} s ({_ended(first)}), both {time.monotonic() - began:.0f} s "
          f"(second {_ended(second_rc)})")
    rc = first or second_rc
    if rc == 0:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"lanes: the second lane's files are in {work}")
    return rc


def _ended(rc: int) -> str:
    """How a lane's pytest ended: its exit code, or the signal that killed it (then it printed no summary)."""
    if rc < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-rc).name}"
    return f"exit {rc}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
