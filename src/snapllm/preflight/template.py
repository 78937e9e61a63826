"""Reads the template that ``sam build`` wrote and resolves what each function will deploy with.

The built template is a SAM template whose ``CodeUri``/``ContentUri`` point into the build directory. Values
given as ``!Ref Parameter`` are resolved from parameter overrides, then from the parameter's ``Default``;
``Globals.Function`` is merged under each function's own properties, as the SAM transform does.

Example:
    >>> from pathlib import Path
    >>> from snapllm.preflight.template import load_build
    >>> build = load_build(Path(".aws-sam/build"))  # doctest: +SKIP
    >>> [(f.name, f.architecture, [x.name for x in f.layers]) for f in build.functions]  # doctest: +SKIP
    [('InferenceFunction', 'arm64', ['SnapllmLayer', 'LlamaCppLayer'])]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from snapllm.errors import ConfigurationError
from snapllm.local.template import load_template
from snapllm.preflight.errors import BuildDirError, TemplateError

FUNCTION_TYPES = ("AWS::Serverless::Function", "AWS::Lambda::Function")
LAYER_TYPES = ("AWS::Serverless::LayerVersion", "AWS::Lambda::LayerVersion")


@dataclass(frozen=True)
class Layer:
    """A layer a function uses: built here (``path`` set) or referenced by ARN (``path`` None)."""

    name: str
    path: Path | None


@dataclass(frozen=True)
class Function:
    """One function as it will deploy: resolved properties, its built code and its layers in order."""

    name: str
    properties: Mapping[str, Any]
    path: Path | None
    layers: tuple[Layer, ...] = ()

    @property
    def architecture(self) -> str:
        """``arm64`` or ``x86_64`` (Lambda's default when ``Architectures`` is absent)."""
        archs = self.properties.get("Architectures") or ["x86_64"]
        return str(archs[0])

    @property
    def runtime(self) -> str:
        return str(self.properties.get("Runtime", ""))

    @property
    def package_type(self) -> str:
        return str(self.properties.get("PackageType", "Zip"))

    @property
    def memory(self) -> int:
        return int(self.properties.get("MemorySize", 128))

    @property
    def snapstart(self) -> bool:
        snap = self.properties.get("SnapStart") or {}
        return isinstance(snap, Mapping) and snap.get("ApplyOn") == "PublishedVersions"

    @property
    def durable(self) -> Mapping[str, Any] | None:
        config = self.properties.get("DurableConfig")
        return config if isinstance(config, Mapping) else None


@dataclass(frozen=True)
class Build:
    """The build directory: its template's functions and every layer the template builds."""

    root: Path
    functions: tuple[Function, ...]
    layers: tuple[Layer, ...] = field(default=())


def load_build(build_dir: Path, overrides: Mapping[str, str] | None = None) -> Build:
    """Loads ``build_dir/template.yaml`` and resolves functions and layers.

    Args:
        build_dir: What ``sam build`` wrote, normally ``.aws-sam/build``.
        overrides: Parameter values that replace the template's defaults (as ``--parameter-overrides``).

    Raises:
        BuildDirError: No built template in ``build_dir``.
        TemplateError: The template is not YAML or has no ``Resources``.
    """
    template_path = build_dir / "template.yaml"
    if not template_path.is_file():
        raise BuildDirError(f"{template_path} not found: run 'make build' (sam build) first")
    template = parse_template(template_path)
    resources = template.get("Resources")
    if not isinstance(resources, Mapping):
        raise TemplateError(f"{template_path}: no Resources")

    params = {name: spec.get("Default") for name, spec in (template.get("Parameters") or {}).items()} | dict(
        overrides or {}
    )
    resolver = _Resolver(params)
    globals_function = resolver.resolve((template.get("Globals") or {}).get("Function") or {})

    layers: dict[str, Layer] = {}
    for name, resource in resources.items():
        if resource.get("Type") in LAYER_TYPES:
            props = resource.get("Properties") or {}
            uri = props.get("ContentUri") or props.get("Content")
            layers[name] = Layer(name, build_dir / uri if isinstance(uri, str) else None)

    functions = []
    for name, resource in resources.items():
        if resource.get("Type") not in FUNCTION_TYPES:
            continue
        own = resolver.resolve(resource.get("Properties") or {})
        props = _merge(globals_function, own) if resource["Type"] == FUNCTION_TYPES[0] else own
        uri = props.get("CodeUri") or props.get("Code")
        function_layers = tuple(_layer_for(entry, layers) for entry in props.get("Layers") or [])
        functions.append(
            Function(
                name=name,
                properties=props,
                path=build_dir / uri if isinstance(uri, str) else None,
                layers=function_layers,
            )
        )
    return Build(root=build_dir, functions=tuple(functions), layers=tuple(layers.values()))


def parse_template(path: Path) -> dict[str, Any]:
    """Parses CloudFormation YAML with short-form tags (``!Ref X``) in their long form (``{"Ref": X}``).

    Raises:
        TemplateError: The file is not YAML or not a mapping.
    """
    try:
        data = load_template(path)
    except ConfigurationError as exc:
        raise TemplateError(str(exc)) from exc
    if not isinstance(data, dict):
        raise TemplateError(f"{path}: template is not a mapping")
    return data


class _Resolver:
    """Replaces ``{"Ref": Parameter}`` with the parameter's value; leaves other intrinsics as they are."""

    def __init__(self, params: Mapping[str, Any]) -> None:
        self._params = params

    def resolve(self, value: Any) -> Any:
        if isinstance(value, Mapping):
            if set(value) == {"Ref"} and value["Ref"] in self._params:
                return self._coerce(self._params[value["Ref"]])
            return {key: self.resolve(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.resolve(item) for item in value]
        return value

    @staticmethod
    def _coerce(value: Any) -> Any:
        # Number parameters arrive as strings from overrides.
        if isinstance(value, str) and value.isdigit():
            return int(value)
        return value


def _merge(base: Mapping[str, Any], own: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in own.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(merged[key], value)
        elif isinstance(value, list) and isinstance(merged.get(key), list):
            # SAM's Globals rule: lists add up, global entries first.
            merged[key] = [*merged[key], *value]
        else:
            merged[key] = value
    return merged


def _layer_for(entry: Any, layers: Mapping[str, Layer]) -> Layer:
    if isinstance(entry, Mapping) and entry.get("Ref") in layers:
        return layers[entry["Ref"]]
    # An ARN (a string or an intrinsic that builds one): deployed as is, nothing here to inspect.
    if isinstance(entry, Mapping) and "Fn::Sub" in entry:
        sub = entry["Fn::Sub"]
        entry = sub[0] if isinstance(sub, list) else sub
    return Layer(name=entry if isinstance(entry, str) else "external layer", path=None)
