"""Reads the template that ``sam build`` wrote and resolves what each function will deploy with.

:func:`snapllm_dev.sam.load` resolves parameters, conditions and ``Globals`` (pseudo-parameters stay as
written: the deploy region is not known); this module adds the built code and layer folders.

    build = load_build(Path(".aws-sam/build"))
    [(f.name, f.architecture, [x.name for x in f.layers]) for f in build.functions]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from snapllm.errors import ConfigurationError
from snapllm_dev import sam
from snapllm_dev.preflight.errors import BuildDirError, TemplateError


@dataclass(frozen=True)
class Layer:
    """A layer a function uses: built here (``path`` set) or referenced by ARN (``path`` None)."""

    name: str
    path: Path | None


@dataclass(frozen=True)
class Function(sam.Function):
    """One function as it will deploy: :class:`snapllm_dev.sam.Function`'s accessors, its built code
    (``path``)
    and its layers in order (in place of the template's entries)."""

    path: Path | None = None
    layers: tuple[Layer, ...] = ()  # type: ignore[assignment]

    @property
    def memory(self) -> int:
        return self.memory_mb


@dataclass(frozen=True)
class Build:
    """The build directory: its template's functions and every layer the template builds."""

    root: Path
    functions: tuple[Function, ...]
    layers: tuple[Layer, ...] = field(default=())


def load_build(build_dir: Path, overrides: Mapping[str, str] | None = None) -> Build:
    """Loads ``build_dir/template.yaml`` (``sam build``'s) with ``overrides`` as ``--parameter-overrides``.

    Raises:
        BuildDirError: No built template in ``build_dir``.
        TemplateError: The template is not YAML or has no ``Resources``.
    """
    template_path = build_dir / "template.yaml"
    if not template_path.is_file():
        raise BuildDirError(f"{template_path} not found: run 'make build' (sam build) first")
    try:
        template = sam.load(template_path, overrides=overrides, pseudo_parameters={})
    except ConfigurationError as exc:
        raise TemplateError(str(exc)) from exc

    layers: dict[str, Layer] = {}
    for name, resource in template.resources(*sam.LAYER_TYPES):
        props = template.resolve(resource.get("Properties") or {})
        uri = props.get("ContentUri") or props.get("Content")
        layers[name] = Layer(name, build_dir / uri if isinstance(uri, str) else None)

    functions = tuple(
        Function(
            name=fn.name,
            properties=fn.properties,
            path=build_dir / fn.code_uri if fn.code_uri is not None else None,
            layers=tuple(_layer_for(entry, layers) for entry in fn.layers),
        )
        for fn in template.functions
    )
    return Build(root=build_dir, functions=functions, layers=tuple(layers.values()))


def _layer_for(entry: Any, layers: Mapping[str, Layer]) -> Layer:
    if isinstance(entry, sam.Unresolved) and entry.partial is not None:
        return Layer(name=entry.partial, path=None)  # an ARN with only pseudo-parameters left
    expression = entry.expression if isinstance(entry, sam.Unresolved) else entry
    if isinstance(expression, Mapping) and expression.get("Ref") in layers:
        return layers[expression["Ref"]]
    # An ARN (a string or an intrinsic that builds one): deployed as is, nothing here to inspect.
    if isinstance(expression, Mapping) and "Fn::Sub" in expression:
        sub = expression["Fn::Sub"]
        expression = sub[0] if isinstance(sub, list) else sub
    return Layer(name=expression if isinstance(expression, str) else "external layer", path=None)
