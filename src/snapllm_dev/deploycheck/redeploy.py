"""Does a redeploy reach the ``live`` aliases? Each change that alters what a function runs must publish a
new version of it, and no other change may.

    findings = check_redeploys(Path("template.yaml"), {"Architecture": "arm64"})

docs/redeploys.md ("The offline proof") says which changes are tried and what is compared.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snapllm_dev import sam
from snapllm_dev.deploycheck.transform import Stack, folder_digest, transformed
from snapllm_dev.preflight.rules import Finding

#: What a published version holds of its function (Lambda's version configuration), so what it runs.
VERSIONED_PROPERTIES = (
    "Code",
    "Runtime",
    "Handler",
    "Layers",
    "Architectures",
    "MemorySize",
    "Timeout",
    "Environment",
    "EphemeralStorage",
    "SnapStart",
    "DurableConfig",
    "TracingConfig",
    "VpcConfig",
    "FileSystemConfigs",
    "ImageConfig",
    "LoggingConfig",
    "KmsKeyArn",
    "Role",
)
#: The custom resource whose attributes are digests of its properties (template.yaml's VersionDigests).
DIGEST_RESOURCE_TYPE = "Custom::VersionDigests"
#: The one-line change made to a code folder: a comment line appended to a Python file of it, or to its
#: Makefile (a layer built by make).
CHANGE_LINE = b"\n# deploy-check: a one-line change\n"
#: Values tried, in order, for a String parameter whose new value must match its AllowedPattern.
_CANDIDATE_STRINGS = (
    "deploy-check",
    "deploy-check/",
    "1",
    "f" * 64,
    "https://deploy-check.invalid/model.gguf",
    "arn:aws:sns:us-east-1:123456789012:deploy-check",
)
_SUB_ATTRIBUTE = re.compile(r"\$\{([A-Za-z0-9]+)\.([A-Za-z0-9]+)\}")


@dataclass(frozen=True)
class Change:
    """One change between two deploys: new code in a folder, or a new parameter value."""

    description: str
    parameters: Mapping[str, str]
    code_digests: Mapping[str, str]


@dataclass(frozen=True)
class Deploy:
    """Per function with a published version: what it runs and what names its version."""

    runs: Mapping[str, str]
    versions: Mapping[str, str]
    version_ids: Mapping[str, str]


def check_redeploys(template: Path, overrides: Mapping[str, str]) -> list[Finding]:
    """Findings for every change whose new versions do not match what it changes (module docstring)."""
    folders = code_folders(template)
    digests = {folder: folder_digest(template.parent / folder) for folder in folders}
    before = _deploy(template, overrides, digests)
    findings = []
    for change in changes(template, overrides, digests):
        after = _deploy(template, change.parameters, change.code_digests)
        for function in sorted(set(before.runs) & set(after.runs)):
            runs_changed = before.runs[function] != after.runs[function]
            version_changed = before.versions[function] != after.versions[function]
            if runs_changed and not version_changed:
                findings.append(
                    Finding(
                        "error",
                        function,
                        f"{change.description} changes what it runs but publishes no new version: "
                        f"{before.version_ids[function]} stays, so its alias keeps serving the old one",
                    )
                )
            elif version_changed and not runs_changed:
                findings.append(
                    Finding(
                        "error",
                        function,
                        f"{change.description} publishes a new version ({after.version_ids[function]}) "
                        "though nothing it runs changed",
                    )
                )
    return findings


def code_folders(template: Path) -> list[str]:
    """The local code folders the template names (``CodeUri`` / ``ContentUri``), as written."""
    document = sam.read(template)
    found = set()
    for resource in (document.get("Resources") or {}).values():
        properties = (resource or {}).get("Properties") or {}
        for name in ("CodeUri", "ContentUri"):
            value = properties.get(name)
            if isinstance(value, str) and not value.startswith("s3://"):
                found.add(value)
    return sorted(found)


def changes(template: Path, overrides: Mapping[str, str], digests: Mapping[str, str]) -> Iterator[Change]:
    """A one-line change to each code folder, then a new value for each parameter, one at a time."""
    for folder in sorted(digests):
        path = template.parent / folder
        changed = _changed_file(path)
        if changed is None:
            continue
        edit = {changed: (path / changed).read_bytes() + CHANGE_LINE}
        # Named as seen from the template's folder: layers/snapllm's snapllm link leads to src/snapllm.
        real = (path / changed).resolve().relative_to(path.resolve(), walk_up=True)
        where = os.path.normpath(f"{folder}/{real}")
        yield Change(
            f"a one-line change to {where}",
            overrides,
            {**digests, folder: folder_digest(path, edit)},
        )
    declared = sam.read(template).get("Parameters") or {}
    for name, spec in declared.items():
        value = new_value(spec, overrides.get(name))
        if value is not None:
            yield Change(f"a new value of {name} ({value!r})", {**overrides, name: value}, digests)


def new_value(spec: Mapping[str, Any], current: str | None) -> str | None:
    """A valid value of the parameter other than ``current`` (default: its Default); None if none is found."""
    kind = str(spec.get("Type", "String"))
    now = str(current if current is not None else spec.get("Default", ""))
    allowed = [str(v) for v in spec.get("AllowedValues") or []]
    if allowed:
        return next((v for v in allowed if v != now), None)
    if kind == "Number":
        number = float(now) if now else 0.0
        step = 1 if number + 1 <= float(spec.get("MaxValue", number + 1)) else -1
        result = number + step
        return str(int(result)) if result == int(result) else str(result)
    pattern = spec.get("AllowedPattern")
    for candidate in _CANDIDATE_STRINGS:
        if candidate != now and (pattern is None or re.fullmatch(str(pattern), candidate)):
            return candidate
    return None


def _changed_file(folder: Path) -> str | None:
    """The file of ``folder`` a one-line change goes into: a Python module (snapllm's own package first)."""
    for pattern in ("snapllm/__init__.py", "app.py", "*.py", "Makefile", "*.sh"):
        found = sorted(folder.glob(pattern))
        if found:
            return found[0].relative_to(folder).as_posix()
    return None


def _deploy(template: Path, parameters: Mapping[str, str], digests: Mapping[str, str]) -> Deploy:
    stack = Stack.of(transformed(template, parameters, code_digests=digests), parameters, path=template)
    runs, versions, ids = {}, {}, {}
    for version_id, version in stack.of_type("AWS::Lambda::Version").items():
        function = next(
            (n for n in sam.references(version["Properties"].get("FunctionName")) if n in stack.resources),
            None,
        )
        if function is None:
            continue
        properties = stack.resources[function]["Properties"]
        runs[function] = _canonical({k: properties.get(k) for k in VERSIONED_PROPERTIES if k in properties})
        versions[function] = _canonical(
            {"LogicalId": version_id, **version["Properties"], "Digests": _digested(stack, version)}
        )
        ids[function] = version_id
    return Deploy(runs, versions, ids)


def _digested(stack: Stack, version: Mapping[str, Any]) -> dict[str, Any]:
    """The values behind every ``VersionDigests`` attribute the version's properties refer to."""
    text = json.dumps(version["Properties"], default=str)
    found = {}
    pairs = set(_SUB_ATTRIBUTE.findall(text)) | set(
        re.findall(r'"Fn::GetAtt": \["([A-Za-z0-9]+)", "([A-Za-z0-9]+)"\]', text)
    )
    for resource, attribute in sorted(pairs):
        target = stack.resources.get(resource)
        if target is not None and target.get("Type") == DIGEST_RESOURCE_TYPE:
            found[f"{resource}.{attribute}"] = target["Properties"].get(attribute)
    return found


def _canonical(value: Any) -> str:
    # An Fn::Sub resolved but for pseudo-parameters (an ARN in the region) compares by its text.
    return json.dumps(value, sort_keys=True, default=lambda v: getattr(v, "partial", None) or str(v))
