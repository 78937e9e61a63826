"""``snapllm deploy-check``: the deploy rules on the template as CloudFormation would receive it, as given
and with ``ModelSource`` set, then the redeploy check (:mod:`snapllm_dev.deploycheck.redeploy`).

    snapllm deploy-check                                   # template.yaml, default parameters
    snapllm deploy-check --parameter-overrides Architecture=x86_64 ApiAuth=JWT

Prints each function's AWS calls and the findings. docs/deploy.md lists the checks.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from snapllm.errors import ConfigurationError
from snapllm_dev import sam
from snapllm_dev.deploycheck.calls import AwsCall, aws_calls
from snapllm_dev.deploycheck.redeploy import check_redeploys, code_folders
from snapllm_dev.deploycheck.rules import DeployView, run_deploy_rules
from snapllm_dev.deploycheck.transform import Stack, folder_digest, transformed
from snapllm_dev.preflight.regions import region_of, region_problems
from snapllm_dev.preflight.rules import Finding

#: Parameters under which the stack copies the model itself (any https URL and digest will do here).
MODEL_SOURCE_SCENARIO = {
    "ModelSource": "https://deploy-check.invalid/model.gguf",
    "ModelSha256": "0" * 64,
}


#: Parameters under which the stack serves an embedding model of its own (EmbeddingFunction).
EMBEDDING_SCENARIO = {
    "EmbeddingModelKey": "models/deploy-check-embedding.gguf",
    "EmbeddingModelName": "deploy-check-embedding",
}


#: Parameters under which browsers of one origin may call the API (CORS).
CORS_SCENARIO = {"CorsAllowedOrigins": "https://app.deploy-check.invalid"}


def scenarios(template: Path, overrides: dict[str, str]) -> list[tuple[str, dict[str, str]]]:
    """The parameter sets to check: as given, and with each optional part the template has switched on
    (ModelSource, an embedding model, CORS, each other ApiAuth)."""
    found = [("as given", overrides)]
    parameters = sam.read(template).get("Parameters") or {}
    if "ModelSource" in parameters and not overrides.get("ModelSource"):
        found.append(("with ModelSource", {**overrides, **MODEL_SOURCE_SCENARIO}))
    if "EmbeddingModelKey" in parameters and not overrides.get("EmbeddingModelKey"):
        found.append(("with an embedding model", {**overrides, **EMBEDDING_SCENARIO}))
    # The API's auth and CORS wiring under each choice the stack offers (check_api_key_wiring, check_cors).
    if "CorsAllowedOrigins" in parameters and not overrides.get("CorsAllowedOrigins"):
        found.append(("with CorsAllowedOrigins", {**overrides, **CORS_SCENARIO}))
    if "ApiAuth" in parameters:
        for auth in parameters["ApiAuth"].get("AllowedValues") or []:
            if auth != overrides.get("ApiAuth", parameters["ApiAuth"].get("Default")):
                found.append((f"with ApiAuth={auth}", {**overrides, "ApiAuth": auth}))
    return found


def check(
    template: Path, overrides: dict[str, str], *, redeploys: bool = True, region: str | None = None
) -> list[tuple[str, list[Finding]]]:
    """Findings per scenario, then (``redeploys``) those of :func:`check_redeploys`: does each change of
    code or parameter publish new versions of exactly the functions it reaches. ConfigurationError when
    the template cannot be read or transformed."""
    results = []
    printed: set[str] = set()
    # What is the same in every scenario is read once: the template, its code folders' digests, and each
    # function's calls (they depend on its code only).
    document = sam.read(template)
    digests = {folder: folder_digest(template.parent / folder) for folder in code_folders(template)}
    known: dict[tuple[str, Path, Path], list[AwsCall]] = {}

    def calls_of(fn: sam.Function) -> list[AwsCall]:
        key = (fn.name, fn.handler_file, fn.code_dir)
        if key not in known:
            known[key] = aws_calls(fn)
        return list(known[key])

    for name, parameters in scenarios(template, overrides):
        stack = Stack.of(transformed(template, parameters, code_digests=digests), parameters, path=template)
        source = sam.from_document(document, template, overrides=parameters)
        calls = {fn.name: calls_of(fn) for fn in source.functions if fn.name in stack.resources}
        view = DeployView(stack, calls, places_model=bool(parameters.get("ModelSource")))
        # The template's Rules: CloudFormation stops such a deploy before creating anything (by design).
        stops = [
            Finding("note", rule, f"a deploy with these parameters stops before creating anything: {why}")
            for rule, why in source.failing_rules()
        ]
        results.append((name, stops + run_deploy_rules(view)))
        # Each function once, from the first scenario that has it (ModelSourceFunction: with ModelSource).
        for function, function_calls in sorted(calls.items()):
            if function not in printed:
                printed.add(function)
                actions = sorted({call.action for call in function_calls}) or ["none"]
                print(f"  {function} calls: {', '.join(actions)}")
    if region is not None:
        functions = sam.load(template, overrides=overrides, pseudo_parameters={}).functions
        problems = [
            Finding("error", fn.name, line) for fn in functions for line in region_problems(fn, region)
        ]
        results.append((f"region {region}", problems))
    if redeploys:
        results.append(
            (
                "redeploy (each code folder and parameter changed in turn)",
                check_redeploys(template, overrides),
            )
        )
    return results


def run(args: argparse.Namespace) -> int:
    overrides = dict(args.parameter_overrides)
    print(f"deploy-check {args.template}")
    try:
        region = args.region or region_of(args.template.parent / "samconfig.toml")
        results = check(args.template, overrides, region=region)
    except (ConfigurationError, OSError) as exc:
        print(f"snapllm deploy-check: {exc}", file=sys.stderr)
        return 2
    errors = 0
    for name, findings in results:
        print(f"\n{name}: {len(findings)} findings")
        for finding in findings:
            print(f"  {finding}")
        errors += sum(finding.severity == "error" for finding in findings)
    print(f"\ndeploy-check: {'FAILED, ' + str(errors) + ' errors' if errors else 'passed'}")
    return 1 if errors else 0
