"""The package boundaries hold: the protocol runs without llama.cpp and the AWS SDKs, the engine knows no
OpenAI type, the runtime never imports the developer tooling, and a broken boundary fails naming its chain.

import-linter's contracts (pyproject.toml) are checked on the real tree, then on a copy of it with one
forbidden import added, where the failure must name the whole import chain.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """import-linter over the packages under ``root/src``, with ``root/pyproject.toml``'s contracts."""
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-logo", "--no-cache", "--config", str(root / "pyproject.toml")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def tree_copy(tmp_path: Path) -> Path:
    """The project's packages and contracts, copied where a test may break them."""
    shutil.copytree(REPO / "src", tmp_path / "src", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_every_contract_is_kept():
    result = _lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def _add_import(root: Path, module: str, line: str) -> None:
    path = root / "src" / Path(*module.split(".")).with_suffix(".py")
    path.write_text(path.read_text() + f"\n{line}\n")


def test_the_protocol_importing_llama_cpp_fails_naming_the_chain(tree_copy):
    # Indirectly: the protocol's limits reach llama.cpp through the engine's model module.
    _add_import(tree_copy, "snapllm.protocol.limits", "import snapllm.engine.model  # noqa: E402,F401")
    result = _lint_imports(tree_copy)
    assert result.returncode == 1
    report = result.stdout
    assert "the OpenAI protocol runs without llama.cpp and AWS SDKs BROKEN" in report
    assert "snapllm.protocol.limits -> snapllm.engine.model" in report
    assert "snapllm.engine.model -> llama_cpp" in report


def test_the_protocol_importing_boto3_fails(tree_copy):
    _add_import(tree_copy, "snapllm.protocol.completions.chat", "import boto3  # noqa: E402,F401")
    report = _lint_imports(tree_copy).stdout
    assert "snapllm.protocol.completions.chat -> boto3" in report


def test_the_engine_importing_the_protocol_fails(tree_copy):
    _add_import(tree_copy, "snapllm.engine.decode", "import snapllm.protocol.requests  # noqa: E402,F401")
    report = _lint_imports(tree_copy).stdout
    assert "the engine knows no OpenAI type BROKEN" in report
    assert "snapllm.engine.decode -> snapllm.protocol.requests" in report


def test_the_runtime_importing_the_tooling_fails(tree_copy):
    _add_import(tree_copy, "snapllm.inference.runtime", "import snapllm_dev.sam  # noqa: E402,F401")
    report = _lint_imports(tree_copy).stdout
    assert "the runtime never imports the developer tooling BROKEN" in report
    assert "snapllm.inference.runtime -> snapllm_dev.sam" in report


def test_the_router_reaching_the_serving_class_fails(tree_copy):
    # As the token routes' module once did, for the chat count's type.
    _add_import(
        tree_copy,
        "snapllm.protocol.model_routes.tokens",
        "import snapllm.protocol.serving  # noqa: E402,F401",
    )
    report = _lint_imports(tree_copy).stdout
    assert "the router and the thin invoke client never load the serving stack BROKEN" in report
    assert "snapllm.protocol.model_routes.tokens -> snapllm.protocol.serving" in report


def test_the_protocol_imports_without_llama_cpp_or_the_aws_sdks():
    """At run time too: importing every protocol module loads neither llama.cpp (nor numpy) nor boto3 (the
    router's function has no llama.cpp layer). botocore is not asked about: Powertools' metrics, which the
    protocol's metrics module uses, import it themselves."""
    protocol = REPO / "src/snapllm/protocol"
    modules = sorted(
        "snapllm.protocol." + ".".join(path.relative_to(protocol).with_suffix("").parts)
        for path in protocol.rglob("*.py")
        if path.stem != "__init__"
    )
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'llama_cpp', 'boto3', 'numpy'}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip() == "[]"
