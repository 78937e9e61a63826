"""Read a function's definition from ``template.yaml``, as ``sam local invoke`` does.

    spec = FunctionSpec.from_template(Path("template.yaml"), "InferenceFunction")
    spec.handler_file, spec.environment["SNAPLLM_MODEL_KEY"], spec.timeout_s

Intrinsic functions are resolved only where a value is a plain ``!Ref`` to a parameter (its default);
anything else (``!If``, ``!GetAtt``...) is left unresolved and the local runner supplies a value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from snapllm.errors import ConfigurationError


class _CloudFormationLoader(yaml.SafeLoader):
    """A YAML loader that keeps ``!Ref`` & co. as ``{"Ref": ...}`` / ``{"Fn::X": ...}`` mappings."""


def _construct_tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    name = "Ref" if suffix == "Ref" else f"Fn::{suffix}"
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
        if suffix == "GetAtt" and isinstance(value, str):
            value = value.split(".", 1)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    return {name: value}


_CloudFormationLoader.add_multi_constructor("!", _construct_tag)


def load_template(path: Path) -> dict[str, Any]:
    try:
        return yaml.load(path.read_text(), Loader=_CloudFormationLoader)
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigurationError(f"cannot read {path}: {exc}") from exc


def _resolve(value: Any, parameters: dict[str, Any]) -> Any:
    if isinstance(value, dict) and set(value) == {"Ref"} and value["Ref"] in parameters:
        return parameters[value["Ref"]]
    return value


@dataclass(frozen=True)
class FunctionSpec:
    """What the local runner needs to know about one ``AWS::Serverless::Function``."""

    name: str
    code_dir: Path
    handler: str
    runtime: str
    timeout_s: int
    memory_mb: int
    snapstart: bool
    durable: bool
    environment: dict[str, Any] = field(default_factory=dict)

    @property
    def module_name(self) -> str:
        return self.handler.rsplit(".", 1)[0]

    @property
    def function_name(self) -> str:
        return self.handler.rsplit(".", 1)[1]

    @property
    def handler_file(self) -> Path:
        return self.code_dir / (self.module_name.replace(".", "/") + ".py")

    @classmethod
    def from_template(cls, template_path: Path, name: str) -> FunctionSpec:
        template = load_template(template_path)
        resources = template.get("Resources") or {}
        resource = resources.get(name)
        functions = sorted(k for k, v in resources.items() if v.get("Type") == "AWS::Serverless::Function")
        if resource is None or resource.get("Type") != "AWS::Serverless::Function":
            raise ConfigurationError(
                f"{name} is not a function in {template_path}; functions: {', '.join(functions)}"
            )
        parameters = {k: v.get("Default") for k, v in (template.get("Parameters") or {}).items()}
        globals_ = (template.get("Globals") or {}).get("Function") or {}
        props = {**globals_, **(resource.get("Properties") or {})}
        env = {
            **((globals_.get("Environment") or {}).get("Variables") or {}),
            **((props.get("Environment") or {}).get("Variables") or {}),
        }
        return cls(
            name=name,
            code_dir=(template_path.parent / str(props.get("CodeUri", "."))).resolve(),
            handler=str(props["Handler"]),
            runtime=str(props.get("Runtime", "")),
            timeout_s=int(_resolve(props.get("Timeout", 3), parameters)),
            memory_mb=int(_resolve(props.get("MemorySize", 128), parameters)),
            snapstart=(props.get("SnapStart") or {}).get("ApplyOn") == "PublishedVersions",
            durable="DurableConfig" in props,
            environment={k: _resolve(v, parameters) for k, v in env.items()},
        )
