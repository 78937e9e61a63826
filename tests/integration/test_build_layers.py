"""The layer builds SAM runs (`BuildMethod: makefile`), exercised the way SAM runs them.

The SnapllmLayer build is real and quick (pip resolves aarch64 wheels from PyPI or its cache); the
llama.cpp cross-compile takes minutes and runs in `make build` / `make test-arm64`, not here.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

from snapllm.preflight.package import scan_package
from snapllm.preflight.rules import Target, check_elf, check_sizes, check_weights, check_wheels
from snapllm.preflight.template import Function, Layer

ROOT = Path(__file__).resolve().parents[2]


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~ \[]", line, maxsplit=1)[0].lower().replace("_", "-") for line in requirements}


def test_snapllm_layer_requirements_follow_pyproject_minus_boto3():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    layer = [
        line.strip()
        for line in (ROOT / "layers/snapllm/requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert _names(layer) == _names(project) - {"boto3"}
    assert sorted(layer) == sorted(dep for dep in project if not dep.startswith("boto3"))


def test_snapllm_layer_links_the_package_source():
    link = ROOT / "layers/snapllm/snapllm"
    assert link.is_symlink()
    assert link.resolve() == (ROOT / "src/snapllm").resolve()


def test_snapllm_layer_builds_for_arm64_the_way_sam_runs_it(tmp_path):
    # SAM copies the ContentUri folder (following symlinks) to a scratch dir and runs make there.
    scratch = tmp_path / "scratch"
    shutil.copytree(ROOT / "layers/snapllm", scratch, symlinks=False)
    artifacts = tmp_path / "SnapllmLayer"
    env = {**os.environ, "ARTIFACTS_DIR": str(artifacts), "SNAPLLM_ARCH": "arm64"}
    result = subprocess.run(
        ["make", "--makefile", str(scratch / "Makefile"), "build-SnapllmLayer"],
        cwd=scratch,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]

    python = artifacts / "python"
    assert (python / "snapllm" / "__init__.py").is_file()
    assert not list(python.rglob("__pycache__"))
    assert not (python / "boto3").exists()
    layer = scan_package(artifacts, "SnapllmLayer")
    fn = Function(
        name="Fn",
        properties={"Runtime": "python3.13", "Architectures": ["arm64"]},
        path=None,
        layers=(Layer("SnapllmLayer", artifacts),),
    )
    target = Target(function=fn, code=None, layers=[layer])
    # pydantic-core is the compiled part: it must have come as an aarch64 wheel.
    assert {elf.machine for elf in layer.elves} == {"aarch64"}
    assert any(tag.distribution.startswith("pydantic_core") for tag in layer.wheel_tags)
    for rule in (check_elf, check_wheels, check_sizes, check_weights):
        assert rule(target) == [], rule.__name__


def test_llama_layer_build_rejects_an_unknown_architecture(tmp_path):
    result = subprocess.run(
        ["bash", str(ROOT / "layers/llama-cpp/build.sh"), "sparc", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert "unknown architecture 'sparc'" in result.stderr


def test_llama_layer_makefile_defaults_to_graviton():
    makefile = (ROOT / "layers/llama-cpp/Makefile").read_text()
    assert re.search(r"^SNAPLLM_ARCH \?= arm64$", makefile, re.MULTILINE)
    script = (ROOT / "layers/llama-cpp/build.sh").read_text()
    assert "-DGGML_CPU_ARM_ARCH=armv8.2-a+dotprod+fp16" in script
    assert "-DGGML_NATIVE=OFF" in script and "-DGGML_OPENMP=OFF" in script
    assert "-DGGML_AVX512=OFF" in script
