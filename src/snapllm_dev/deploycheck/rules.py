"""The deploy rules: each takes the transformed stack (and what the functions' code calls) and returns the
problems it finds, as :class:`~snapllm_dev.preflight.rules.Finding` lines; :data:`DEPLOY_RULES` lists them.

    findings = run_deploy_rules(DeployView(stack, calls))
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from snapllm_dev import sam
from snapllm_dev.deploycheck.calls import AwsCall
from snapllm_dev.deploycheck.transform import Stack
from snapllm_dev.preflight.rules import Finding
from snapllm_dev.settings_doc import check_variables, declared_variables

#: The resource type of the custom resource that puts the model in place (template.yaml's ModelObject).
MODEL_RESOURCE_TYPE = "Custom::ModelObject"
MODEL_KEY_VARIABLE = "SNAPLLM_MODEL_KEY"
API_KEY_PATH_VARIABLE = "SNAPLLM_API_KEY_PARAMETER_PATH"
#: Headers the OpenAI JS SDK sends from a browser (besides CORS-safelisted ones): CORS must allow each.
OPENAI_JS_SDK_HEADERS = (
    "authorization",
    "content-type",
    "openai-organization",
    "openai-project",
    "x-stainless-arch",
    "x-stainless-lang",
    "x-stainless-os",
    "x-stainless-package-version",
    "x-stainless-retry-count",
    "x-stainless-runtime",
    "x-stainless-runtime-version",
    "x-stainless-timeout",
)
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
    version must wait for the resource that puts its model (the object at its model key) in the bucket. A
    function whose model no resource places (an embedding model the user uploads) gets a note."""
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
        key = _variables(stack, function).get(MODEL_KEY_VARIABLE)
        placing = [model for model in models if stack.resources[model]["Properties"].get("Key") == key]
        if models and not placing:
            findings.append(
                _note(
                    version,
                    f"{function}'s model ({_text(key)}) is placed by no {MODEL_RESOURCE_TYPE}: it must be in "
                    "the bucket before this deploy (snapllm model push FILE --stack NAME --key KEY)",
                )
            )
        for model in placing:
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


def check_api_key_wiring(view: DeployView) -> list[Finding]:
    """ApiAuth=KEY: the HTTP API's route goes through the key authorizer, whose verdict API Gateway caches
    as long as the streaming function keeps a key's record; the authorizer's role may read the stack's key
    hashes and nothing else; a public Function URL belongs to an app that checks keys, and the router refuses
    what the authorizer refused. Without KEY: no authorizer, no public URL."""
    stack = view.stack
    authorizers = {
        name: resource["Properties"]
        for name, resource in stack.of_type("AWS::ApiGatewayV2::Authorizer").items()
        if resource["Properties"].get("AuthorizerType") == "REQUEST"
    }
    urls = stack.of_type("AWS::Lambda::Url")
    public_urls = sorted(name for name, url in urls.items() if url["Properties"].get("AuthType") == "NONE")
    if not authorizers:
        return [
            _error(name, "a public Function URL (AuthType NONE) without ApiAuth=KEY: nothing checks a key")
            for name in public_urls
        ]
    findings: list[Finding] = []
    for name, properties in sorted(authorizers.items()):
        findings += _check_key_authorizer(view, name, properties)
    for name, url in sorted(urls.items()):
        function = _function_behind(stack, url["Properties"].get("TargetFunctionArn"))
        variables = _variables(stack, function) if function else {}
        if url["Properties"].get("AuthType") != "NONE":
            findings.append(_error(name, "ApiAuth=KEY, but the Function URL still takes SigV4 (AWS_IAM)"))
        elif not _text(variables.get(API_KEY_PATH_VARIABLE)):
            findings.append(_error(name, f"is public, but {function} is not given {API_KEY_PATH_VARIABLE}"))
        else:
            findings += _check_reads_only_key_hashes(stack, str(function), variables)
    for name in sorted(stack.of_type("AWS::Lambda::Function")):
        variables = _variables(stack, name)
        if "SNAPLLM_API_AUTH" in variables and _text(variables["SNAPLLM_API_AUTH"]) != "KEY":
            findings.append(
                _error(name, "the HTTP API checks keys, but the router is not told SNAPLLM_API_AUTH=KEY")
            )
    return findings


def check_cors(view: DeployView) -> list[Finding]:
    """CorsAllowedOrigins set: the HTTP API and the Function URL allow those origins, the methods the routes
    take and the headers the OpenAI JS SDK sends, and preflights (which carry no key) get past the
    authorizer; unset: neither answers cross-origin requests."""
    stack = view.stack
    origins = (
        stack.template.resolve({"Ref": "CorsAllowedOrigins"})
        if _has_parameter(stack, "CorsAllowedOrigins")
        else []
    )
    origins = [origin for origin in origins or [] if origin]
    configured = {
        name: resource["Properties"].get(key)
        for kind, key in (("AWS::ApiGatewayV2::Api", "CorsConfiguration"), ("AWS::Lambda::Url", "Cors"))
        for name, resource in stack.of_type(kind).items()
    }
    if not origins:
        return [
            _error(name, "has a CORS configuration, but CorsAllowedOrigins is empty")
            for name, cors in sorted(configured.items())
            if cors
        ]
    findings = []
    for name, cors in sorted(configured.items()):
        if not cors:
            findings.append(_error(name, "CorsAllowedOrigins is set, but it has no CORS configuration"))
            continue
        if list(cors.get("AllowOrigins") or []) != origins:
            findings.append(_error(name, f"allows the origins {cors.get('AllowOrigins')}, not {origins}"))
        headers = {str(header).lower() for header in cors.get("AllowHeaders") or []}
        if missing := sorted(set(OPENAI_JS_SDK_HEADERS) - headers):
            findings.append(
                _error(name, f"CORS does not allow headers the OpenAI JS SDK sends: {', '.join(missing)}")
            )
        if missing := sorted(
            {"GET", "POST"} - {str(method).upper() for method in cors.get("AllowMethods") or []}
        ):
            findings.append(_error(name, f"CORS does not allow the methods {', '.join(missing)}"))
    routes = stack.of_type("AWS::ApiGatewayV2::Route").values()
    guarded = any(route["Properties"].get("AuthorizationType") not in (None, "NONE") for route in routes)
    preflight = any(
        str(route["Properties"].get("RouteKey", "")).startswith("OPTIONS ")
        and route["Properties"].get("AuthorizationType") == "NONE"
        for route in routes
    )
    if guarded and not preflight:
        findings.append(
            _error(
                "HttpApi",
                "CORS preflights (OPTIONS, no key) would meet the authorizer: add an OPTIONS route without "
                "auth",
            )
        )
    return findings


DEPLOY_RULES: tuple[DeployRule, ...] = (
    check_snapstart_waits_for_the_model,
    check_roles_allow_every_call,
    check_roles_allow_nothing_more,
    check_every_variable_is_set,
    check_api_key_wiring,
    check_cors,
)


def run_deploy_rules(view: DeployView, rules: Iterable[DeployRule] = DEPLOY_RULES) -> list[Finding]:
    return [finding for rule in rules for finding in rule(view)]


def _check_key_authorizer(view: DeployView, name: str, properties: Mapping[str, Any]) -> list[Finding]:
    stack = view.stack
    findings = []
    if "$request.header.Authorization" not in (properties.get("IdentitySource") or []):
        findings.append(_error(name, "does not take its key from $request.header.Authorization"))
    if (
        properties.get("AuthorizerPayloadFormatVersion") != "2.0"
        or properties.get("EnableSimpleResponses") is not True
    ):
        findings.append(_error(name, "must answer in the simple response format (payload 2.0)"))
    ttl = properties.get("AuthorizerResultTtlInSeconds")
    if not isinstance(ttl, int) or not 0 <= ttl <= 3600:
        findings.append(_error(name, f"caches verdicts for {ttl!r} s; API Gateway takes 0-3600"))
    function = next(
        (
            ref
            for ref in sam.references(properties.get("AuthorizerUri"))
            if ref in stack.of_type("AWS::Lambda::Function")
        ),
        None,
    )
    if function is None:
        return [*findings, _error(name, "its AuthorizerUri names no function of the stack")]
    routes = stack.of_type("AWS::ApiGatewayV2::Route")
    for route_name, route in sorted(routes.items()):
        route_properties = route["Properties"]
        if route_properties.get("AuthorizationType") == "NONE" and str(
            route_properties.get("RouteKey", "")
        ).startswith("OPTIONS "):
            continue  # CORS preflights: the router answers them only, with no content
        if route_properties.get("AuthorizationType") != "CUSTOM" or name not in sam.references(
            route_properties.get("AuthorizerId")
        ):
            findings.append(_error(route_name, f"does not go through the key authorizer {name}"))
    permitted = [
        permission["Properties"]
        for permission in stack.of_type("AWS::Lambda::Permission").values()
        if function in sam.references(permission["Properties"].get("FunctionName"))
        and permission["Properties"].get("Principal") == "apigateway.amazonaws.com"
    ]
    if not permitted:
        findings.append(_error(function, "API Gateway may not invoke it (no AWS::Lambda::Permission)"))
    variables = _variables(stack, function)
    findings += _check_reads_only_key_hashes(stack, function, variables)
    for other in sorted(stack.of_type("AWS::Lambda::Function")):
        cache = _variables(stack, other).get("SNAPLLM_API_KEY_CACHE_S")
        if cache is not None and _text(cache) != str(ttl):
            findings.append(
                _error(
                    other,
                    f"keeps key records {_text(cache)} s, but API Gateway caches verdicts {ttl} s: a revoked "
                    "key would keep working as long as the longer of the two",
                )
            )
    return findings


def _check_reads_only_key_hashes(stack: Stack, function: str, variables: Mapping[str, Any]) -> list[Finding]:
    """The function reads its key path (every parameter under it) and no other parameter."""
    path = _text(variables.get(API_KEY_PATH_VARIABLE))
    if not path:
        return [_error(function, f"checks keys but is not given {API_KEY_PATH_VARIABLE}")]
    findings = []
    for statement in _statements(stack, function):
        actions = statement.get("Action") or []
        actions = [actions] if isinstance(actions, str) else list(actions)
        if not any(action.startswith("ssm:") for action in actions):
            continue
        resources = statement.get("Resource") or []
        resources = [resources] if not isinstance(resources, list) else resources
        if actions != ["ssm:GetParameter"]:
            findings.append(
                _error(
                    function,
                    f"may {', '.join(actions)} in SSM; reading key hashes needs ssm:GetParameter only",
                )
            )
        for resource in resources:
            text = _text(resource)
            if not text.endswith(f":parameter{path}*") or "*" in text[:-1]:
                findings.append(_error(function, f"may read SSM parameters {text}, not only {path}*"))
    return findings


def _statements(stack: Stack, function: str) -> list[Mapping[str, Any]]:
    roles = sam.references(stack.resources[function]["Properties"].get("Role")) & set(
        stack.of_type("AWS::IAM::Role")
    )
    found = []
    for role in roles:
        for policy in stack.resources[role]["Properties"].get("Policies") or []:
            found += [
                s
                for s in (policy.get("PolicyDocument") or {}).get("Statement") or []
                if s.get("Effect") == "Allow"
            ]
    return found


def _variables(stack: Stack, function: str) -> Mapping[str, Any]:
    return ((stack.resources[function]["Properties"].get("Environment") or {}).get("Variables")) or {}


def _function_behind(stack: Stack, target: Any) -> str | None:
    """The function a Function URL's target (the function, or an alias of it) belongs to."""
    functions = stack.of_type("AWS::Lambda::Function")
    for name in sam.references(target):
        if name in functions:
            return name
        if name in stack.resources:
            found = _function_behind(stack, stack.resources[name]["Properties"].get("FunctionName"))
            if found:
                return found
    return None


def _has_parameter(stack: Stack, name: str) -> bool:
    return name in (stack.template.document.get("Parameters") or {})


def _text(value: Any) -> str:
    """A resolved value as text; an ``Fn::Sub`` naming what only a deployment knows, as its partial text."""
    if isinstance(value, sam.Unresolved):
        return value.partial or str(value)
    return "" if value is None else str(value)


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
