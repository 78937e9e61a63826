"""The AWS API calls a function's code makes, read from its source, and the IAM actions they need.

    calls = aws_calls(template.function("RouterFunction"))
    {call.action for call in calls}           # {"lambda:InvokeFunction", ...}

Read with ``ast`` against botocore's service models; libraries that call AWS themselves are listed in
:data:`LIBRARY_CALLS`, signed HTTP requests in :data:`SIGNED_CALLS`. docs/redeploys.md says how.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import botocore.session
from botocore import xform_name

import snapllm
from snapllm_dev.sam import Function

PACKAGE = "snapllm"
PACKAGE_ROOT = Path(snapllm.__file__).resolve().parent

#: Calls that libraries make on the function's behalf: the durable SDK checkpoints and reads the execution's
#: state through the Lambda API (AWSLambdaBasicDurableExecutionRolePolicy grants exactly these).
LIBRARY_CALLS: dict[str, tuple[tuple[str, str], ...]] = {
    "aws_durable_execution_sdk_python": (
        ("lambda", "CheckpointDurableExecution"),
        ("lambda", "GetDurableExecutionState"),
    ),
}
#: HTTP requests that a module signs with the function's credentials (SigV4) to a service whose IAM action
#: authorizes them, though no boto3 client makes them: the agent's MCP client calling an AgentCore Gateway
#: with IAM inbound authorization (the caller needs ``bedrock-agentcore:InvokeGateway`` on the gateway).
SIGNED_CALLS: dict[str, tuple[tuple[str, str], ...]] = {
    "snapllm.agent.mcp": (("bedrock-agentcore", "InvokeGateway"),),
}
#: boto3's managed transfers and the operations they make.
TRANSFER_CALLS: dict[str, tuple[str, ...]] = {
    "upload_file": ("PutObject", "CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload"),
    "upload_fileobj": ("PutObject", "CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload"),
    "download_file": ("HeadObject", "GetObject"),
    "download_fileobj": ("HeadObject", "GetObject"),
}
#: IAM actions that differ from ``service:Operation`` (the service authorization reference).
IAM_ACTIONS: dict[tuple[str, str], str] = {
    ("lambda", "Invoke"): "lambda:InvokeFunction",
    ("s3", "HeadObject"): "s3:GetObject",
    ("s3", "HeadBucket"): "s3:ListBucket",
    ("s3", "ListObjectsV2"): "s3:ListBucket",
    ("s3", "ListObjects"): "s3:ListBucket",
    ("s3", "CreateMultipartUpload"): "s3:PutObject",
    ("s3", "UploadPart"): "s3:PutObject",
    ("s3", "CompleteMultipartUpload"): "s3:PutObject",
    ("s3", "ListMultipartUploads"): "s3:ListBucketMultipartUploads",
    ("s3", "ListParts"): "s3:ListMultipartUploadParts",
}


@dataclass(frozen=True, order=True)
class AwsCall:
    service: str
    operation: str
    where: str  # the module that makes it (or the library)

    @property
    def action(self) -> str:
        return IAM_ACTIONS.get((self.service, self.operation), f"{self.service}:{self.operation}")


def aws_calls(function: Function) -> list[AwsCall]:
    """Every AWS call ``function``'s code makes (one per operation and module), sorted."""
    modules = dict(_modules(function))
    services: set[str] = set()
    libraries: set[str] = set()
    for facts in modules.values():
        services |= facts.services
        libraries |= facts.roots
    calls = set()
    for name, facts in modules.items():
        for service in services:
            operations = _operations(service)
            for method in facts.methods:
                if method in operations:
                    calls.add(AwsCall(service, operations[method], name))
                elif service == "s3" and method in TRANSFER_CALLS:
                    calls.update(AwsCall(service, op, name) for op in TRANSFER_CALLS[method])
    for library in sorted(libraries & set(LIBRARY_CALLS)):
        calls.update(AwsCall(service, op, library) for service, op in LIBRARY_CALLS[library])
    for module in sorted(set(modules) & set(SIGNED_CALLS)):
        calls.update(AwsCall(service, op, module) for service, op in SIGNED_CALLS[module])
    return sorted(calls)


@dataclass(frozen=True)
class _ModuleFacts:
    """What one source file tells of AWS calls: the modules it imports (and their roots), the clients it
    creates and the methods it calls."""

    imports: tuple[str, ...]
    roots: frozenset[str]
    services: frozenset[str]
    methods: frozenset[str]


def _facts(path: Path) -> _ModuleFacts:
    stat = path.stat()
    return _facts_of_version(path, stat.st_mtime_ns, stat.st_size)


@cache
def _facts_of_version(path: Path, mtime_ns: int, size: int) -> _ModuleFacts:
    """Each file parsed once per content version: deploy-check reads the same modules for every function of
    every scenario, and walking their syntax trees is most of its time."""
    tree = ast.parse(path.read_text(), filename=str(path))
    imports = tuple(_imported_modules(tree))
    return _ModuleFacts(
        imports=imports,
        roots=frozenset(module.split(".")[0] for module in imports),
        services=frozenset(_created_services(tree)),
        methods=frozenset(_called_methods(tree)),
    )


@cache
def _operations(service: str) -> dict[str, str]:
    """snake_case method name -> operation name, from botocore's service model."""
    model = botocore.session.get_session().get_service_model(service)
    return {xform_name(name): name for name in model.operation_names}


def _modules(function: Function) -> Iterator[tuple[str, _ModuleFacts]]:
    """The handler module and every snapllm module it imports, each once."""
    seen: set[Path] = set()
    # Most modules import the same few (snapllm.errors...): each name's files are looked for once.
    looked_for: set[str] = set()
    # A web-adapter function's handler is a script (run.sh) that starts the app: its Python is its code.
    handler = function.handler_file
    todo = [handler] if handler.is_file() else sorted(function.code_dir.glob("*.py"))
    while todo:
        path = todo.pop()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        facts = _facts(path)
        yield _module_name(function, path), facts
        for module in facts.imports:
            if module not in looked_for:
                looked_for.add(module)
                todo.extend(_module_files(module))


def _module_name(function: Function, path: Path) -> str:
    if not path.is_relative_to(PACKAGE_ROOT):
        return f"{function.name}:{path.name}"
    parts = path.relative_to(PACKAGE_ROOT).with_suffix("").parts
    return ".".join((PACKAGE, *(parts[:-1] if parts[-1] == "__init__" else parts)))


def _imported_modules(tree: ast.Module) -> Iterable[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            # ``from snapllm.agent import handler`` imports the submodule snapllm.agent.handler.
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


@cache
def _module_files(module: str) -> tuple[Path, ...]:
    """The files that may hold ``module`` and the packages above it (named only: whether they exist is
    looked at by the caller, each time)."""
    parts = module.split(".")
    if parts[0] != PACKAGE:
        return ()
    base = PACKAGE_ROOT.joinpath(*parts[1:])
    # A package's __init__ runs when any of its modules is imported.
    parents = [PACKAGE_ROOT.joinpath(*parts[1:i], "__init__.py") for i in range(1, len(parts))]
    return (base.with_suffix(".py"), base / "__init__.py", *parents)


def _created_services(tree: ast.Module) -> set[str]:
    return {
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "client"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    }


def _called_methods(tree: ast.Module) -> set[str]:
    """Method names called, and string constants passed as a call's first argument."""
    names = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        if isinstance(node.func, ast.Attribute):
            names.add(node.func.attr)
        if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            names.add(node.args[0].value)
    return names
