"""The package's layers, as the README's layout table draws them, hold: a lower layer never imports a higher one, and
nothing but the entry points imports the dev tools. Every import counts, also those inside functions."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "plugins" / "mirrorflow"
# Bottom up. Folders of one rank do not import each other.
RANK = {"rules": 0, "model": 1, "kafka": 2, "status": 2, "spark": 3, "jobs": 4, "entry": 5}
DEV = "dev"  # may import any layer; only the entry points (and the package's `__main__`) import it
ROOT = {"__init__", "errors", "__main__"}  # errors: the one exception tree, below every layer


def _layer(module: str) -> str | None:
    """The layer of `mirrorflow.<layer>.<module>`; None for the root modules."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 else None


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        module = node.module if isinstance(node, ast.ImportFrom) and node.level == 0 else None
        if module and module.split(".")[0] == "mirrorflow":
            # `from mirrorflow.jobs import stream` names a module; `from mirrorflow.jobs.stream import run` a member.
            found += [(node.lineno, f"{module}.{a.name}" if module.count(".") < 2 else module) for a in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("mirrorflow.")]
    return found


def _modules() -> list[tuple[str, Path]]:
    return [(".".join(("mirrorflow", *p.relative_to(PACKAGE).with_suffix("").parts)), p)
            for p in sorted(PACKAGE.rglob("*.py"))]


def allowed(importer: str, imported: str) -> bool:
    """Whether module `importer` may import `imported` (both dotted, inside the package)."""
    src, dst = _layer(importer), _layer(imported)
    if imported == "mirrorflow.errors" or importer == imported:
        return True
    if src is None:
        return importer == "mirrorflow.__main__" and dst == "entry"
    if dst is None:
        return imported.split(".")[1] in ROOT - {"__main__"}
    if dst == DEV:
        return src in ("entry", DEV)
    if src == DEV:
        return True
    return RANK[dst] < RANK[src] or dst == src


def test_every_module_sits_in_a_layer_folder() -> None:
    loose = [m for m, _ in _modules() if _layer(m) is None and m.split(".")[-1] not in ROOT]
    assert not loose, f"modules outside the layer folders: {loose}"
    assert {m.split(".")[1] for m, _ in _modules() if _layer(m)} == {*RANK, DEV}


def test_no_layer_imports_a_higher_one_and_only_entry_points_import_the_dev_tools() -> None:
    wrong = [f"{path.relative_to(PACKAGE.parent)}:{line}: {module} imports {imported}"
             for module, path in _modules() for line, imported in _imports(path)
             if not allowed(module.removesuffix(".__init__"), _module_of(imported))]
    assert not wrong, "\n".join(wrong)


def _module_of(imported: str) -> str:
    """`mirrorflow.jobs.stream.StreamOptions` -> `mirrorflow.jobs.stream` (a name imported from a module)."""
    parts = imported.split(".")
    if len(parts) > 1 and parts[1] in {*RANK, DEV}:
        return ".".join(parts[:3])
    return ".".join(parts[:2])


@pytest.mark.parametrize(("importer", "imported", "ok"), [
    ("mirrorflow.jobs.stream", "mirrorflow.rules.policy", True),
    ("mirrorflow.rules.policy", "mirrorflow.jobs.stream", False),
    ("mirrorflow.kafka.clients", "mirrorflow.status.metrics", False),
    ("mirrorflow.jobs.stream", "mirrorflow.dev.local", False),
    ("mirrorflow.entry.cli", "mirrorflow.dev.local", True),
    ("mirrorflow.dev.local_airflow", "mirrorflow.entry.deployment", True),
    ("mirrorflow.spark.stream_writer", "mirrorflow.errors", True),
])
def test_the_rule_itself(importer: str, imported: str, ok: bool) -> None:
    assert allowed(importer, imported) is ok


def test_a_spark_job_entry_point_loads_its_own_commands_not_the_whole_command_line() -> None:
    import subprocess
    import sys

    probe = ("import sys; import mirrorflow.entry.spark_jobs; print(sorted(m for m in sys.modules "
             "if m.startswith(('mirrorflow.entry.cli', 'mirrorflow.dev'))))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == ("['mirrorflow.entry.cli', 'mirrorflow.entry.cli.batch', 'mirrorflow.entry.cli.common', "
                              "'mirrorflow.entry.cli.flows']"), loaded
