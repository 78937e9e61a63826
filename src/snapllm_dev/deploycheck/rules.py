"""The deploy rules: each takes the transformed stack (and what the functions' code calls) and returns the
problems it finds, as :class:`~snapllm_dev.preflight.rules.Finding` lines; :data:`DEPLOY_RULES` lists them.

    findings = run_deploy_rules(DeployView(stack, calls))
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from snapllm_dev import sam
from snapllm_dev.deploycheck.calls import AwsCall
from snapllm_dev.deploycheck.transform import Stack
from snapllm_dev.preflight.rules import Finding
from snapllm_dev.settings_doc import check_variables, declared_variables

#: The resource type of the custom resource that puts the model in place (template.yaml's ModelObject).
MODEL_RESOURCE_TYPE = "Custom::ModelObject"
MODEL_KEY_VARIABLE = "SNAPLLM_MODEL_KEY"
#: What the AWS managed policies a SAM role gets allow (the AWS managed policy reference).
MANAGED_POLICY_ACTIONS: dict[str, tuple[str, ...]] = {
    "service-role/AWSLambdaBasicExecutionRole": (
        "logs:CreateLogGroup",
        "logs:CreateLogStream",
        "logs:PutLogEvents",
    ),
    "service-role/AWSLambdaBasicDurableExecutionRolePolicy": (
        "logs:CreateLogGroup",
        "logs:CreateLogStream",
        "logs:PutLogEvents",
        "lambda:CheckpointDurableExecution",
        "lambda:GetDurableExecutionState",
    ),
    "AWSXrayWriteOnlyAccess": (
        "xray:PutTraceSegments",
        "xray:PutTelemetryRecords",
        "xray:GetSamplingRules",
        "xray:GetSamplingTargets",
        "xray:GetSamplingStatisticSummaries",
    ),
}
#: Actions the Lambda service uses with the function's role (its logs, its traces), not the code.
PLATFORM_ACTIONS = ("logs:*", "xray:*")
#: Actions granted for what they change in another call's answer: with s3:ListBucket, S3 answers a
#: GetObject of a missing key with 404 (NoSuchKey) instead of 403, which the code tells apart.
SUPPORTING_ACTIONS: dict[str, str] = {"s3:ListBucket": "s3:GetObject"}


@dataclass(frozen=True)
class DeployView:
    """The transformed stack under one set of parameter values, and each function's AWS calls."""

    stack: Stack
    calls: Mapping[str, Sequence[AwsCall]]
    #: Whether these parameters have the stack put the model in place (ModelSource); without, the model is
    #: uploaded before the deploy and no resource of the stack can be waited for.
    places_model: bool = True


DeployRule = Callable[[DeployView], list[Finding]]


def check_snapstart_waits_for_the_model(view: DeployView) -> list[Finding]:
    """A SnapStart version runs its init when it is published, and the init loads the model: every such
    version must wait for the resource that puts the model in the bucket."""
    stack = view.stack
    if not view.places_model:
        return []
    models = sorted(stack.of_type(MODEL_RESOURCE_TYPE))
    findings = []
    for version, resource in sorted(stack.of_type("AWS::Lambda::Version").items()):
        function = _function_of(stack, resource)
        if function is None or not _loads_a_model_with_snapstart(stack, function):
            continue
        if not models:
            findings.append(
                _error(
                    version,
                    f"publishes a SnapStart version of {function}, whose init loads the model, but no "
                    f"{MODEL_RESOURCE_TYPE} resource puts the model in place first",
                )
            )
        for model in models:
            if model not in stack.depends_on(version):
                findings.append(
                    _error(
                        version,
                        f"the SnapStart version of {function} does not wait for {model}: publishing it runs "
                        f"the init, which would load the model before it is in the bucket. Make {function} "
                        f"refer to it (SNAPLLM_MODEL_SHA256: !GetAtt {model}.Sha256) or depend on it",
                    )
                )
    return findings


def check_roles_allow_every_call(view: DeployView) -> list[Finding]:
    """Each function's role allows every AWS call its code makes."""
    findings = []
    for function, calls in sorted(view.calls.items()):
        allowed = _role_actions(view.stack, function)
        if allowed is None:
            continue
        for call in calls:
            if not _allows(allowed, call.action):
                findings.append(
                    _error(
                        function,
                        f"its code calls {call.service} {call.operation} ({call.where}), but its role "
                        f"does not allow {call.action}",
                    )
                )
    return findings


def check_roles_allow_nothing_more(view: DeployView) -> list[Finding]:
    """Each function's role allows only what its code calls (and what Lambda itself needs of it)."""
    findings = []
    for function, calls in sorted(view.calls.items()):
        allowed = _role_actions(view.stack, function)
        if allowed is None:
            continue
        used = {call.action for call in calls}
        for action in sorted(allowed):
            if any(fnmatch.fnmatchcase(action, pattern) for pattern in PLATFORM_ACTIONS):
                continue
            if action in used or SUPPORTING_ACTIONS.get(action) in used:
                continue
            if "*" in action and any(fnmatch.fnmatchcase(u, action) for u in used):
                findings.append(
                    _error(function, f"its role allows {action}: name the actions its code calls")
                )
                continue
            findings.append(_error(function, f"its role allows {action}, which its code never calls"))
    return findings


def check_every_variable_is_set(view: DeployView) -> list[Finding]:
    """Each function is given every variable its code requires, and none of this project's that it ignores."""
    findings = []
    for function, resource in sorted(view.stack.of_type("AWS::Lambda::Function").items()):
        declared = declared_variables(function)
        if declared is None:
            findings.append(_note(function, "this package declares no settings for it: variables unchecked"))
            continue
        variables = ((resource["Properties"].get("Environment") or {}).get("Variables")) or {}
        check = check_variables(declared, set(variables))
        findings += [_error(function, f"sets {name}, which its code never reads") for name in check.unread]
        findings += [
            _error(function, f"needs {name}, which the template does not set") for name in check.missing
        ]
    return findings


DEPLOY_RULES: tuple[DeployRule, ...] = (
    check_snapstart_waits_for_the_model,
    check_roles_allow_every_call,
    check_roles_allow_nothing_more,
    check_every_variable_is_set,
)


def run_deploy_rules(view: DeployView, rules: Iterable[DeployRule] = DEPLOY_RULES) -> list[Finding]:
    return [finding for rule in rules for finding in rule(view)]


def _function_of(stack: Stack, version: dict) -> str | None:
    names = sam.references(version["Properties"].get("FunctionName"))
    return next((name for name in names if name in stack.of_type("AWS::Lambda::Function")), None)


def _loads_a_model_with_snapstart(stack: Stack, function: str) -> bool:
    properties = stack.resources[function]["Properties"]
    snapstart = (properties.get("SnapStart") or {}).get("ApplyOn") == "PublishedVersions"
    variables = (properties.get("Environment") or {}).get("Variables") or {}
    return snapstart and MODEL_KEY_VARIABLE in variables


def _role_actions(stack: Stack, function: str) -> set[str] | None:
    """The actions the function's role allows (its inline statements and known managed policies); None when
    the role is not in the template."""
    roles = sam.references(stack.resources[function]["Properties"].get("Role")) & set(
        stack.of_type("AWS::IAM::Role")
    )
    if not roles:
        return None
    properties = stack.resources[next(iter(roles))]["Properties"]
    actions: set[str] = set()
    for policy in properties.get("Policies") or []:
        for statement in (policy.get("PolicyDocument") or {}).get("Statement") or []:
            if statement.get("Effect") == "Allow":
                action = statement.get("Action") or []
                actions.update([action] if isinstance(action, str) else action)
    for arn in properties.get("ManagedPolicyArns") or []:
        text = arn.partial if isinstance(arn, sam.Unresolved) and arn.partial else str(arn)
        name = text.split(":policy/", 1)[-1]
        actions.update(MANAGED_POLICY_ACTIONS.get(name, (f"<managed policy {name}>",)))
    return actions


def _allows(allowed: set[str], action: str) -> bool:
    return any(fnmatch.fnmatchcase(action, pattern) for pattern in allowed)


def _error(resource: str, message: str) -> Finding:
    return Finding("error", resource, message)


def _note(resource: str, message: str) -> Finding:
    return Finding("note", resource, message)
