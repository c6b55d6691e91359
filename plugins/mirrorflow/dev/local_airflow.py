"""The embedded Airflow: `airflow standalone` for this project, next to the local clusters.

Project-local and development-only, as Airflow means standalone to be: SQLite in `.mirrorflow/airflow`,
LocalExecutor, the repo's `dags/` and `plugins/`, no examples, one admin user whose generated password is
kept in `.mirrorflow/airflow/passwords.json` (mode 0600), never printed. `up` creates the Spark connection
`mirrorflow_spark` (Spark local mode) in Airflow's database once, so an operator sees and edits it under
Admin -> Connections. DAGs start unpaused, so the scheduler runs each enabled flow's stream as soon as the flow
is requested running.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirrorflow.dev import daemons
from mirrorflow.entry.deployment import SPARK_CONNECTION
from mirrorflow.errors import OperationalError
from mirrorflow.model import paths

USER = "admin"
SPARK_DESCRIPTION = "The Spark master mirrorflow's stream and batch tasks run against"
def port() -> int:
    """The embedded Airflow's port: `$MIRRORFLOW_AIRFLOW_PORT`, else 8080 (read at each use)."""
    return int(os.environ.get("MIRRORFLOW_AIRFLOW_PORT", "8080"))
START_TIMEOUT_S = 300.0
# SQLite lets one writer in at a time. A request that waited on the scheduler's write gave up after pysqlite's
# default 5 s and the API server answered HTTP 500: a run triggered on a busy 2-core host was refused so.
SQLITE_CONNECT_ARGS: dict[str, Any] = {"timeout": 60}


@dataclass(frozen=True)
class AirflowState:
    running: bool
    pid: int | None
    url: str
    home: Path
    new_password: str | None = None  # set only when `up` created the login


def home() -> Path:
    return paths.home() / "airflow"


def _pid_file() -> Path:
    return home() / "standalone.pid"


def _passwords_file() -> Path:
    return home() / "passwords.json"


def environment(project: Path, config_path: Path) -> dict[str, str]:
    """The environment the embedded Airflow and its tasks run with."""
    bin_dir = str(Path(sys.executable).parent)
    return {
        **os.environ,
        "AIRFLOW_HOME": str(home()),
        "AIRFLOW__CORE__DAGS_FOLDER": str(project / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(project / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(_passwords_file()),
        "AIRFLOW__API__PORT": str(port()),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port()}",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port()}/execution/",
        # On a busy 2-core host the API server took 6.8 s to move a starting task to running; the task's retry
        # after the default 5 s was refused (already running) and the task killed: a failed run on the first page.
        "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "30",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": f"{__name__}.SQLITE_CONNECT_ARGS",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC": f"{__name__}.SQLITE_CONNECT_ARGS",
        "MIRRORFLOW_CONFIG": str(config_path),
        "MIRRORFLOW_HOME": str(paths.home()),
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        "PYSPARK_PYTHON": sys.executable,
        # Airflow 3.3 reads ignore files with a pathspec pattern class that pathspec 1 deprecates: one warning in
        # every task log otherwise (mypy needs pathspec 1, so it cannot be pinned lower).
        "PYTHONWARNINGS": ",".join(filter(None, [os.environ.get("PYTHONWARNINGS"),
                                                 "ignore:GitWildMatchPattern:DeprecationWarning"])),
    }


def _running_pid() -> int | None:
    try:
        pid = int(_pid_file().read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def status() -> AirflowState:
    pid = _running_pid()
    return AirflowState(pid is not None and _answers(), pid, f"http://127.0.0.1:{port()}", home())


def up(project: Path, config_path: Path) -> AirflowState:
    """Start `airflow standalone` in the background unless it runs; return once its API answers."""
    home().mkdir(parents=True, exist_ok=True)
    created = _ensure_login()
    if _running_pid() is None:
        env = environment(project, config_path)
        if not (home() / "airflow.db").exists():
            _prepare_database(env)
        with open(home() / "standalone.log", "ab") as log:
            proc = daemons.keep(subprocess.Popen([str(Path(sys.executable).parent / "airflow"), "standalone"],
                                                 env=env, stdout=log, stderr=subprocess.STDOUT,
                                                 start_new_session=True, cwd=project))
        _pid_file().write_text(str(proc.pid))
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _answers():
            if proc.poll() is not None:
                raise OperationalError(f"airflow standalone exited ({proc.returncode}); "
                                       f"see {home() / 'standalone.log'}")
            if time.monotonic() > deadline:
                raise OperationalError(f"Airflow did not answer on port {port()} within {START_TIMEOUT_S:.0f} s; "
                                       f"see {home() / 'standalone.log'}")
            time.sleep(2)
    _ensure_spark_connection()
    state = status()
    return AirflowState(state.running, state.pid, state.url, state.home, created)


def token() -> str:
    """A JWT for the admin user, as `POST /auth/token` issues it."""
    password = json.loads(_passwords_file().read_text())[USER]
    status, reply = _call("POST", "/auth/token", {"username": USER, "password": password})
    if status not in (200, 201) or not reply:
        raise OperationalError(f"Airflow refused a token for {USER} (HTTP {status})")
    return str(reply["access_token"])


def api(method: str, path: str, body: Mapping[str, Any] | None = None) -> tuple[int, Any]:
    """One call to the embedded Airflow's REST API as the admin user: (HTTP status, JSON reply or None); a refusal's
    reply is its error body, so whoever asserts on the status can say why."""
    return _call(method, path, body, token())


def _call(method: str, path: str, body: Mapping[str, Any] | None = None, token: str | None = None
          ) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    request = urllib.request.Request(f"http://127.0.0.1:{port()}{path}", method=method, headers=headers,
                                     data=None if body is None else json.dumps(body).encode())
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:  # a loaded 2-core host: 30 s was once short
            text = reply.read()
            return reply.status, json.loads(text) if text else None
    except urllib.error.HTTPError as exc:
        text = exc.read()
        try:
            return exc.code, json.loads(text) if text else None
        except ValueError:
            return exc.code, text.decode(errors="replace")


def _prepare_database(env: Mapping[str, str]) -> None:
    """A new home: migrate the database and create `mirrorflow_spark` before the scheduler can run a task (a stream
    DAG of a flow requested running would otherwise submit with the Spark provider's default master, yarn)."""
    airflow = str(Path(sys.executable).parent / "airflow")
    steps = ([airflow, "db", "migrate"],
             [airflow, "connections", "add", SPARK_CONNECTION, "--conn-type", "spark", "--conn-host", "local[*]",
              "--conn-description", SPARK_DESCRIPTION])
    with open(home() / "standalone.log", "ab") as log:
        for step in steps:
            done = subprocess.run(step, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=300, check=False)
            if done.returncode != 0:
                raise OperationalError(f"`airflow {' '.join(step[1:3])}` failed ({done.returncode}); "
                                       f"see {home() / 'standalone.log'}")


def _ensure_spark_connection() -> None:
    """`mirrorflow_spark` in Airflow's database (not an environment variable, which the UI can neither show nor
    override); an operator's edit is kept."""
    wanted = {"connection_id": SPARK_CONNECTION, "conn_type": "spark", "host": "local[*]",
              "description": SPARK_DESCRIPTION}
    reply: int | str | None = None
    for _ in range(12):  # SQLite is busy while the scheduler starts its first tasks: HTTP 500 for a few seconds
        try:
            reply, _ = api("GET", f"/api/v2/connections/{SPARK_CONNECTION}")
            if reply == 404:
                reply, _ = api("POST", "/api/v2/connections", wanted)
        except (OperationalError, urllib.error.URLError, OSError) as exc:
            reply = str(exc)
        if reply in (200, 201, 409):
            return
        time.sleep(5)
    raise OperationalError(f"cannot create the Airflow connection {SPARK_CONNECTION} (HTTP {reply}); "
                           f"see {home() / 'standalone.log'}")


def down() -> AirflowState:
    """Stop the standalone's session: scheduler, dag-processor, API server, triggerer and their task workers
    (each task worker runs in a process group of its own, so the session, not the group, holds them all)."""
    pid = _running_pid()
    if pid is not None:
        _signal_session(pid, signal.SIGTERM)
        deadline = time.monotonic() + 60
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.5)
        # SIGKILL until none is left: a member may fork (a task worker, the stream it launches) between two looks.
        deadline = time.monotonic() + 30
        while _alive(pid) and time.monotonic() < deadline:
            _signal_session(pid, signal.SIGKILL)
            time.sleep(0.5)
    _pid_file().unlink(missing_ok=True)
    return status()


def session_processes(session: int) -> list[int]:
    """The processes of a session (Linux /proc): the standalone started one with start_new_session."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if fields[0] != "Z" and int(fields[3]) == session:  # after the command: state, ppid, pgrp, session
            out.append(int(stat.parent.name))
    return out


def _signal_session(session: int, sig: int) -> None:
    for member in session_processes(session):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(member, sig)


def _alive(session: int) -> bool:
    """Whether any process of the standalone's session (its jobs, their task workers) still runs."""
    return bool(session_processes(session))


def _ensure_login() -> str | None:
    """Create the admin login once; its password, only when it was just created."""
    if _passwords_file().exists():
        return None
    password = secrets.token_urlsafe(12)
    _passwords_file().touch(mode=0o600)
    _passwords_file().write_text(json.dumps({USER: password}))
    return password


def _answers() -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port()}/api/v2/monitor/health", timeout=5) as reply:
            return bool(reply.status == 200)
    except (urllib.error.URLError, OSError):
        return False
