"""Every package a function imports reaches Lambda: from one of the function's layers, its own
requirements.txt, or the python3.13 runtime (boto3 and what boto3 needs).

The local environment holds the union of everything, so an import that only one function's deployment lacks
passes every other test here and fails only in a Lambda container ("Unable to import module 'app'"). The
imports are read from the source (grimp, as import-linter reads them; imports under ``TYPE_CHECKING`` do not
run and are left out), and each requirement is widened to what its distribution installs, dependencies
included, as pip would.
"""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import re
import sys
from collections.abc import Iterable
from functools import cache
from pathlib import Path

import grimp
import pytest
from packaging.requirements import Requirement

from snapllm_dev import sam
from tests.support.paths import REPO

# What the Lambda python3.13 runtime installs (the AWS SDK), as distributions.
RUNTIME_DISTRIBUTIONS = ("boto3", "awslambdaric")
# What a layer's build installs besides its requirements.txt: llama-cpp-python is compiled by build.sh.
BUILT_BY_LAYER = {"layers/llama-cpp": ("llama-cpp-python",)}


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements(path: Path) -> list[Requirement]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [Requirement(line) for line in lines if line]


@cache
def _import_names() -> dict[str, frozenset[str]]:
    """Distribution (canonical name) -> the top-level modules it installs, in this environment."""
    names: dict[str, set[str]] = {}
    for module, distributions in metadata.packages_distributions().items():
        for distribution in distributions:
            names.setdefault(_canonical(distribution), set()).add(module)
    return {k: frozenset(v) for k, v in names.items()}


def _installed(requirements: Iterable[Requirement]) -> set[str]:
    """The distributions pip would install for ``requirements``: each one and its dependencies, extras
    followed, environment markers evaluated for this Python."""
    found: set[str] = set()
    pending = [(req, frozenset(req.extras)) for req in requirements]
    while pending:
        req, extras = pending.pop()
        name = _canonical(req.name)
        key = f"{name}[{','.join(sorted(extras))}]"
        if key in found:
            continue
        found.add(key)
        found.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            dependency = Requirement(line)
            markers = [{"extra": extra} for extra in extras or {""}]
            if dependency.marker is None or any(dependency.marker.evaluate(m) for m in markers):
                pending.append((dependency, frozenset(dependency.extras)))
    return {name for name in found if "[" not in name}


def _modules(distributions: set[str]) -> set[str]:
    return set().union(*(_import_names().get(name, frozenset()) for name in distributions))


@cache
def _graph() -> grimp.ImportGraph:
    return grimp.build_graph("snapllm", include_external_packages=True, exclude_type_checking_imports=True)


def _handler_imports(handler: Path) -> set[str]:
    tree = ast.parse(handler.read_text())
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules.add(node.module)
    return modules


def imported_packages(handler: Path) -> set[str]:
    """The top-level packages outside the standard library that the handler's module imports, directly or
    through snapllm."""
    graph = _graph()
    direct = _handler_imports(handler)
    reached = set(direct)
    for module in direct:
        if module.split(".")[0] == "snapllm" and graph.find_modules_directly_imported_by(module) is not None:
            reached |= graph.find_upstream_modules(module)
    tops = {module.split(".")[0] for module in reached}
    return {top for top in tops if top not in sys.stdlib_module_names and top != "snapllm"}


def provided_packages(fn: sam.Function, template: sam.Template) -> set[str]:
    """The top-level modules importable in ``fn``'s deployment."""
    requirements = _requirements(fn.code_dir / "requirements.txt")
    requirements += [Requirement(name) for name in RUNTIME_DISTRIBUTIONS]
    resources = dict(template.resources("AWS::Serverless::LayerVersion"))
    for entry in fn.layers:
        for name in sam.references(entry) & resources.keys():
            folder = Path(resources[name]["Properties"]["ContentUri"].rstrip("/"))
            requirements += _requirements(REPO / folder / "requirements.txt")
            requirements += [Requirement(built) for built in BUILT_BY_LAYER.get(folder.as_posix(), ())]
    return _modules(_installed(requirements)) | {"snapllm"}


# Every conditional function present: ModelSourceFunction exists when a ModelSource is given.
TEMPLATE = sam.load(REPO / "template.yaml", overrides={"ModelSource": "https://models.example/model.gguf"})
FUNCTIONS = [fn for fn in TEMPLATE.functions if fn.code_uri and fn.code_uri.startswith("functions/")]


def test_every_function_of_the_template_is_checked():
    folders = {path.name for path in (REPO / "functions").iterdir() if (path / "app.py").is_file()}
    assert {Path(fn.code_uri or "").name for fn in FUNCTIONS} == folders


@pytest.mark.parametrize("fn", FUNCTIONS, ids=lambda fn: fn.name)
def test_every_package_a_function_imports_is_deployed_with_it(fn):
    # app.py is every function's code; the streaming function's Handler is the web adapter's run.sh.
    missing = imported_packages(fn.code_dir / "app.py") - provided_packages(fn, TEMPLATE)
    assert not missing, (
        f"{fn.name} imports {sorted(missing)}, which neither its layers, its requirements.txt nor the "
        "Lambda runtime provide"
    )


def test_a_package_missing_from_a_function_is_found():
    # The router without SnapllmLayer: the snapllm dependencies it imports (pydantic, llguidance) go missing
    # (not jinja2: the router renders no chat).
    router = TEMPLATE.function("RouterFunction")
    bare = sam.Function(
        name=router.name,
        properties={**router.properties, "Layers": []},
        template_dir=router.template_dir,
    )
    missing = imported_packages(bare.code_dir / "app.py") - provided_packages(bare, TEMPLATE)
    assert {"pydantic", "llguidance"} <= missing and "jinja2" not in missing
