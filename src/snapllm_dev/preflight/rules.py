"""The deploy-time rules: each takes one function with its packages and returns the problems it finds.

A rule never raises for a problem in the build; it returns :class:`Finding` objects, one clear line each.
``error`` findings fail the preflight; ``note`` findings are reported for a person to judge.

Example:
    >>> from snapllm_dev.preflight.rules import check_snapstart
    >>> [f.message for f in check_snapstart(function)]  # doctest: +SKIP
    ['SnapStart needs python3.12 or later, runtime is python3.11']
"""

from __future__ import annotations

import math
import posixpath
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from snapllm.engine.settings import PREFIX_CACHE_SHARE, prefix_cache_bytes
from snapllm_dev.preflight.elf import format_version, parse_version
from snapllm_dev.preflight.package import Package
from snapllm_dev.preflight.regions import region_problems
from snapllm_dev.preflight.template import Function

if TYPE_CHECKING:  # reading a model needs llama.cpp, which the rules themselves do not
    from snapllm_dev.preflight.model import ModelProfile

#: Amazon Linux 2023 (the python3.12+ runtimes) ships glibc 2.34.
MAX_GLIBC = (2, 34)
#: AL2023's libstdc++ is GCC 11's: symbol versions up to GLIBCXX_3.4.29 and CXXABI_1.3.13.
MAX_GLIBCXX = (3, 4, 29)
MAX_CXXABI = (1, 3, 13)
#: Libraries every Lambda runtime of AL2023 provides; anything else must ship in the package.
RUNTIME_LIBRARIES = frozenset(
    {
        "libc.so.6",
        "libm.so.6",
        "libpthread.so.0",
        "libdl.so.2",
        "librt.so.1",
        "libutil.so.1",
        "libresolv.so.2",
        "ld-linux-aarch64.so.1",
        "ld-linux-x86-64.so.2",
        "libgcc_s.so.1",
        "libstdc++.so.6",
    }
)
ELF_MACHINE = {"arm64": "aarch64", "x86_64": "x86_64"}
#: Where Lambda unpacks code and layers, and the directories of its LD_LIBRARY_PATH inside them.
TASK_ROOT = "/var/task"
LAYER_ROOT = "/opt"
LIBRARY_PATH = ("/var/task", "/var/task/lib", "/opt/lib")
#: Lambda's quota on a function's code plus all its layers, unzipped (250 MB).
MAX_UNZIPPED_BYTES = 250 * 1024 * 1024
MAX_LAYERS = 5
#: What the layers' Makefiles write in place of a layer that `make build ARCH=...` skipped (the other
#: architecture's: SAM builds every layer of the template, whatever its Condition).
LAYER_PLACEHOLDER = "snapllm-placeholder.txt"
SNAPSTART_MIN_PYTHON = (3, 12)
DURABLE_MIN_PYTHON = (3, 13)
DURABLE_TIMEOUT_RANGE = (1, 31_622_400)
DURABLE_RETENTION_RANGE = (1, 90)
#: The layer version of Lambda Web Adapter v1.1.0, the first release that calls the SnapStart hook paths.
LWA_SNAPSTART_MIN_LAYER = 30
#: The top-level package of the developer tooling, which no function ships.
TOOLING_PACKAGE = "snapllm_dev"
LWA_SNAPSTART_HOOKS = ("AWS_LWA_SNAPSTART_BEFORE_CHECKPOINT_PATH", "AWS_LWA_SNAPSTART_AFTER_RESTORE_PATH")
_LWA_LAYER_VERSION = re.compile(r":layer:LambdaAdapterLayer(?:Arm64|X86):(\d+)$")


@dataclass(frozen=True)
class Finding:
    """One problem (``error``) or observation (``note``) about one resource."""

    severity: Literal["error", "note"]
    resource: str
    message: str

    def __str__(self) -> str:
        return f"{self.severity.upper()} {self.resource}: {self.message}"


MiB = 1024 * 1024
#: SnapStart's init limit when a version is published: the greater of this and the function's timeout.
SNAPSTART_MIN_INIT_S = 130
MAX_TIMEOUT_S = 900
#: The variable that makes a function a model function (it loads the model at init).
MODEL_KEY_VARIABLE = "SNAPLLM_MODEL_KEY"
#: The size of the model behind the default load figures (SmolLM2-135M-Instruct Q4_1).
REFERENCE_MODEL_BYTES = 98 * MiB


@dataclass(frozen=True)
class ModelInit:
    """What publishing a model function's SnapStart version runs: the model's download at a stated S3 rate,
    then the imports, the load and the warm-up as measured (``snapllm bench coldstart --json``), the last
    two scaled from the measured model's size to this one's."""

    model_bytes: int
    s3_mib_per_s: float
    import_s: float
    load_s: float
    warm_up_s: float

    @classmethod
    def measured(
        cls, model_bytes: int, *, s3_mib_per_s: float = 50.0, bench: Mapping[str, Any] | None = None
    ) -> ModelInit:
        """``bench``: the JSON of ``snapllm bench coldstart --json`` (its ``model_bytes`` and ``lifecycle``);
        without it, the figures measured with SmolLM2-135M Q4_1 (98 MB) on a 2-core x86_64 machine: imports
        0.17 s, load 0.15 s, and no warm-up."""
        if bench is not None:
            life = bench["lifecycle"]
            scale = model_bytes / float(bench["model_bytes"])
            import_s, load_s, warm_up_s = life["import_s"], life["model_load_s"], life["warm_up_s"]
        else:
            scale = model_bytes / REFERENCE_MODEL_BYTES
            import_s, load_s, warm_up_s = 0.17, 0.15, 0.0
        return cls(
            model_bytes, s3_mib_per_s, float(import_s), float(load_s) * scale, float(warm_up_s) * scale
        )

    @property
    def download_s(self) -> float:
        return self.model_bytes / (self.s3_mib_per_s * MiB)

    @property
    def seconds(self) -> float:
        return self.import_s + self.download_s + self.load_s + self.warm_up_s


@dataclass(frozen=True)
class Target:
    """What a rule looks at: a function and its built packages (function code first, then layers in order)."""

    function: Function
    code: Package | None
    layers: Sequence[Package]
    #: The region the stack deploys to, when known (``--region``, samconfig.toml).
    region: str | None = None
    #: The init a SnapStart version of a model function runs, when the model is known (``--model``).
    model_init: ModelInit | None = None
    #: The model itself, when it is known (``--model``): its family, chat checks and memory.
    model: ModelProfile | None = None

    @property
    def packages(self) -> list[Package]:
        return ([self.code] if self.code else []) + list(self.layers)


Rule = Callable[[Target], list[Finding]]


def check_elf(target: Target) -> list[Finding]:
    """Every ELF file is for the function's architecture and needs only what the runtime or package has."""
    findings = []
    fn = target.function
    want = ELF_MACHINE.get(fn.architecture, fn.architecture)
    # The deployed file system: the function at /var/task, every layer merged into /opt.
    deployed = {f"{_mount(target, pkg)}/{rel}" for pkg in target.packages for rel in pkg.files}
    for pkg in target.packages:
        for elf in pkg.elves:
            rel = elf.path.relative_to(pkg.root).as_posix()
            where = f"{pkg.name}/{rel}"
            if elf.machine != want:
                message = f"{where} is {elf.machine}, function is {fn.architecture} ({want})"
                findings.append(_error(fn, message))
                # The remaining checks describe a loadable file; a foreign one is already fatal.
                continue
            for prefix, limit, what in (
                ("GLIBC", MAX_GLIBC, "glibc"),
                ("GLIBCXX", MAX_GLIBCXX, "libstdc++"),
                ("CXXABI", MAX_CXXABI, "libstdc++ ABI"),
            ):
                found = elf.max_version(prefix)
                if found and found > limit:
                    findings.append(
                        _error(
                            fn,
                            f"{where} needs {prefix}_{format_version(found)}, "
                            f"the runtime's {what} has {prefix}_{format_version(limit)}",
                        )
                    )
            origin = posixpath.dirname(f"{_mount(target, pkg)}/{rel}")
            search = [d.replace("$ORIGIN", origin).replace("${ORIGIN}", origin) for d in elf.runpath]
            search += LIBRARY_PATH
            for lib in elf.needed:
                if lib in RUNTIME_LIBRARIES:
                    continue
                if not any(posixpath.normpath(f"{d}/{lib}") in deployed for d in search):
                    findings.append(
                        _error(
                            fn, f"{where} needs {lib}, which is not in the runtime or on the loader's path"
                        )
                    )
    return findings


def check_wheels(target: Target) -> list[Finding]:
    """Installed wheels are for CPython 3.x of the function, its architecture and glibc <= 2.34."""
    findings = []
    fn = target.function
    want = ELF_MACHINE.get(fn.architecture, fn.architecture)
    runtime_python = _python_version(fn.runtime)
    for pkg in target.packages:
        # A wheel may carry several tags (py2-none-any and py3-none-any): one that fits is enough.
        problems: dict[str, list[str | None]] = {}
        for tag in pkg.wheel_tags:
            problem = _wheel_problem(tag.python, tag.abi, tag.platform, want, runtime_python)
            problems.setdefault(tag.distribution, []).append(problem)
        for distribution, found in problems.items():
            if all(found):
                findings.append(_error(fn, f"{pkg.name}: wheel {distribution} is {found[0]}"))
    return findings


def check_sizes(target: Target) -> list[Finding]:
    """Code plus layers fit in 250 MB unzipped; at most 5 layers; every layer has the ``python/`` prefix and
    none is a placeholder (:data:`LAYER_PLACEHOLDER`)."""
    findings = []
    fn = target.function
    if len(fn.layers) > MAX_LAYERS:
        findings.append(_error(fn, f"{len(fn.layers)} layers, Lambda allows {MAX_LAYERS}"))
    total = sum(pkg.unzipped_bytes for pkg in target.packages)
    for layer in fn.layers:
        if layer.path is None:
            findings.append(_note(fn, f"layer {layer.name} is not built here: its size is not counted"))
    if total > MAX_UNZIPPED_BYTES:
        parts = ", ".join(f"{pkg.name} {mb(pkg.unzipped_bytes)}" for pkg in target.packages)
        findings.append(
            _error(fn, f"unzipped size {mb(total)} exceeds Lambda's {mb(MAX_UNZIPPED_BYTES)} ({parts})")
        )
    for layer in target.layers:
        if LAYER_PLACEHOLDER in layer.files:
            findings.append(
                _error(
                    fn,
                    f"layer {layer.name} is a placeholder: the build was for another architecture than "
                    f"{fn.architecture} (make build ARCH={fn.architecture} or plain sam build builds it)",
                )
            )
    if fn.runtime.startswith("python"):
        for layer in target.layers:
            if LAYER_PLACEHOLDER in layer.files:
                continue
            if layer.files and not any(rel.startswith("python/") for rel in layer.files):
                findings.append(
                    _error(fn, f"layer {layer.name} has no python/ folder: Python will not import from it")
                )
    return findings


def check_overrides(target: Target) -> list[Finding]:
    """Lists modules that a later layer, or the function's own code, puts over an earlier layer's."""
    findings = []
    fn = target.function
    # import root -> (layer package, its files keyed by import path)
    owner: dict[str, tuple[Package, dict[str, str]]] = {}
    for layer in target.layers:
        for top, files in _import_roots(layer).items():
            if top in owner and owner[top][0] is not layer:
                detail = _compare(owner[top], (layer, files))
                findings.append(
                    _note(fn, f"layer {layer.name} overrides {top} from {owner[top][0].name} ({detail})")
                )
            owner[top] = (layer, files)
    if target.code:
        # /var/task comes first on sys.path, so the function's copy of a module wins over every layer's.
        for top, files in _import_roots(target.code, layer=False).items():
            if top in owner:
                detail = _compare(owner[top], (target.code, files))
                findings.append(
                    _note(fn, f"function code shadows {top} from {owner[top][0].name} ({detail})")
                )
    return findings


def check_snapstart(target: Target) -> list[Finding]:
    """SnapStart's configuration rules (cfn-lint does not check them on SAM functions)."""
    fn = target.function
    if not fn.snapstart:
        return []
    findings = []
    version = _python_version(fn.runtime)
    if version is None:
        findings.append(_error(fn, f"SnapStart for Python needs a python runtime, runtime is {fn.runtime!r}"))
    elif version < SNAPSTART_MIN_PYTHON:
        findings.append(_error(fn, f"SnapStart needs python3.12 or later, runtime is {fn.runtime}"))
    if fn.package_type != "Zip":
        findings.append(_error(fn, f"SnapStart needs a Zip package, PackageType is {fn.package_type}"))
    storage = (fn.properties.get("EphemeralStorage") or {}).get("Size", 512)
    if storage != 512:
        findings.append(_error(fn, f"SnapStart needs EphemeralStorage 512 MB, it is {storage} MB"))
    if fn.properties.get("FileSystemConfigs"):
        findings.append(_error(fn, "SnapStart cannot be used with EFS (FileSystemConfigs)"))
    if fn.properties.get("ProvisionedConcurrencyConfig"):
        findings.append(_error(fn, "SnapStart cannot be used with provisioned concurrency"))
    if not fn.properties.get("AutoPublishAlias"):
        findings.append(
            _error(fn, "SnapStart applies to published versions only: set AutoPublishAlias, invoke the alias")
        )
    return findings


def check_durable(target: Target) -> list[Finding]:
    """Durable-function rules: python3.13+, ExecutionTimeout and RetentionPeriodInDays in range."""
    fn = target.function
    config = fn.durable
    if config is None:
        return []
    findings = []
    version = _python_version(fn.runtime)
    if version is not None and version < DURABLE_MIN_PYTHON:
        findings.append(_error(fn, f"durable functions need python3.13 or later, runtime is {fn.runtime}"))
    for key, (low, high), required in (
        ("ExecutionTimeout", DURABLE_TIMEOUT_RANGE, True),
        ("RetentionPeriodInDays", DURABLE_RETENTION_RANGE, False),
    ):
        value = config.get(key)
        if value is None:
            if required:
                findings.append(_error(fn, f"DurableConfig.{key} is required ({low}..{high})"))
            continue
        if not isinstance(value, int) or not low <= value <= high:
            findings.append(_error(fn, f"DurableConfig.{key} is {value!r}, allowed {low}..{high}"))
    return findings


def check_web_adapter(target: Target) -> list[Finding]:
    """Lambda Web Adapter settings that fail silently: a misspelt invoke mode, SnapStart hooks not run."""
    fn = target.function
    variables = (fn.properties.get("Environment") or {}).get("Variables") or {}
    if variables.get("AWS_LAMBDA_EXEC_WRAPPER") != "/opt/bootstrap":
        return []
    findings = []
    mode = variables.get("AWS_LWA_INVOKE_MODE")
    if isinstance(mode, str) and mode.lower() not in ("buffered", "response_stream"):
        findings.append(
            _error(
                fn,
                f"AWS_LWA_INVOKE_MODE {mode!r} is not buffered or response_stream (LWA would buffer)",
            )
        )
    hooks = [name for name in LWA_SNAPSTART_HOOKS if variables.get(name)]
    if fn.snapstart and not hooks:
        findings.append(
            _note(
                fn,
                "SnapStart under Lambda Web Adapter: snapshot_restore_py hooks never run; "
                "use AWS_LWA_SNAPSTART_* paths (LWA >= 1.1.0)",
            )
        )
    if fn.snapstart and hooks:
        for layer in fn.layers:
            match = _LWA_LAYER_VERSION.search(layer.name)
            if match and int(match.group(1)) < LWA_SNAPSTART_MIN_LAYER:
                findings.append(
                    _error(
                        fn,
                        f"{' and '.join(hooks)} need Lambda Web Adapter v1.1.0 (layer version "
                        f"{LWA_SNAPSTART_MIN_LAYER}) or later, but the layer is version {match.group(1)}: "
                        "the warm-up never reaches the snapshot and restored environments are not re-seeded",
                    )
                )
    return findings


def check_weights(target: Target) -> list[Finding]:
    """No model weights in any package: the model is streamed from S3 at init."""
    return [
        _error(target.function, f"{pkg.name}/{rel} looks like model weights: load the model from S3 instead")
        for pkg in target.packages
        for rel in pkg.weights()
    ]


def check_tooling(target: Target) -> list[Finding]:
    """No developer tooling ships: the layer holds the runtime (``snapllm``), never ``snapllm_dev``, which the
    runtime does not import (an import-linter contract) and which would only add bytes to every function."""
    return [
        _error(
            target.function,
            f"{pkg.name} ships {TOOLING_PACKAGE}, the developer tooling: "
            "the layer should copy src/snapllm only",
        )
        for pkg in target.packages
        if TOOLING_PACKAGE in _import_roots(pkg, layer=pkg is not target.code)
    ]


def check_region(target: Target) -> list[Finding]:
    """The region offers every Lambda feature the function uses (the table in :mod:`.regions`)."""
    if target.region is None:
        return []
    return [_error(target.function, problem) for problem in region_problems(target.function, target.region)]


def check_init_time(target: Target) -> list[Finding]:
    """A model function's SnapStart init (download, load, warm-up) fits the init limit of a published
    version: the greater of 130 s and the function's timeout."""
    fn, init = target.function, target.model_init
    variables = (fn.properties.get("Environment") or {}).get("Variables") or {}
    if init is None or not fn.snapstart or MODEL_KEY_VARIABLE not in variables:
        return []
    limit = max(SNAPSTART_MIN_INIT_S, fn.timeout_s)
    if init.seconds <= limit:
        return []
    raise_to = min(MAX_TIMEOUT_S, int(init.seconds * 1.5) + 1)
    fix = (
        f"raise InferenceTimeout to {raise_to} (the limit follows the timeout, up to {MAX_TIMEOUT_S} s)"
        if init.seconds * 1.2 <= MAX_TIMEOUT_S
        else "use a smaller model: even a 900 s timeout leaves too little margin"
    )
    return [
        _note(
            fn,
            f"WARNING the init of a published version may not fit its {limit} s limit: about "
            f"{init.seconds:.0f} s = {init.import_s:.1f} s imports + {init.download_s:.0f} s to read "
            f"{mb(init.model_bytes)} at {init.s3_mib_per_s:g} MiB/s from S3 + {init.load_s:.1f} s load + "
            f"{init.warm_up_s:.1f} s warm-up (measured, scaled to the model's size). The version would fail "
            f"and the deploy roll back: {fix}, or measure the S3 rate on AWS (--s3-mib-per-s)",
        )
    ]


def _variables(target: Target) -> Mapping[str, Any]:
    return (target.function.properties.get("Environment") or {}).get("Variables") or {}


def _model_function(target: Target) -> bool:
    return MODEL_KEY_VARIABLE in _variables(target)


def check_model_memory(target: Target) -> list[Finding]:
    """A model function's memory holds the model: its weights, KV cache, compute buffers and the runtime."""
    fn, model = target.function, target.model
    if model is None or not _model_function(target):
        return []
    need, have = model.memory_mb, fn.memory
    configured = str(_variables(target).get("SNAPLLM_PREFIX_CACHE_MB"))
    configured_mb = int(configured) if configured.isdigit() else None
    cache = prefix_cache_bytes(configured_mb, have)
    # With the default share, the cache grows with the memory: the least memory that holds both.
    least = (
        need + -(-cache // MiB) if configured_mb is not None else math.ceil(need / (1 - PREFIX_CACHE_SHARE))
    )
    parts = (
        f"{mb(model.size_bytes)} weights + {mb(model.kv_cache_bytes)} KV cache for {model.n_ctx} tokens + "
    )
    if model.prefix_tokens:
        parts += (
            f"{mb(model.prefix_states_bytes)} for the states of {len(model.prefix_tokens)} declared prompt "
            f"prefixes ({sum(model.prefix_tokens)} tokens) + "
        )
    parts += "compute buffers and the runtime"
    if model.footprint.load_peak_bytes > model.footprint.serving_bytes:
        parts += "; the load peaks at two copies of the weights, while they are read out of the memfd"
    held = f"{mb(cache)} more for recent conversations' prefix states (SNAPLLM_PREFIX_CACHE_MB)"
    if need + cache / MiB > have:
        return [
            _error(
                fn,
                f"the model needs about {need} MB ({parts}), and {held}; the function has {have} MB: set "
                f"InferenceMemorySize to at least {least} (or lower SNAPLLM_N_CTX or "
                "SNAPLLM_PREFIX_CACHE_MB, or use a smaller quantization)",
            )
        ]
    return [_note(fn, f"the model needs about {need} MB of its {have} MB ({parts}), and {held}")]


def check_model_chat(target: Target) -> list[Finding]:
    """What the model's family and chat template give a model function: its thinking, its tool-call format,
    and the requests its template refuses (those get a 400 naming the template's reason)."""
    model = target.model
    if model is None or not _model_function(target):
        return []
    fn = target.function
    found = ", ".join(f"{key}: {value}" for key, value in model.family.items())
    findings = [
        _note(fn, f"{model.path.name}: {model.architecture}, {found}; chat template: {model.template}")
    ]
    if model.template == "none":
        findings.append(_note(fn, "the model has no chat template: it serves text completions (prompt) only"))
    if "chat" in model.refusals:
        findings.append(
            _error(fn, f"the model's chat template refuses a plain chat: {model.refusals['chat']}")
        )
    findings += [
        _note(fn, f"WARNING requests with {name} will be refused: {reason}")
        for name, reason in model.refusals.items()
        if name != "chat"
    ]
    return findings


RULES: tuple[Rule, ...] = (
    check_elf,
    check_wheels,
    check_sizes,
    check_snapstart,
    check_durable,
    check_weights,
    check_tooling,
    check_web_adapter,
    check_overrides,
    check_region,
    check_init_time,
    check_model_memory,
    check_model_chat,
)


def run_rules(targets: Iterable[Target], rules: Sequence[Rule] = RULES) -> list[Finding]:
    """Runs every rule on every target; findings in rule order, errors of one target before its notes."""
    findings = []
    for target in targets:
        found = [finding for rule in rules for finding in rule(target)]
        findings += [f for f in found if f.severity == "error"] + [f for f in found if f.severity == "note"]
    return findings


def mb(size: int) -> str:
    """Bytes as MiB with one decimal, the unit Lambda's quotas use."""
    return f"{size / 1024 / 1024:.1f} MB"


def _error(fn: Function, message: str) -> Finding:
    return Finding("error", fn.name, message)


def _note(fn: Function, message: str) -> Finding:
    return Finding("note", fn.name, message)


def _mount(target: Target, pkg: Package) -> str:
    return TASK_ROOT if pkg is target.code else LAYER_ROOT


def _python_version(runtime: str) -> tuple[int, ...] | None:
    if not runtime.startswith("python"):
        return None
    try:
        return tuple(int(part) for part in runtime.removeprefix("python").split("."))
    except ValueError:
        return None


def _wheel_problem(
    python: str, abi: str, platform: str, machine: str, runtime: tuple[int, ...] | None
) -> str | None:
    interpreters = python.split(".")
    if runtime and not any(_python_tag_ok(tag, abi, runtime) for tag in interpreters):
        return f"for {python}, the runtime is Python {format_version(runtime)}"
    for plat in platform.split("."):
        if plat == "any":
            return None
        if plat.startswith("musllinux"):
            continue
        arch_ok = plat.endswith("_" + machine)
        glibc = _manylinux_glibc(plat)
        if arch_ok and glibc is not None and glibc <= MAX_GLIBC:
            return None
    return f"for {platform}, the runtime needs {machine} and glibc <= {format_version(MAX_GLIBC)}"


def _python_tag_ok(tag: str, abi: str, runtime: tuple[int, ...]) -> bool:
    if tag in ("py3", "py2"):
        return tag == "py3"
    if not tag.startswith(("cp", "py")) or not tag[2:].isdigit() or not tag[2:].startswith("3"):
        return False
    minor = int(tag[3:]) if len(tag) > 3 else 0
    if tag.startswith("py") or abi in ("abi3", "none"):
        # Pure or stable-ABI builds load on the tagged version and every later 3.x.
        return minor <= runtime[1]
    return minor == runtime[1]


def _manylinux_glibc(platform: str) -> tuple[int, ...] | None:
    legacy = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
    head = platform.split("_", 1)[0]
    if head in legacy:
        return legacy[head]
    if platform.startswith("manylinux_"):
        parts = platform.split("_")
        return parse_version(f"GLIBC_{parts[1]}.{parts[2]}", "GLIBC")
    if platform.startswith("linux_"):
        return None
    return None


def _import_roots(pkg: Package, *, layer: bool = True) -> dict[str, dict[str, str]]:
    """Top-level import names a package provides, each with its files by import path.

    ``python/numpy/core/x.py`` in a layer -> ``{"numpy": {"numpy/core/x.py": "python/numpy/core/x.py"}}``.
    """
    roots: dict[str, dict[str, str]] = {}
    for rel in pkg.files:
        parts = rel.split("/")
        if layer:
            if parts[0] != "python":
                continue
            parts = parts[1:]
            # python/lib/python3.13/site-packages/ is on sys.path as well as python/.
            if len(parts) > 3 and parts[0] == "lib" and parts[2] == "site-packages":
                parts = parts[3:]
        if not parts or parts[0].endswith((".dist-info", ".egg-info")) or parts[0] == "__pycache__":
            continue
        top = parts[0].removesuffix(".py") if len(parts) == 1 else parts[0]
        roots.setdefault(top, {})["/".join(parts)] = rel
    return roots


def _compare(first: tuple[Package, dict[str, str]], second: tuple[Package, dict[str, str]]) -> str:
    """``"3 files, identical"`` or ``"3 files, 2 differ"`` for the files both sides have."""
    (pkg_a, files_a), (pkg_b, files_b) = first, second
    common = sorted(set(files_a) & set(files_b))
    differ = sum(
        (pkg_a.root / files_a[key]).read_bytes() != (pkg_b.root / files_b[key]).read_bytes() for key in common
    )
    return f"{len(common)} files, " + (f"{differ} differ" if differ else "identical")
