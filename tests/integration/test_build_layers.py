"""The layer builds SAM runs (`BuildMethod: makefile`), exercised the way SAM runs them.

The SnapllmLayerArm64 build is real and quick (pip resolves aarch64 wheels from PyPI or its cache); the
llama.cpp cross-compile takes minutes and runs in `make build` / `make test-arm64`, not here (only the zig it
would use, and the placeholder that `make build ARCH=...` writes for the other architecture).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from snapllm_dev import sam
from snapllm_dev.preflight.package import scan_package
from snapllm_dev.preflight.rules import (
    LAYER_PLACEHOLDER,
    Target,
    check_elf,
    check_sizes,
    check_weights,
    check_wheels,
)
from snapllm_dev.preflight.template import Function, Layer

ROOT = Path(__file__).resolve().parents[2]
# The user's environment as SAM passes it on, without what `make build` adds.
PLAIN_ENV = {k: v for k, v in os.environ.items() if k != "SNAPLLM_ARCH"}


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
    artifacts = tmp_path / "SnapllmLayerArm64"
    env = {**PLAIN_ENV, "ARTIFACTS_DIR": str(artifacts)}
    result = subprocess.run(
        ["make", "--makefile", str(scratch / "Makefile"), "build-SnapllmLayerArm64"],
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
    layer = scan_package(artifacts, "SnapllmLayerArm64")
    fn = Function(
        name="Fn",
        properties={"Runtime": "python3.13", "Architectures": ["arm64"]},
        path=None,
        layers=(Layer("SnapllmLayerArm64", artifacts),),
    )
    target = Target(function=fn, code=None, layers=[layer])
    # pydantic-core is the compiled part: it must have come as an aarch64 wheel.
    assert {elf.machine for elf in layer.elves} == {"aarch64"}
    assert any(tag.distribution.startswith("pydantic_core") for tag in layer.wheel_tags)
    # So is llguidance, the constraint engine: its aarch64 wheel, built for a glibc no newer than Amazon
    # Linux 2023's 2.34.
    (guidance,) = [tag for tag in layer.wheel_tags if tag.distribution.startswith("llguidance")]
    glibc = re.fullmatch(r"manylinux_2_(\d+)_aarch64", guidance.platform)
    assert glibc and int(glibc.group(1)) <= 34, guidance
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


def test_each_layer_resource_has_a_makefile_target_for_its_own_architecture():
    template = sam.load(ROOT / "template.yaml")
    built = {
        name: resource
        for name, resource in template.resources(*sam.LAYER_TYPES)
        if (resource.get("Metadata") or {}).get("BuildMethod") == "makefile"
    }
    assert set(built) == {"SnapllmLayerArm64", "SnapllmLayerX86", "LlamaCppLayerArm64", "LlamaCppLayerX86"}
    for name, resource in built.items():
        arch = resource["Metadata"]["BuildArchitecture"]
        makefile = (ROOT / resource["Properties"]["ContentUri"] / "Makefile").read_text()
        # The target passes its architecture to the shared recipe: `$(call layer,arm64...)`.
        assert re.search(rf"^build-{name}:\n\t\$\(call layer,{arch}\b", makefile, re.MULTILINE), name


def _cpu_flags(arch: str) -> list[str]:
    script = f'source "{ROOT}/layers/llama-cpp/cpu-flags.sh"; cpu_flags {arch}'
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout.split()


def test_llama_layer_targets_graviton2_and_avx2():
    assert "-DGGML_CPU_ARM_ARCH=armv8.2-a+dotprod+fp16" in _cpu_flags("arm64")
    assert {"-DGGML_AVX2=ON", "-DGGML_AVX512=OFF", "-DGGML_NATIVE=OFF"} <= set(_cpu_flags("x86_64"))
    assert "-DGGML_NATIVE=OFF" in _cpu_flags("arm64")
    assert "-DGGML_OPENMP=OFF" in (ROOT / "layers/llama-cpp/build.sh").read_text()


def test_the_local_build_uses_the_layers_cpu_flags_not_the_machines_own():
    # Local runs and tests execute the x86_64 layer's kernels, patched as the layers' are, so recorded
    # answers hold on any machine.
    setup = (ROOT / "scripts/setup.sh").read_text()
    assert "source layers/llama-cpp/cpu-flags.sh" in setup and 'cpu_flags "$(uname -m)"' in setup
    assert "patch_sources" in setup and "patch_sources" in (ROOT / "layers/llama-cpp/build.sh").read_text()
    patches = b"".join(
        path.read_bytes() for path in sorted((ROOT / "layers/llama-cpp/patches").glob("*.patch"))
    )
    digest = hashlib.sha256(patches).hexdigest()[:16]
    assert (
        (ROOT / ".venv/.llama-cpp-build")
        .read_text()
        .strip()
        .endswith(
            "-"
            + hashlib.sha256(
                (
                    " ".join(_cpu_flags("x86_64")) + " -DGGML_OPENMP=OFF -DLLAMA_BUILD_TESTS=OFF "
                    f"-DLLAMA_BUILD_EXAMPLES=OFF -DLLAVA_BUILD=OFF {digest}"
                ).encode()
            ).hexdigest()[:12]
        )
    )


def test_zig_is_pinned_once_beside_the_layer():
    pins = [
        line
        for path in (ROOT / "requirements").glob("*.txt")
        for line in path.read_text().splitlines()
        if line.lower().startswith("ziglang")
    ]
    assert pins == [], "requirements/ includes layers/llama-cpp/toolchain.txt instead of pinning zig again"
    assert (
        "-r ../layers/llama-cpp/toolchain.txt" in (ROOT / "requirements/tools.txt").read_text().splitlines()
    )
    toolchain = (ROOT / "layers/llama-cpp/toolchain.txt").read_text()
    assert re.search(r"^ziglang==\d+(\.\d+)+$", toolchain, re.MULTILINE)


def test_the_llama_layer_build_brings_its_own_zig(tmp_path):
    # SAM runs the layer's Makefile from a scratch copy, in the user's shell: nothing of .tools on PATH.
    scratch = tmp_path / "scratch"
    shutil.copytree(ROOT / "layers/llama-cpp", scratch)
    path = os.pathsep.join(
        d for d in os.environ["PATH"].split(os.pathsep) if not d.startswith(str(ROOT / ".tools"))
    )
    result = subprocess.run(
        ["bash", "./with-zig.sh", "bash", "-c", '"$SNAPLLM_BUILD_PYTHON" -m ziglang version'],
        cwd=scratch,
        env={**PLAIN_ENV, "PATH": path},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    pin = re.search(r"^ziglang==(\S+)$", (scratch / "toolchain.txt").read_text(), re.MULTILINE)
    assert pin and result.stdout.strip() == pin.group(1)


@pytest.mark.parametrize(
    ("folder", "target"),
    [("layers/snapllm", "SnapllmLayerArm64"), ("layers/llama-cpp", "LlamaCppLayerArm64")],
)
def test_make_build_of_the_other_architecture_writes_a_placeholder_that_preflight_refuses(
    tmp_path, folder, target
):
    scratch = tmp_path / "scratch"
    shutil.copytree(ROOT / folder, scratch, symlinks=False)
    artifacts = tmp_path / target
    result = subprocess.run(
        ["make", "--makefile", str(scratch / "Makefile"), f"build-{target}"],
        cwd=scratch,
        env={**PLAIN_ENV, "ARTIFACTS_DIR": str(artifacts), "SNAPLLM_ARCH": "x86_64"},
        capture_output=True,
        text=True,
        check=False,
        timeout=30,  # a placeholder, not a build
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert [p.name for p in artifacts.iterdir()] == [LAYER_PLACEHOLDER]
    fn = Function(
        name="Fn",
        properties={"Runtime": "python3.13", "Architectures": ["arm64"]},
        layers=(Layer(target, artifacts),),
    )
    findings = check_sizes(Target(function=fn, code=None, layers=[scan_package(artifacts, target)]))
    assert [f.message for f in findings] == [
        f"layer {target} is a placeholder: the build was for another architecture than arm64 "
        "(make build ARCH=arm64 or plain sam build builds it)"
    ]
