"""The tests mirror the packages: test modules import what they share from ``tests.support`` and never from
one another, and nothing in ``tests/support`` is a test.

A test module that imports another one runs that module's fixtures and tests under a second name, and ties
the two together so that moving one breaks the other; a test function in ``tests/support`` is collected
into every module that imports it. The rules are read from the source with :mod:`ast`, so a module that
would fail to import is checked too.
"""

from __future__ import annotations

import ast
import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
SUPPORT = "support"


def module_name(path: Path, root: Path) -> str:
    """``tests/integration/test_x.py`` -> ``tests.integration.test_x``; a package's ``__init__`` is the
    package."""
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(tree: ast.Module, name: str, is_package: bool) -> list[tuple[int, str, list[str]]]:
    """Each import statement as (line, the module named, the names taken from it), relative imports
    resolved against the module ``name``."""
    found: list[tuple[int, str, list[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".") if is_package else name.split(".")[:-1]
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.append((node.lineno, base, [alias.name for alias in node.names]))
    return found


def layout_violations(root: Path) -> list[str]:
    """Every import of a test module from a module under ``root`` and every test defined in its support
    package, each as ``module: what is wrong``."""
    files = {module_name(path, root): path for path in sorted(root.rglob("*.py"))}
    support = f"{root.name}.{SUPPORT}"
    violations: list[str] = []
    for name, path in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for line, target, names in imported(tree, name, path.name == "__init__.py"):
            # ``from pkg import mod`` imports the module ``pkg.mod`` when there is one.
            modules = [f"{target}.{each}" for each in names if f"{target}.{each}" in files] or [target]
            for module in modules:
                if module in files and module != support and not module.startswith(f"{support}."):
                    violations.append(f"{name}: line {line} imports the test module {module}")
        if name == support or name.startswith(f"{support}."):
            violations.extend(f"{name}: defines the test {test}" for test in _tests_defined(tree))
    return violations


def _tests_defined(tree: ast.Module) -> list[str]:
    """What pytest would collect from a module: ``test*`` functions, and ``Test*`` classes."""
    return [
        node.name
        for node in tree.body
        if (isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"))
        or (isinstance(node, ast.ClassDef) and node.name.startswith("Test"))
    ]


def test_no_test_module_imports_another_and_support_holds_no_tests():
    violations = layout_violations(TESTS)
    assert not violations, "\n".join(violations)


def test_every_support_module_says_what_it_plays():
    modules = sorted((TESTS / SUPPORT).glob("*.py"))
    assert modules, "tests/support is missing"
    silent = [path.name for path in modules if not ast.get_docstring(ast.parse(path.read_text()))]
    assert not silent, f"tests/support modules without a docstring: {silent}"


def _tree(root: Path, files: dict[str, str]) -> Path:
    for relative, text in {"__init__.py": "", "support/__init__.py": "", **files}.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (
            {
                "integration/test_a.py": "from tests.integration.test_b import helper\n",
                "integration/test_b.py": "",
            },
            "tests.integration.test_a: line 1 imports the test module tests.integration.test_b",
        ),
        (
            {"integration/test_a.py": "from .servers import Server\n", "integration/servers.py": ""},
            "tests.integration.test_a: line 1 imports the test module tests.integration.servers",
        ),
        (
            {"integration/conftest.py": "from tests import conftest\n", "conftest.py": ""},
            "tests.integration.conftest: line 1 imports the test module tests.conftest",
        ),
        (
            {"unit/test_a.py": "def f():\n    import tests.unit.test_b\n", "unit/test_b.py": ""},
            "tests.unit.test_a: line 2 imports the test module tests.unit.test_b",
        ),
        (
            {"support/servers.py": "from tests.conftest import REPO\n", "conftest.py": ""},
            "tests.support.servers: line 1 imports the test module tests.conftest",
        ),
        (
            {"support/servers.py": "def test_server_starts():\n    pass\n"},
            "tests.support.servers: defines the test test_server_starts",
        ),
    ],
    ids=[
        "absolute",
        "relative",
        "from-package",
        "inside-a-function",
        "support-imports-a-test",
        "support-test",
    ],
)
def test_the_layout_check_names_the_module_and_the_import(tmp_path, files, expected):
    assert layout_violations(_tree(tmp_path / "tests", files)) == [expected]


def test_imports_of_support_and_of_the_code_under_test_are_allowed(tmp_path):
    root = _tree(
        tmp_path / "tests",
        {
            "support/servers.py": '"""A server."""\nfrom tests.support.paths import REPO\n',
            "support/paths.py": "REPO = 1\n",
            "integration/test_a.py": "from tests.support.servers import Server\nfrom tests import support\n"
            "from snapllm.errors import SnapllmError\nimport json\n",
            "conftest.py": "from tests.support import paths\n",
        },
    )
    assert layout_violations(root) == []


def _is_mark(node: ast.AST, name: str) -> bool:
    """Whether ``node`` is ``pytest.mark.<name>`` (or ``mark.<name>``)."""
    return (
        isinstance(node, ast.Attribute)
        and node.attr == name
        and isinstance(node.value, ast.Attribute | ast.Name)
        and getattr(node.value, "attr", getattr(node.value, "id", None)) == "mark"
    )


def test_the_second_run_of_make_test_collects_every_module_with_a_test_marked_alone():
    marked = sorted(
        str(path.relative_to(TESTS.parent))
        for path in TESTS.rglob("test_*.py")
        if any(_is_mark(node, "alone") for node in ast.walk(ast.parse(path.read_text())))
    )
    makefile = (TESTS.parent / "Makefile").read_text().splitlines()
    (listed,) = [line.split(":=", 1)[1].split() for line in makefile if line.startswith("ALONE_TESTS :=")]
    assert marked and sorted(listed) == marked


# --- The order of the parallel run --------------------------------------------------------------------------


def test_the_recorded_durations_name_test_modules_that_exist():
    durations = json.loads((TESTS / "durations.json").read_text())
    missing = [module for module in durations if not (TESTS.parent / module).is_file()]
    assert not missing, f"tests/durations.json names modules that are gone: {missing}"
    assert all(isinstance(seconds, int) and seconds >= 0 for seconds in durations.values())


def test_the_durations_script_sums_each_modules_setup_call_and_teardown():
    script = runpy.run_path(str(TESTS.parent / "scripts/test_durations.py"))
    log = [
        "12.50s setup    tests/integration/test_a.py::test_one[x]",
        "3.20s call     tests/integration/test_a.py::test_one[x]",
        "0.40s teardown tests/integration/test_a.py::test_two@keyed-server",
        "20.00s call     tests/unit/test_b.py::TestB::test_three",
        "(8 durations < 0.005s hidden.  Use -vv to show these durations.)",
    ]
    assert script["module_seconds"](log) == {"tests/unit/test_b.py": 20, "tests/integration/test_a.py": 16}


def test_a_group_of_modules_runs_on_one_worker(tmp_path):
    # What `make test` relies on to start a shared server once (`--dist loadgroup`): two modules of one
    # group, whose tests the workers would otherwise share out one by one.
    suite, seen = tmp_path / "suite", tmp_path / "seen"
    suite.mkdir()
    seen.mkdir()
    for name in ("a", "b"):
        (suite / f"test_{name}.py").write_text(
            "import os, pathlib, pytest\n"
            "pytestmark = pytest.mark.xdist_group('shared')\n"
            "@pytest.mark.parametrize('n', range(4))\n"
            "def test_worker(n):\n"
            f"    path = pathlib.Path(os.environ['SEEN']) / f'{name}{{n}}'\n"
            "    path.write_text(os.environ['PYTEST_XDIST_WORKER'])\n"
        )
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup"],
        cwd=suite,
        env={**os.environ, "SEEN": str(seen)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    workers = {path.name: path.read_text() for path in seen.iterdir()}
    assert len(workers) == 8 and len(set(workers.values())) == 1, workers
