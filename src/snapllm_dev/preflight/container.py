"""The rules for a function as a running container sees it: what :mod:`snapllm_dev.preflight.probe` reported.

The build rules (:mod:`snapllm_dev.preflight.rules`) read the packages as files; these read the container that
``sam local`` started from them, so they see what only the container shows: where the layers were mounted,
where each module is really imported from, and the variables the function was really given. Like the build
rules, each is a pure function of one target, listed in :data:`CONTAINER_RULES`.

    target = ContainerTarget(ContainerView.from_probe("InferenceFunction", probe_json), declared, local)
    findings = run_container_rules([target])
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from snapllm_dev.preflight.errors import ProbeError
from snapllm_dev.preflight.rules import LAYER_ROOT, TASK_ROOT, Finding
from snapllm_dev.settings_doc import check_variables

LAYER_PYTHON = f"{LAYER_ROOT}/python"
RUNTIME_ROOT = "/var/runtime"
#: The project's own variables: one the template sets that no settings class declares is a mistake.


@dataclass(frozen=True)
class ModuleView:
    """Where the runtime imports a top-level module from, and every place on its path that provides it."""

    origin: str | None
    candidates: tuple[str, ...]


@dataclass(frozen=True)
class ContainerView:
    """One function's running container, as the probe saw it."""

    function: str
    handler: str | None
    environment: Mapping[str, str]
    sys_path: tuple[str, ...]
    modules: Mapping[str, ModuleView]
    opt_python: bool

    @classmethod
    def from_probe(cls, function: str, data: Mapping[str, Any]) -> ContainerView:
        """Reads the probe's JSON; :class:`ProbeError` if the probe reported one."""
        if "error" in data:
            raise ProbeError(f"{function}: {data['error']}")
        return cls(
            function=function,
            handler=(data.get("runtime") or {}).get("handler"),
            environment=dict(data.get("environment") or {}),
            sys_path=tuple(data.get("sys_path") or ()),
            modules={
                name: ModuleView(info.get("origin"), tuple(info.get("candidates") or ()))
                for name, info in (data.get("modules") or {}).items()
            },
            opt_python=bool(data.get("opt_python")),
        )


@dataclass(frozen=True)
class ContainerTarget:
    """What a container rule looks at: the view, the variables the function's code declares (each with
    whether it is required; None when the package declares none for it), whether its template gives it
    layers, and the variables a local run added to the template (endpoints, never deployed)."""

    view: ContainerView
    declared: Mapping[str, bool] | None
    template_variables: frozenset[str]
    has_layers: bool = True
    local_variables: frozenset[str] = field(default_factory=frozenset)


ContainerRule = Callable[[ContainerTarget], list[Finding]]


def check_layers_mounted(target: ContainerTarget) -> list[Finding]:
    """A function with layers finds them at /opt/python, the folder the Python runtime imports from."""
    view = target.view
    if not target.has_layers:
        return []
    findings = []
    if not view.opt_python:
        findings.append(
            _error(view, f"no {LAYER_PYTHON} in the container: the layers are not where Python looks")
        )
    elif LAYER_PYTHON not in view.sys_path:
        findings.append(_error(view, f"{LAYER_PYTHON} is not on the runtime's search path"))
    return findings


def check_handler_module(target: ContainerTarget) -> list[Finding]:
    """The handler's module is imported from the function's own code at /var/task."""
    view = target.view
    if not view.handler or "." not in view.handler:
        return [_error(view, f"the runtime has no handler of the form module.function ({view.handler!r})")]
    module = view.handler.rsplit(".", 1)[0].split(".")[0]
    found = view.modules.get(module)
    origin = found.origin if found else None
    if origin is None or not _under(origin, TASK_ROOT):
        return [_error(view, f"handler module {module!r} resolves to {origin or 'nothing'}, not {TASK_ROOT}")]
    return []


def check_layer_modules(target: ContainerTarget) -> list[Finding]:
    """Every module a layer provides, and the function's code does not, is imported from that layer."""
    findings = []
    view = target.view
    for name, module in sorted(view.modules.items()):
        in_layer = [c for c in module.candidates if _under(c, LAYER_PYTHON)]
        in_code = [c for c in module.candidates if _under(c, TASK_ROOT)]
        if not in_layer or in_code:
            continue
        if module.origin is None or not _under(module.origin, LAYER_PYTHON):
            where = module.origin or "nothing"
            findings.append(_error(view, f"{name} comes from the layers but resolves to {where}"))
    return findings


def check_shadowing(target: ContainerTarget) -> list[Finding]:
    """Lists modules that more than one place provides: the first on the path wins, the others are dead
    weight or, worse, a second version some code expected. The function's own copy over the runtime's (as
    the router packages its own boto3) is a choice; anything else shadowing a layer is worth a look."""
    findings = []
    view = target.view
    for name, module in sorted(view.modules.items()):
        if len(module.candidates) < 2:
            continue
        winner, *others = module.candidates
        if module.origin is not None and not _under(module.origin, winner):
            winner = next((c for c in module.candidates if _under(module.origin, c)), winner)
            others = [c for c in module.candidates if c != winner]
        if all(_under(o, RUNTIME_ROOT) for o in others):
            continue
        shadowed = ", ".join(others)
        findings.append(_note(view, f"{name} from {winner} shadows {shadowed}"))
    return findings


def check_environment(target: ContainerTarget) -> list[Finding]:
    """The variables the template gives the function are the ones its code reads: a project variable that
    nothing reads is an error (a typo, or a setting that was removed); a required one that is missing too;
    optional ones left unset (their defaults apply) are listed."""
    view = target.view
    if target.declared is None:
        return [
            _note(view, "this package declares no settings for the function: its variables are not checked")
        ]
    # What the template sets: the local run's own additions (endpoints, never deployed) do not count.
    given = {name for name in view.environment if name in target.template_variables}
    check = check_variables(target.declared, given - target.local_variables)
    missing = [name for name in check.missing if name not in view.environment]
    defaulted = [name for name in check.defaulted if name not in view.environment]
    findings = [
        _error(view, f"the template sets {name}, which the function never reads") for name in check.unread
    ]
    findings += [
        _error(view, f"the function needs {name}, which the template does not set") for name in missing
    ]
    if defaulted:
        findings.append(
            _note(view, f"{len(defaulted)} optional variables keep their defaults: {', '.join(defaulted)}")
        )
    return findings


CONTAINER_RULES: tuple[ContainerRule, ...] = (
    check_layers_mounted,
    check_handler_module,
    check_layer_modules,
    check_shadowing,
    check_environment,
)


def run_container_rules(
    targets: Iterable[ContainerTarget], rules: Sequence[ContainerRule] = CONTAINER_RULES
) -> list[Finding]:
    """Every rule on every target; a target's errors before its notes."""
    findings = []
    for target in targets:
        found = [finding for rule in rules for finding in rule(target)]
        findings += [f for f in found if f.severity == "error"] + [f for f in found if f.severity == "note"]
    return findings


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _error(view: ContainerView, message: str) -> Finding:
    return Finding("error", view.function, message)


def _note(view: ContainerView, message: str) -> Finding:
    return Finding("note", view.function, message)
