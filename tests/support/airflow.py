"""The repo's DAGs as Airflow parses them for one deployment (Airflow imported only when used)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from support.clusters import REPO


@contextlib.contextmanager
def deployment(config_path: Path) -> Iterator[Any]:
    """The repo's DAGs as Airflow parses them for a deployment using `config_path`.

    The config stays selected for the block: `dag.test()` parses the DAG file again when it serializes it.
    """
    from airflow.dag_processing.dagbag import DagBag

    saved = os.environ.get("MIRRORFLOW_CONFIG")
    os.environ["MIRRORFLOW_CONFIG"] = str(config_path)
    try:
        yield DagBag(dag_folder=str(REPO / "dags"))
    finally:
        if saved is None:
            del os.environ["MIRRORFLOW_CONFIG"]
        else:
            os.environ["MIRRORFLOW_CONFIG"] = saved
