"""The one reader of SAM templates: parsed once, resolved as the SAM transform and CloudFormation would.

    template = sam.load(Path("template.yaml"), overrides={"Architecture": "x86_64"})
    fn = template.function("InferenceFunction")   # fn.environment, fn.timeout_s, fn.architecture...

What cannot be resolved locally stays an :class:`Unresolved` marker for the local runner to supply.
docs/testing.md ("The local stack") says what is resolved and how ``Globals`` merge.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from snapllm.errors import ConfigurationError

SERVERLESS_FUNCTION = "AWS::Serverless::Function"
FUNCTION_TYPES = (SERVERLESS_FUNCTION, "AWS::Lambda::Function")
LAYER_TYPES = ("AWS::Serverless::LayerVersion", "AWS::Lambda::LayerVersion")

#: What pseudo-parameters stand for when functions run on this machine (no stack, no account).
LOCAL_PSEUDO_PARAMETERS: Mapping[str, str] = {
    "AWS::Partition": "aws",
    "AWS::Region": "us-east-1",
    "AWS::AccountId": "123456789012",
    "AWS::StackName": "snapllm-local",
    "AWS::StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/snapllm-local/local",
    "AWS::URLSuffix": "amazonaws.com",
}

_NO_VALUE = object()  # Ref AWS::NoValue: the property is left out
_SUB_VARIABLE = re.compile(r"\$\{([^}]*)\}")


# libyaml's parser where PyYAML was built with it (its wheels are): ten times faster on template.yaml, which
# every local command, preflight and deploy-check reads.
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _CloudFormationLoader(_SafeLoader):
    """A YAML loader that keeps ``!Ref`` & co. as ``{"Ref": ...}`` / ``{"Fn::X": ...}`` mappings."""


def _construct_tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    name = suffix if suffix in ("Ref", "Condition") else f"Fn::{suffix}"
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


def read(path: Path) -> dict[str, Any]:
    """The template's YAML as written (intrinsics in long form); ConfigurationError if it is not a mapping."""
    try:
        document = yaml.load(path.read_text(), Loader=_CloudFormationLoader)
    except yaml.MarkedYAMLError as exc:
        # One line: the parser's own message spans several, with the text quoted.
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigurationError(f"cannot read {path}: not valid YAML: {exc.problem}{where}") from None
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigurationError(f"cannot read {path}: {' '.join(str(exc).split())}") from exc
    if not isinstance(document, dict):
        raise ConfigurationError(f"{path}: the template is not a mapping")
    return document


def load(
    path: Path,
    *,
    overrides: Mapping[str, str] | None = None,
    pseudo_parameters: Mapping[str, str] = LOCAL_PSEUDO_PARAMETERS,
) -> Template:
    """Reads and resolves ``path`` (module docstring); ``pseudo_parameters={}`` leaves ``AWS::*`` unresolved.

    Raises:
        ConfigurationError: The file cannot be read or has no ``Resources`` mapping.
    """
    return from_document(read(path), path, overrides=overrides, pseudo_parameters=pseudo_parameters)


def from_document(
    document: Mapping[str, Any],
    path: Path,
    *,
    overrides: Mapping[str, str] | None = None,
    pseudo_parameters: Mapping[str, str] = LOCAL_PSEUDO_PARAMETERS,
) -> Template:
    """:func:`load` of a template already read (``path``: where its relative paths start)."""
    resources = document.get("Resources")
    if not isinstance(resources, Mapping):
        raise ConfigurationError(f"{path}: no Resources")
    parameters = _parameters(document.get("Parameters") or {}, overrides or {})
    resolver = _Resolver({**pseudo_parameters, **parameters}, document.get("Conditions") or {})
    globals_function = (document.get("Globals") or {}).get("Function") or {}
    functions = []
    for name, resource in resources.items():
        if not isinstance(resource, Mapping) or resource.get("Type") not in FUNCTION_TYPES:
            continue
        if "Condition" in resource and resolver.condition(str(resource["Condition"])) is False:
            continue
        own = resource.get("Properties") or {}
        raw = merge_globals(globals_function, own) if resource["Type"] == SERVERLESS_FUNCTION else own
        functions.append(
            Function(name, resolver.resolve(raw), type=resource["Type"], template_dir=path.parent)
        )
    return Template(path, document, tuple(functions), resolver)


@dataclass(frozen=True)
class Unresolved:
    """A value only a deployment knows (``{"Ref": "ModelBucket"}``, ``{"Fn::GetAtt": [...]}``...)."""

    expression: Any
    #: For an ``Fn::Sub``: its text with every variable that could be resolved substituted, the others left
    #: as ``${Name}`` (an ARN with ``${AWS::Region}`` still names its layer and version).
    partial: str | None = None

    @property
    def references(self) -> frozenset[str]:
        return references(self.expression)

    def __str__(self) -> str:
        return json.dumps(self.expression, default=str)


def references(expression: Any) -> frozenset[str]:
    """Every logical ID an expression refers to: ``Ref X`` / ``Ref X.Alias``, ``GetAtt X.Arn``, ``${X}``."""
    found: set[str] = set()

    def visit(value: Any) -> None:
        if isinstance(value, Unresolved):
            visit(value.expression)
        elif isinstance(value, Mapping):
            if set(value) == {"Ref"} and isinstance(value["Ref"], str):
                found.add(value["Ref"].split(".", 1)[0])
            elif set(value) == {"Fn::GetAtt"} and isinstance(value["Fn::GetAtt"], list | str):
                target = value["Fn::GetAtt"]
                found.add((target[0] if isinstance(target, list) else target).split(".", 1)[0])
            elif set(value) == {"Fn::Sub"}:
                text, variables = _sub_parts(value["Fn::Sub"])
                for name in _SUB_VARIABLE.findall(text if isinstance(text, str) else ""):
                    base = name.split(".", 1)[0]
                    if not name.startswith("!") and base not in variables and not base.startswith("AWS::"):
                        found.add(base)
                visit(variables)
            else:
                for item in value.values():
                    visit(item)
        elif isinstance(value, list):
            for item in value:
                visit(item)

    visit(expression)
    return frozenset(found)


@dataclass(frozen=True)
class Function:
    """One function as it will deploy: Globals merged, intrinsics resolved, with typed accessors."""

    name: str
    properties: Mapping[str, Any]
    type: str = SERVERLESS_FUNCTION
    template_dir: Path = Path(".")

    @property
    def code_uri(self) -> str | None:
        """``CodeUri`` (``Code`` for ``AWS::Lambda::Function``) when it is a path; None for S3 locations."""
        uri = self.properties.get("CodeUri") or self.properties.get("Code")
        return uri if isinstance(uri, str) else None

    @property
    def code_dir(self) -> Path:
        """The function's code folder, relative paths taken from the template's folder."""
        if self.code_uri is None:
            raise ConfigurationError(f"{self.name}: CodeUri is not a local folder")
        return (self.template_dir / self.code_uri).resolve()

    @property
    def handler(self) -> str:
        handler = self.properties.get("Handler")
        if not isinstance(handler, str):
            raise ConfigurationError(f"{self.name}: no Handler")
        return handler

    @property
    def module_name(self) -> str:
        return self.handler.rsplit(".", 1)[0]

    @property
    def function_name(self) -> str:
        return self.handler.rsplit(".", 1)[-1]

    @property
    def handler_file(self) -> Path:
        return self.code_dir / (self.module_name.replace(".", "/") + ".py")

    @property
    def runtime(self) -> str:
        return str(self.properties.get("Runtime", ""))

    @property
    def package_type(self) -> str:
        return str(self.properties.get("PackageType", "Zip"))

    @property
    def architecture(self) -> str:
        """``arm64`` or ``x86_64`` (Lambda's default when ``Architectures`` is absent)."""
        return str((self.properties.get("Architectures") or ["x86_64"])[0])

    @property
    def timeout_s(self) -> int:
        return self._number("Timeout", 3)

    @property
    def memory_mb(self) -> int:
        return self._number("MemorySize", 128)

    @property
    def snapstart(self) -> bool:
        snap = self.properties.get("SnapStart") or {}
        return isinstance(snap, Mapping) and snap.get("ApplyOn") == "PublishedVersions"

    @property
    def durable(self) -> Mapping[str, Any] | None:
        """``DurableConfig`` (a durable function's execution timeout and retention), or None."""
        config = self.properties.get("DurableConfig")
        return config if isinstance(config, Mapping) else None

    @property
    def environment(self) -> dict[str, Any]:
        """``Environment.Variables``: plain values, or :class:`Unresolved` for what only AWS resolves."""
        return dict((self.properties.get("Environment") or {}).get("Variables") or {})

    @property
    def layers(self) -> tuple[Any, ...]:
        """``Layers`` entries: ARNs, or :class:`Unresolved` (a ``Ref`` to a layer of the template...)."""
        return tuple(self.properties.get("Layers") or ())

    @property
    def events(self) -> dict[str, Mapping[str, Any]]:
        """SAM event sources by name (``{"Type": "HttpApi", "Properties": {...}}``)."""
        events = self.properties.get("Events") or {}
        return {k: v for k, v in events.items() if isinstance(v, Mapping)}

    def _number(self, key: str, default: int) -> int:
        value = self.properties.get(key, default)
        try:
            return int(value)
        except (TypeError, ValueError):
            raise ConfigurationError(f"{self.name}: {key} is not a number: {value}") from None


@dataclass(frozen=True)
class Template:
    """A loaded template: its functions resolved, its document as written. Use :func:`load`."""

    path: Path
    document: Mapping[str, Any] = field(repr=False)
    functions: tuple[Function, ...]
    _resolver: _Resolver = field(repr=False)

    @property
    def function_names(self) -> list[str]:
        return [fn.name for fn in self.functions]

    def function(self, name: str) -> Function:
        """The function with logical ID ``name``; ConfigurationError naming the functions there are."""
        for fn in self.functions:
            if fn.name == name:
                return fn
        raise ConfigurationError(
            f"{name} is not a function in {self.path}; functions: {', '.join(self.function_names)}"
        )

    def resources(self, *types: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
        """``(logical ID, resource)`` of every resource of one of ``types``, as written."""
        for name, resource in (self.document.get("Resources") or {}).items():
            if isinstance(resource, Mapping) and resource.get("Type") in types:
                yield name, resource

    def resolve(self, value: Any) -> Any:
        """``value`` (from :attr:`document`) with intrinsics resolved as functions' properties are."""
        return self._resolver.resolve(value)

    def condition(self, name: str) -> bool | None:
        """A condition's value; None when it depends on something only a deployment knows."""
        return self._resolver.condition(name)

    def failing_rules(self) -> list[tuple[str, str]]:
        """``(rule name, AssertDescription)`` of each ``Rules`` assertion these parameter values fail: the
        reasons CloudFormation would stop the deploy before creating anything. A rule or an assertion that
        depends on something only a deployment knows is not counted as failing."""
        failing = []
        for name, rule in (self.document.get("Rules") or {}).items():
            if not isinstance(rule, Mapping):
                continue
            if "RuleCondition" in rule and self._resolver.test(rule["RuleCondition"]) is not True:
                continue
            for assertion in rule.get("Assertions") or []:
                if isinstance(assertion, Mapping) and self._resolver.test(assertion.get("Assert")) is False:
                    failing.append((str(name), " ".join(str(assertion.get("AssertDescription", "")).split())))
        return failing


def merge_globals(base: Mapping[str, Any], own: Mapping[str, Any]) -> dict[str, Any]:
    """SAM's Globals rule: mappings merge, lists add up (global entries first), the function's scalars win."""
    merged = dict(base)
    for key, value in own.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping) and not _is_intrinsic(value):
            merged[key] = merge_globals(merged[key], value)
        elif isinstance(value, list) and isinstance(merged.get(key), list):
            merged[key] = [*merged[key], *value]
        else:
            merged[key] = value
    return merged


def _is_intrinsic(value: Mapping[str, Any]) -> bool:
    key = next(iter(value), "") if len(value) == 1 else ""
    return key in {"Ref", "Condition"} or key.startswith("Fn::")


def _parameters(declared: Mapping[str, Any], overrides: Mapping[str, str]) -> dict[str, Any]:
    # An override of an undeclared name still resolves a Ref to it (the caller's intent).
    values: dict[str, Any] = {k: v for k, v in overrides.items() if k not in declared}
    for name, spec in declared.items():
        spec = spec if isinstance(spec, Mapping) else {}
        if name in overrides or "Default" in spec:  # else given at deploy time only: a Ref stays unresolved
            values[name] = _typed(str(spec.get("Type", "String")), overrides.get(name, spec.get("Default")))
    return values


def _typed(kind: str, value: Any) -> Any:
    if not isinstance(value, str):
        return value
    if kind == "Number":
        for number in (int, float):
            try:
                return number(value)
            except ValueError:
                continue
    if kind == "CommaDelimitedList" or kind.startswith("List<"):
        return value.split(",")
    return value


def _sub_parts(argument: Any) -> tuple[Any, Mapping[str, Any]]:
    if isinstance(argument, list) and len(argument) == 2 and isinstance(argument[1], Mapping):
        return argument[0], argument[1]
    return argument, {}


class _Resolver:
    """Resolves intrinsics against parameter values; what it cannot resolve becomes :class:`Unresolved`."""

    def __init__(self, values: Mapping[str, Any], conditions: Mapping[str, Any]):
        self._values = values
        self._conditions = conditions
        self._evaluated: dict[str, bool | None] = {}

    def resolve(self, value: Any) -> Any:
        if isinstance(value, Mapping):
            if len(value) == 1:
                key, argument = next(iter(value.items()))
                if key == "Ref" or key.startswith("Fn::"):
                    return self._intrinsic(value, key, argument)
            resolved = {k: self.resolve(v) for k, v in value.items()}
            return {k: v for k, v in resolved.items() if v is not _NO_VALUE}
        if isinstance(value, list):
            return [item for item in (self.resolve(v) for v in value) if item is not _NO_VALUE]
        return value

    def _intrinsic(self, expression: Mapping[str, Any], key: str, argument: Any) -> Any:
        if key == "Ref":
            if argument == "AWS::NoValue":
                return _NO_VALUE
            if isinstance(argument, str) and argument in self._values:
                return self._values[argument]
        elif key == "Fn::If" and isinstance(argument, list) and len(argument) == 3:
            chosen = self.condition(str(argument[0]))
            if chosen is not None:
                return self.resolve(argument[1 if chosen else 2])
        elif key == "Fn::Sub":
            return self._sub(expression, argument)
        elif key in ("Fn::Join", "Fn::Split") and isinstance(argument, list) and len(argument) == 2:
            delimiter, value = argument[0], self.resolve(argument[1])
            joinable = isinstance(value, list) and all(map(_is_scalar, value))
            if isinstance(delimiter, str) and key == "Fn::Split" and isinstance(value, str):
                return value.split(delimiter)
            if isinstance(delimiter, str) and key == "Fn::Join" and joinable:
                return delimiter.join(map(scalar_text, value))
        elif key == "Fn::Select" and isinstance(argument, list) and len(argument) == 2:
            index, values = self.resolve(argument[0]), self.resolve(argument[1])
            if isinstance(values, list) and str(index).isdigit() and int(index) < len(values):
                return values[int(index)]
        return Unresolved(expression)

    def _sub(self, expression: Mapping[str, Any], argument: Any) -> Any:
        text, variables = _sub_parts(argument)
        if not isinstance(text, str):
            return Unresolved(expression)
        local = {name: self.resolve(value) for name, value in variables.items()}
        unresolved = False

        def substitute(match: re.Match[str]) -> str:
            nonlocal unresolved
            name = match.group(1)
            if name.startswith("!"):
                return "${" + name[1:] + "}"  # ${!Literal} is the literal text ${Literal}
            value = local[name] if name in local else self._values.get(name, _NO_VALUE)
            if not _is_scalar(value):
                unresolved = True
                return match.group(0)
            return scalar_text(value)

        result = _SUB_VARIABLE.sub(substitute, text)
        return Unresolved(expression, partial=result) if unresolved else result

    def condition(self, name: str) -> bool | None:
        if name not in self._evaluated:
            self._evaluated[name] = None  # a condition that refers to itself stays undecided
            definition = self._conditions.get(name)
            self._evaluated[name] = None if definition is None else self._test(definition)
        return self._evaluated[name]

    def test(self, expression: Any) -> bool | None:
        """A condition expression's value (``Fn::Equals`` / ``Not`` / ``And`` / ``Or`` / ``Condition``), as in
        ``Conditions`` and ``Rules``; None when it depends on something only a deployment knows."""
        return self._test(expression)

    def _test(self, expression: Any) -> bool | None:
        if not (isinstance(expression, Mapping) and len(expression) == 1):
            return None
        key, argument = next(iter(expression.items()))
        if key == "Condition":
            return self.condition(str(argument))
        if not isinstance(argument, list):
            return None
        if key == "Fn::Equals" and len(argument) == 2:
            left, right = (self.resolve(side) for side in argument)
            if not (_is_scalar(left) and _is_scalar(right)):
                return None
            return scalar_text(left) == scalar_text(right)
        if key == "Fn::Not" and len(argument) == 1:
            inner = self._test(argument[0])
            return None if inner is None else not inner
        if key in {"Fn::And", "Fn::Or"}:
            results = [self._test(item) for item in argument]
            decisive = key == "Fn::Or"  # any True decides an Or, any False an And
            if decisive in results:
                return decisive
            return None if None in results else not decisive
        return None


def _is_scalar(value: Any) -> bool:
    return isinstance(value, str | int | float | bool)


def scalar_text(value: Any) -> str:
    """A value as CloudFormation passes it on as text: YAML booleans become ``true`` / ``false``."""
    return str(value).lower() if isinstance(value, bool) else str(value)
