"""`make test`: the suite in three pytest sessions side by side, since it mostly waits on brokers and streams.

    PYTHONPATH=tests .venv/bin/python -m support.lanes [pytest arguments for every lane]

Each lane of LANES runs its modules with its shared clusters moved by its MIRRORFLOW_TEST_PORT_OFFSET (every other
port a test opens belongs to one module, so a module runs in one lane only); the first lane runs the rest of the
suite. The first lane prints as it goes, the others' output follows it; the exit status is the first non-zero one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Long modules with no port in common with the rest, and each lane's port offset: 28092.. and 26092.. for their
# alpha, beta, gamma (the benchmarks also use 26xxx: never both at once; 27xxx is test_tls's). Sized from a clean
# clone's durations (stop 48: 2,035 s for the rest beside 2,316 for the first two lanes' modules in one lane).
LANES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("3000", ("tests/test_stream_faults.py", "tests/test_stream_guarantees.py")),
    ("1000", ("tests/test_drills.py", "tests/test_batch.py", "tests/test_runbooks.py")),
)


def main(args: list[str]) -> int:
    pytest = str(Path(sys.executable).parent / "pytest")
    work = Path(tempfile.mkdtemp(prefix="mirrorflow-lanes-"))
    began = time.monotonic()
    others: list[tuple[tuple[str, ...], Path, subprocess.Popen[bytes]]] = []
    try:
        for n, (offset, modules) in enumerate(LANES, start=2):
            log = work / f"lane-{n}.log"
            with open(log, "w") as out:
                others.append((modules, log, subprocess.Popen(
                    [pytest, *modules, "-p", "no:cacheprovider", f"--basetemp={work / f'lane-{n}'}", *args],
                    cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                    env={**os.environ, "MIRRORFLOW_TEST_PORT_OFFSET": offset})))
        first = subprocess.run(
            [pytest, *(f"--ignore={m}" for _, modules in LANES for m in modules), *args], cwd=REPO,
            env={**os.environ, "MIRRORFLOW_TEST_PORT_OFFSET": "0"}).returncode
        first_s = time.monotonic() - began
        codes = [first]
        for modules, log, proc in others:
            codes.append(proc.wait())
            print(f"\n===== lane {len(codes)} ({', '.join(modules)}) =====", flush=True)
            sys.stdout.write(log.read_text())
    except BaseException:
        for _, _, proc in others:
            proc.terminate()
            proc.wait()
        raise
    print(f"\nlanes: first {first_s:.0f} s, all {time.monotonic() - began:.0f} s, exits {codes}")
    rc = next((c for c in codes if c), 0)
    if rc == 0:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"lanes: the other lanes' files are in {work}")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
