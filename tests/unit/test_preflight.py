"""Preflight rules against small real builds: real ELF files from zig, a real template, real directory trees.

Each negative test builds a build directory that is correct except for one deploy-time failure and asserts
that `snapllm preflight` reports exactly that failure and exits 1.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import zipfile
from pathlib import Path

import pytest

from snapllm_dev import sam
from snapllm_dev.footprint import kv_cache_bytes
from snapllm_dev.packaged_models import smollm2_path
from snapllm_dev.preflight.cli import main, run
from snapllm_dev.preflight.elf import is_elf, read_elf
from snapllm_dev.preflight.model import ModelProfile
from snapllm_dev.preflight.package import scan_package
from snapllm_dev.preflight.regions import region_of, region_problems
from snapllm_dev.preflight.rules import LWA_SNAPSTART_MIN_LAYER
from tests.support.paths import TEMPLATE as REPO_TEMPLATE

ROOT = Path(__file__).resolve().parents[2]

C_SOURCE = """
#include <string.h>
size_t snapllm_len(const char *s) { return strlen(s); }
"""
# strlcpy first appeared in glibc 2.38: linking it against 2.38 gives a real GLIBC_2.38 version need.
C_SOURCE_NEW_GLIBC = """
#include <string.h>
size_t snapllm_copy(char *d, const char *s, size_t n) { return strlcpy(d, s, n); }
"""


def _zig() -> Path:
    """The zig compiler from the `ziglang` package in the project's tools venv (`make tools` installs it)."""
    python = ROOT / ".tools" / "bin" / "python"
    result = subprocess.run(
        [
            str(python),
            "-c",
            "import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), 'zig'))",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(
            f"zig not found in {python}: run 'make tools' (it installs layers/llama-cpp/toolchain.txt)"
        )
    return Path(result.stdout.strip())


@pytest.fixture(scope="module")
def libs(tmp_path_factory) -> dict[str, Path]:
    """Real shared objects: good aarch64, x86_64, aarch64 needing GLIBC_2.38, aarch64 needing libgomp."""
    out = tmp_path_factory.mktemp("libs")
    zig = _zig()
    (out / "ok.c").write_text(C_SOURCE)
    (out / "new.c").write_text(C_SOURCE_NEW_GLIBC)
    (out / "gomp.c").write_text("int omp_get_max_threads(void) { return 1; }\n")
    (out / "uses.c").write_text(
        "int omp_get_max_threads(void);\nint threads(void) { return omp_get_max_threads(); }\n"
    )
    jobs = {
        "arm64": ["-target", "aarch64-linux-gnu.2.34", "ok.c"],
        "x86_64": ["-target", "x86_64-linux-gnu.2.34", "ok.c"],
        "glibc238": ["-target", "aarch64-linux-gnu.2.38", "new.c"],
        "libgomp.so.1": ["-target", "aarch64-linux-gnu.2.34", "-Wl,-soname,libgomp.so.1", "gomp.c"],
    }
    env = {**os.environ, "ZIG_GLOBAL_CACHE_DIR": os.environ.get("ZIG_GLOBAL_CACHE_DIR", str(_zig_cache()))}

    def compile_all(names: list[str]) -> None:
        procs = {
            name: subprocess.Popen(
                [str(zig), "cc", "-shared", "-fPIC", "-O2", "-o", name, *jobs[name]],
                cwd=out,
                env=env,
                stderr=subprocess.PIPE,
                text=True,
            )
            for name in names
        }
        for name, proc in procs.items():
            _, err = proc.communicate()
            assert proc.returncode == 0, f"zig cc {name} failed: {err}"

    compile_all(["arm64", "x86_64", "glibc238", "libgomp.so.1"])
    # A library that links the stub above: DT_NEEDED libgomp.so.1, as an OpenMP build of ggml would have.
    jobs["needs_gomp"] = ["-target", "aarch64-linux-gnu.2.34", "uses.c", "libgomp.so.1"]
    compile_all(["needs_gomp"])
    return {name: out / name for name in jobs}


def _zig_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "zig"


TEMPLATE = """\
AWSTemplateFormatVersion: "2010-09-09"
Transform: AWS::Serverless-2016-10-31
Parameters:
  Architecture:
    Type: String
    Default: arm64
Globals:
  Function:
    Runtime: {runtime}
    Architectures:
      - !Ref Architecture
Resources:
{layers}
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: Fn
      Handler: app.handler
      MemorySize: 2048
{props}
      Layers:
{layer_refs}
"""
GOOD_PROPS = """\
      AutoPublishAlias: live
      SnapStart:
        ApplyOn: PublishedVersions
      EphemeralStorage:
        Size: 512"""


def make_build(
    root: Path,
    *,
    runtime: str = "python3.13",
    props: str = GOOD_PROPS,
    layers: dict[str, dict[str, bytes | Path | int]] | None = None,
    code: dict[str, bytes | Path | int] | None = None,
) -> Path:
    """Writes a build directory like `sam build`'s: template.yaml plus one folder per function and layer.

    File values: bytes (content), a Path (copied) or an int (a sparse file of that many bytes).
    """
    layers = {"Lib": {"python/lib_ok.py": b"X = 1\n"}} if layers is None else layers
    code = {"app.py": b"def handler(event, context):\n    return event\n"} if code is None else code
    layer_yaml = "".join(
        f"  {name}:\n    Type: AWS::Serverless::LayerVersion\n    Properties:\n      ContentUri: {name}\n"
        for name in layers
    )
    refs = "".join(f"        - !Ref {name}\n" for name in layers) or "        []\n"
    root.mkdir(parents=True, exist_ok=True)
    (root / "template.yaml").write_text(
        TEMPLATE.format(runtime=runtime, layers=layer_yaml, props=props, layer_refs=refs.rstrip("\n"))
    )
    for folder, files in {"Fn": code, **layers}.items():
        for rel, value in files.items():
            path = root / folder / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(value, Path):
                path.write_bytes(value.read_bytes())
            elif isinstance(value, int):
                with path.open("wb") as handle:
                    handle.truncate(value)
            else:
                path.write_bytes(value)
        (root / folder).mkdir(exist_ok=True)
    return root


def run_preflight(build: Path, capsys, *extra: str) -> tuple[int, list[str]]:
    code = main([str(build), "--no-zip", *extra])
    out = capsys.readouterr()
    lines = (out.out + out.err).splitlines()
    return code, [line for line in lines if line.startswith("ERROR")]


def test_good_build_passes_and_prints_the_summary(tmp_path, capsys, libs):
    build = make_build(tmp_path, layers={"Lib": {"python/pkg/lib/libok.so": libs["arm64"]}})
    code = main([str(build)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "ERROR" not in out
    row = next(line for line in out.splitlines() if line.startswith("Fn "))
    assert row.split()[:4] == ["Fn", "arm64", "2048", "MB"]
    assert "yes" in row
    assert out.rstrip().endswith("preflight: OK")


def test_wrong_architecture_so_is_caught(tmp_path, capsys, libs):
    build = make_build(tmp_path, layers={"Lib": {"python/pkg/lib/libx.so": libs["x86_64"]}})
    code, errors = run_preflight(build, capsys)
    assert code == 1
    assert errors == ["ERROR Fn: Lib/python/pkg/lib/libx.so is x86_64, function is arm64 (aarch64)"]


def test_architecture_comes_from_parameter_overrides(tmp_path, capsys, libs):
    build = make_build(
        tmp_path, layers={"Lib": {"python/libx.so": libs["x86_64"], "python/liba.so": libs["arm64"]}}
    )
    code, errors = run_preflight(build, capsys, "--parameter-overrides", "Architecture=x86_64")
    assert code == 1
    assert errors == ["ERROR Fn: Lib/python/liba.so is aarch64, function is x86_64 (x86_64)"]


def test_too_new_glibc_symbol_is_caught(tmp_path, capsys, libs):
    build = make_build(tmp_path, code={"app.py": b"", "native/libnew.so": libs["glibc238"]})
    code, errors = run_preflight(build, capsys)
    assert code == 1
    assert errors == ["ERROR Fn: Fn/native/libnew.so needs GLIBC_2.38, the runtime's glibc has GLIBC_2.34"]


def test_library_the_runtime_lacks_is_caught_unless_the_loader_finds_it(tmp_path, capsys, libs):
    build = make_build(tmp_path, layers={"Lib": {"python/libuses.so": libs["needs_gomp"]}})
    message = "ERROR Fn: Lib/python/libuses.so needs libgomp.so.1, which is not in the runtime or on the "
    message += "loader's path"
    assert run_preflight(build, capsys) == (1, [message])

    # Shipped beside it is not enough without a RUNPATH: the loader searches LD_LIBRARY_PATH (/opt/lib).
    beside = {"python/libuses.so": libs["needs_gomp"], "python/libgomp.so.1": libs["libgomp.so.1"]}
    assert run_preflight(make_build(tmp_path / "beside", layers={"Lib": beside}), capsys) == (1, [message])
    in_opt_lib = {"python/libuses.so": libs["needs_gomp"], "lib/libgomp.so.1": libs["libgomp.so.1"]}
    assert run_preflight(make_build(tmp_path / "opt_lib", layers={"Lib": in_opt_lib}), capsys) == (0, [])


def test_oversized_layer_is_caught(tmp_path, capsys):
    # A sparse file: 251 MB apparent size, as Lambda counts it, without writing 251 MB.
    build = make_build(tmp_path, layers={"Big": {"python/blob.dat": 251 * 1024 * 1024}})
    code, errors = run_preflight(build, capsys)
    assert code == 1
    assert len(errors) == 1
    assert errors[0].startswith(
        "ERROR Fn: unzipped size 251.0 MB exceeds Lambda's 250.0 MB (Fn 0.0 MB, Big 251.0 MB)"
    )


def test_more_than_five_layers_is_caught(tmp_path, capsys):
    layers = {f"L{i}": {f"python/m{i}.py": b""} for i in range(6)}
    code, errors = run_preflight(make_build(tmp_path, layers=layers), capsys)
    assert code == 1
    assert errors == ["ERROR Fn: 6 layers, Lambda allows 5"]


def test_external_layer_counts_as_a_layer_and_is_noted(tmp_path, capsys):
    build = make_build(tmp_path, layers={f"L{i}": {f"python/m{i}.py": b""} for i in range(5)})
    template = (build / "template.yaml").read_text()
    arn = "arn:${AWS::Partition}:lambda:${AWS::Region}:753240598075:layer:LambdaAdapterLayerArm64:25"
    (build / "template.yaml").write_text(template + f"        - !Sub '{arn}'\n")
    code = main([str(build), "--no-zip"])
    out = capsys.readouterr().out
    assert code == 1
    assert "ERROR Fn: 6 layers, Lambda allows 5" in out
    assert f"NOTE Fn: layer {arn} is not built here: its size is not counted" in out


def test_layer_without_python_prefix_is_caught(tmp_path, capsys):
    build = make_build(tmp_path, layers={"Flat": {"mymodule.py": b""}})
    code, errors = run_preflight(build, capsys)
    assert code == 1
    assert errors == ["ERROR Fn: layer Flat has no python/ folder: Python will not import from it"]


def test_snapstart_on_python311_is_caught(tmp_path, capsys):
    code, errors = run_preflight(make_build(tmp_path, runtime="python3.11"), capsys)
    assert code == 1
    assert errors == ["ERROR Fn: SnapStart needs python3.12 or later, runtime is python3.11"]


def test_snapstart_configuration_rules(tmp_path, capsys):
    props = """\
      SnapStart:
        ApplyOn: PublishedVersions
      EphemeralStorage:
        Size: 1024
      ProvisionedConcurrencyConfig:
        ProvisionedConcurrentExecutions: 1
      FileSystemConfigs:
        - Arn: arn:aws:elasticfilesystem:us-east-1:123456789012:access-point/fsap-1
          LocalMountPath: /mnt/efs"""
    code, errors = run_preflight(make_build(tmp_path, props=props), capsys)
    assert code == 1
    assert errors == [
        "ERROR Fn: SnapStart needs EphemeralStorage 512 MB, it is 1024 MB",
        "ERROR Fn: SnapStart cannot be used with EFS (FileSystemConfigs)",
        "ERROR Fn: SnapStart cannot be used with provisioned concurrency",
        "ERROR Fn: SnapStart applies to published versions only: set AutoPublishAlias, invoke the alias",
    ]


def test_durable_rules(tmp_path, capsys):
    props = """\
      AutoPublishAlias: live
      DurableConfig:
        ExecutionTimeout: 31622401
        RetentionPeriodInDays: 91"""
    code, errors = run_preflight(make_build(tmp_path, runtime="python3.12", props=props), capsys)
    assert code == 1
    assert errors == [
        "ERROR Fn: durable functions need python3.13 or later, runtime is python3.12",
        "ERROR Fn: DurableConfig.ExecutionTimeout is 31622401, allowed 1..31622400",
        "ERROR Fn: DurableConfig.RetentionPeriodInDays is 91, allowed 1..90",
    ]

    ok = make_build(tmp_path / "ok", props=props.replace("31622401", "900").replace("91", "14"))
    assert run_preflight(ok, capsys) == (0, [])


def test_web_adapter_settings_that_fail_silently(tmp_path, capsys):
    props = (
        GOOD_PROPS
        + """
      Environment:
        Variables:
          AWS_LAMBDA_EXEC_WRAPPER: /opt/bootstrap
          AWS_LWA_INVOKE_MODE: response-stream"""
    )
    code = main([str(make_build(tmp_path, props=props)), "--no-zip"])
    out = capsys.readouterr().out
    assert code == 1
    assert "ERROR Fn: AWS_LWA_INVOKE_MODE 'response-stream' is not buffered or response_stream" in out
    assert "NOTE Fn: SnapStart under Lambda Web Adapter: snapshot_restore_py hooks never run" in out

    fixed = make_build(tmp_path / "ok", props=props.replace("response-stream", "response_stream"))
    assert run_preflight(fixed, capsys) == (0, [])


def test_model_weights_in_a_package_are_caught(tmp_path, capsys):
    build = make_build(
        tmp_path,
        code={"app.py": b"", "model.gguf": b"GGUF\x03\x00\x00\x00"},
        # Renamed weights are still caught by their magic bytes.
        layers={"Lib": {"python/data/blob": b"GGUF\x03\x00\x00\x00" + b"\x00" * 64}},
    )
    code, errors = run_preflight(build, capsys)
    assert code == 1
    assert errors == [
        "ERROR Fn: Fn/model.gguf looks like model weights: load the model from S3 instead",
        "ERROR Fn: Lib/python/data/blob looks like model weights: load the model from S3 instead",
    ]


def test_developer_tooling_in_a_layer_is_caught(tmp_path, capsys):
    build = make_build(
        tmp_path,
        layers={
            "Lib": {"python/snapllm/__init__.py": b"", "python/snapllm_dev/cli.py": b""},
            "Other": {"python/snapllm/__init__.py": b""},
        },
    )
    code, errors = run_preflight(build, capsys)
    assert code == 1
    assert errors == [
        "ERROR Fn: Lib ships snapllm_dev, the developer tooling: the layer should copy src/snapllm only"
    ]


@pytest.mark.parametrize(
    ("tag", "problem"),
    [
        ("cp313-cp313-manylinux_2_17_aarch64", None),
        ("py3-none-any", None),
        ("py2-none-any\nTag: py3-none-any", None),
        ("cp313-cp313-manylinux_2_17_x86_64\nTag: cp313-cp313-manylinux_2_17_aarch64", None),
        ("cp39-abi3-manylinux_2_28_aarch64", None),
        ("cp313-cp313-manylinux_2_17_x86_64", "for manylinux_2_17_x86_64"),
        ("cp313-cp313-manylinux_2_35_aarch64", "for manylinux_2_35_aarch64"),
        ("cp313-cp313-musllinux_1_2_aarch64", "for musllinux_1_2_aarch64"),
        ("cp312-cp312-manylinux_2_17_aarch64", "for cp312, the runtime is Python 3.13"),
    ],
)
def test_wheel_tags_are_checked(tmp_path, capsys, tag, problem):
    wheel = f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: {tag}\n".encode()
    build = make_build(tmp_path, layers={"Lib": {"python/dep-1.0.dist-info/WHEEL": wheel}})
    code, errors = run_preflight(build, capsys)
    if problem is None:
        assert (code, errors) == (0, [])
    else:
        assert code == 1
        assert len(errors) == 1
        assert errors[0].startswith(f"ERROR Fn: Lib: wheel dep-1.0 is {problem}")


def test_overridden_files_are_listed_without_failing(tmp_path, capsys):
    build = make_build(
        tmp_path,
        layers={
            "First": {"python/typing_extensions.py": b"A = 1\n", "python/only_first.py": b""},
            "Second": {"python/typing_extensions.py": b"A = 2\n"},
        },
        code={"app.py": b"", "only_first.py": b""},
    )
    code = main([str(build), "--no-zip"])
    out = capsys.readouterr().out
    assert code == 0
    assert "NOTE Fn: layer Second overrides typing_extensions from First (1 files, 1 differ)" in out
    assert "NOTE Fn: function code shadows only_first from First (1 files, identical)" in out


def test_missing_build_directory_fails_with_one_line(tmp_path, capsys):
    assert main([str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ERROR preflight: ") and "run 'make build'" in err


def test_elf_reader_on_real_libraries(libs):
    info = read_elf(libs["glibc238"])
    assert info.machine == "aarch64"
    assert "libc.so.6" in info.needed
    assert "GLIBC_2.38" in info.versions["libc.so.6"]
    assert info.max_version("GLIBC") == (2, 38)
    assert read_elf(libs["x86_64"]).machine == "x86_64"
    assert read_elf(libs["needs_gomp"]).needed[0] == "libgomp.so.1"
    assert is_elf(libs["arm64"]) and not is_elf(Path(__file__))


def test_zip_size_matches_a_real_zip(tmp_path):
    root = tmp_path / "pkg"
    (root / "python").mkdir(parents=True)
    (root / "python" / "text.py").write_text("x = 1\n" * 50_000)
    (root / "python" / "random.bin").write_bytes(os.urandom(100_000))
    package = scan_package(root)
    real = tmp_path / "real.zip"
    with zipfile.ZipFile(real, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for rel in sorted(package.files):
            archive.write(root / rel, rel)
    # The counting sink writes data descriptors (it cannot seek), 16 bytes per file more than a seekable zip.
    assert package.zipped_bytes() == real.stat().st_size + 16 * len(package.files)
    assert package.zipped_bytes() < package.unzipped_bytes


def test_unreadable_template_fails_with_one_line(tmp_path, capsys):
    (tmp_path / "template.yaml").write_text("Resources: [unclosed\n")
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ERROR preflight: cannot read")


def test_registers_as_a_snapllm_subcommand(tmp_path, capsys):
    import argparse

    from snapllm_dev.preflight.arguments import add_parser

    parser = argparse.ArgumentParser(prog="snapllm")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["preflight", str(make_build(tmp_path, runtime="python3.11")), "--no-zip"])
    assert args.implementation == "snapllm_dev.preflight.cli"
    assert run(args) == 1
    assert "ERROR Fn: SnapStart needs python3.12 or later" in capsys.readouterr().out


def test_snapstart_hooks_on_a_web_adapter_layer_older_than_v1_1_0_are_refused(tmp_path, capsys):
    props = (
        GOOD_PROPS
        + """
      Environment:
        Variables:
          AWS_LAMBDA_EXEC_WRAPPER: /opt/bootstrap
          AWS_LWA_INVOKE_MODE: response_stream
          AWS_LWA_SNAPSTART_BEFORE_CHECKPOINT_PATH: /_snapllm/snapstart/before-checkpoint
          AWS_LWA_SNAPSTART_AFTER_RESTORE_PATH: /_snapllm/snapstart/after-restore"""
    )

    def with_adapter_layer(root: Path, version: int) -> Path:
        build = make_build(root, props=props)
        template = build / "template.yaml"
        adapter = (
            "        - !Sub arn:${AWS::Partition}:lambda:${AWS::Region}:753240598075:layer:"
            f"LambdaAdapterLayerArm64:{version}"
        )
        template.write_text(
            template.read_text().replace("        - !Ref Lib", f"        - !Ref Lib\n{adapter}")
        )
        return build

    code, errors = run_preflight(with_adapter_layer(tmp_path / "old", 28), capsys)
    assert code == 1
    assert errors == [
        "ERROR Fn: AWS_LWA_SNAPSTART_BEFORE_CHECKPOINT_PATH and AWS_LWA_SNAPSTART_AFTER_RESTORE_PATH need "
        "Lambda Web Adapter v1.1.0 (layer version 30) or later, but the layer is version 28: the warm-up "
        "never reaches the snapshot and restored environments are not re-seeded"
    ]
    assert run_preflight(with_adapter_layer(tmp_path / "ok", 30), capsys) == (0, [])


def test_the_template_default_web_adapter_layer_has_the_snapstart_hooks():
    template = sam.load(REPO_TEMPLATE, pseudo_parameters={})
    stream = template.function("StreamFunction")
    adapter = [
        layer.partial for layer in stream.layers if isinstance(layer, sam.Unresolved) and layer.partial
    ]
    assert adapter and adapter[0].endswith(f":{LWA_SNAPSTART_MIN_LAYER}")


DURABLE_PROPS = """\
      AutoPublishAlias: live
      DurableConfig:
        ExecutionTimeout: 900"""
URL_PROPS = GOOD_PROPS + "\n      FunctionUrlConfig:\n        AuthType: AWS_IAM"


@pytest.mark.parametrize(
    ("props", "region", "feature"),
    [
        (DURABLE_PROPS, "eu-west-1", "durable functions"),
        (GOOD_PROPS, "ap-east-2", "SnapStart"),
        (URL_PROPS, "il-central-1", "Function URLs"),
    ],
)
def test_a_region_without_a_feature_the_function_uses_is_refused(tmp_path, capsys, props, region, feature):
    build = make_build(tmp_path, props=props)
    code, errors = run_preflight(build, capsys, "--region", region)
    assert code == 1
    assert len(errors) == 1 and errors[0].startswith(f"ERROR Fn: uses {feature}, which {region} is not known")
    assert "checked 2026-11-25" in errors[0] and "us-east-2" in errors[0]
    assert run_preflight(build, capsys, "--region", "us-east-2") == (0, [])


def test_the_region_defaults_to_samconfig_and_it_offers_every_feature_the_template_uses(tmp_path, capsys):
    assert region_of(ROOT / "samconfig.toml") == "us-east-2"
    for environment in ("six-vcpu", "dev", "prod"):
        assert region_of(ROOT / "samconfig.toml", environment) == "us-east-2"
    functions = sam.load(REPO_TEMPLATE, pseudo_parameters={}).functions
    assert {fn.name for fn in functions if region_problems(fn, "ap-south-2")} == {
        "AgentFunction",
        "StreamFunction",
    }
    assert [problem for fn in functions for problem in region_problems(fn, "us-east-2")] == []
    config = tmp_path / "samconfig.toml"
    config.write_text('version = 0.1\n[default.global.parameters]\nregion = "ca-west-1"\n')
    build = make_build(tmp_path / "build", props=URL_PROPS)
    code, errors = run_preflight(build, capsys, "--config-file", str(config))
    assert code == 1 and errors[0].startswith("ERROR Fn: uses Function URLs, which ca-west-1 is not known")


MODEL_PROPS = GOOD_PROPS + "\n      Environment:\n        Variables:\n          SNAPLLM_MODEL_KEY: m.gguf"


def _notes(build: Path, capsys, *extra: str) -> list[str]:
    assert main([str(build), "--no-zip", *extra]) == 0
    return [line for line in capsys.readouterr().out.splitlines() if "WARNING" in line]


def test_a_model_whose_init_would_not_fit_snapstarts_limit_is_warned_about(tmp_path, capsys):
    build = make_build(tmp_path, props=MODEL_PROPS)
    gib = 1024**3
    # 8 GiB at the stated 50 MiB/s: 164 s of reading alone, over the 130 s a 3 s timeout leaves.
    (warning,) = _notes(build, capsys, "--model-bytes", str(8 * gib))
    assert "may not fit its 130 s limit" in warning and "at 50 MiB/s from S3" in warning
    assert "raise InferenceTimeout to" in warning
    assert _notes(build, capsys, "--model-bytes", str(2 * gib)) == []
    # A faster stated rate fits; a measured warm-up that scales with the model's size does not.
    assert _notes(build, capsys, "--model-bytes", str(8 * gib), "--s3-mib-per-s", "200") == []
    bench = tmp_path / "bench.json"
    lifecycle = {"import_s": 0.2, "model_load_s": 0.15, "warm_up_s": 1.0}
    bench.write_text(json.dumps({"model_bytes": 100 * 1024 * 1024, "lifecycle": lifecycle}))
    (warning,) = _notes(
        build, capsys, "--model-bytes", str(8 * gib), "--s3-mib-per-s", "200", "--bench", str(bench)
    )
    assert "81.9 s warm-up" in warning
    # Not a model function (no SNAPLLM_MODEL_KEY): nothing to estimate.
    assert _notes(make_build(tmp_path / "plain"), capsys, "--model-bytes", str(8 * gib)) == []


@pytest.mark.parametrize(
    ("shape", "per_token_per_layer"),
    [
        # SmolLM2-135M: 9 heads of 64 over 576, 3 of them for keys and values.
        (
            {"attention.head_count": 9, "attention.head_count_kv": 3, "embedding_length": 576},
            3 * (64 + 64) * 2,
        ),
        # Gemma 3's keys and values are 256 wide whatever the embedding (1152 over 4 heads would be 288).
        (
            {
                "attention.head_count": 4,
                "attention.head_count_kv": 1,
                "embedding_length": 1152,
                "attention.key_length": 256,
            },
            (256 + 256) * 2,
        ),
        # Without grouped heads every head keeps its own keys and values.
        ({"attention.head_count": 8, "embedding_length": 512}, 8 * (64 + 64) * 2),
    ],
)
def test_the_kv_cache_estimate_follows_the_models_attention_shape(shape, per_token_per_layer):
    metadata = {"general.architecture": "llama", "llama.block_count": "30"}
    metadata |= {f"llama.{key}": str(value) for key, value in shape.items()}
    assert kv_cache_bytes(metadata, 2048) == 30 * 2048 * per_token_per_layer
    # Unreadable numbers give no estimate rather than a wrong one.
    assert kv_cache_bytes({"general.architecture": "llama", "llama.block_count": "many"}, 2048) == 0


def test_a_large_models_memory_is_its_loads_peak_of_two_copies():
    gib = 1024**3
    large = ModelProfile(Path("m.gguf"), 3 * gib, "llama", {}, "none", kv_cache_bytes=gib // 4)
    # Repacked weights are read while the memfd holds them: two copies at once, above what it serves with.
    assert large.footprint.load_peak_bytes == 6 * gib + 256 * 1024**2 > large.footprint.serving_bytes
    assert large.memory_mb == 6 * 1024 + 256
    small = ModelProfile(Path("m.gguf"), 100 * 1024**2, "llama", {}, "none", kv_cache_bytes=gib // 4)
    assert small.memory_mb * 1024**2 >= small.footprint.serving_bytes > small.footprint.load_peak_bytes


def test_a_users_model_is_reported_with_its_family_and_the_memory_it_needs(tmp_path, capsys):
    model = str(smollm2_path())
    roomy = make_build(tmp_path / "roomy", props=MODEL_PROPS)
    assert main([str(roomy), "--no-zip", "--model", model]) == 0
    out = capsys.readouterr().out
    assert "llama, family: generic, thinking: none, tool_calls: json; chat template: the file's" in out
    needed = int(out.split("the model needs about ")[1].split(" MB")[0])
    # 98 MB of weights, a 2048-token KV cache (30 layers x 3 KV heads x 64 x 2 x 2 bytes), buffers, runtime.
    assert 400 < needed < 600 and "of its 2048 MB" in out
    tight = make_build(tmp_path / "tight", props=MODEL_PROPS)
    template = tight / "template.yaml"
    template.write_text(template.read_text().replace("MemorySize: 2048", "MemorySize: 256"))
    code, errors = run_preflight(tight, capsys, "--model", model)
    assert code == 1 and len(errors) == 1
    assert errors[0].startswith(f"ERROR Fn: the model needs about {needed} MB")
    # The cache of recent conversations' prefix states takes a sixteenth of the function's memory by default:
    # the least memory holds the model and that share of itself.
    assert "16.0 MB more for recent conversations' prefix states" in errors[0]
    assert f"InferenceMemorySize to at least {math.ceil(needed * 16 / 15)} " in errors[0]
    template.write_text(template.read_text().replace("MemorySize: 256", f"MemorySize: {needed + 20}"))
    assert run_preflight(tight, capsys, "--model", model)[0] == 1  # the model fits, the cache's share not
    template.write_text(
        template.read_text().replace(f"MemorySize: {needed + 20}", f"MemorySize: {needed + 40}")
    )
    assert run_preflight(tight, capsys, "--model", model)[0] == 0
    # A longer context needs a larger KV cache.
    assert main([str(roomy), "--no-zip", "--model", model, "--n-ctx", "8192"]) == 0
    longer = int(capsys.readouterr().out.split("the model needs about ")[1].split(" MB")[0])
    assert longer > needed + 100


def test_the_declared_prompt_prefixes_states_count_toward_the_memory(tmp_path, capsys):
    model = str(smollm2_path())
    build = make_build(tmp_path / "build", props=MODEL_PROPS)
    assert main([str(build), "--no-zip", "--model", model, "--prompt-prefixes", ""]) == 0
    plain = int(capsys.readouterr().out.split("the model needs about ")[1].split(" MB")[0])
    # By default, the template's: the agent's own prompts (snapllm:agent), a few hundred tokens.
    assert main([str(build), "--no-zip", "--model", model]) == 0
    out = capsys.readouterr().out
    agent_tokens = int(out.split("declared prompt prefixes (")[1].split(" tokens")[0])
    assert 60 < agent_tokens < 400
    system = "You answer questions about tides. " + "Cite the tide tables for every answer you give. " * 300
    prefixes = tmp_path / "prefixes.json"
    prefixes.write_text(json.dumps([{"messages": [{"role": "system", "content": system}]}]))
    assert main([str(build), "--no-zip", "--model", model, "--prompt-prefixes", str(prefixes)]) == 0
    out = capsys.readouterr().out
    declared = int(out.split("the model needs about ")[1].split(" MB")[0])
    tokens = int(out.split("declared prompt prefixes (")[1].split(" tokens")[0])
    # SmolLM2's state holds 30 layers x 3 KV heads x 64 x 2 (keys, values) x 2 bytes a token: 22.5 KiB.
    assert tokens > 2700 and declared - plain == pytest.approx(tokens * 23_040 / 2**20, abs=1)
    # A file the function would refuse at init is refused here, naming it.
    prefixes.write_text('{"messages": []}')
    assert main([str(build), "--no-zip", "--model", model, "--prompt-prefixes", str(prefixes)]) == 2
    assert "--prompt-prefixes" in capsys.readouterr().err
