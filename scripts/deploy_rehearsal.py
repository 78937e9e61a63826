"""A deploy rehearsal with SAM's own deploy code: the real `sam deploy` against a local CloudFormation and S3.

    .venv/bin/python scripts/deploy_rehearsal.py [BUILD_DIR]      # make deploy-rehearsal (after make build)

moto's server (CloudFormation, S3, Lambda, IAM... on 127.0.0.1) receives everything `sam deploy` sends:
the managed artifact bucket's stack (`--resolve-s3`), the uploads of every function and layer, the change
set and its execution. Then a one-line change to snapllm's code in a copy of the build, and a second
`sam deploy`: an update whose layer is new, so every function that runs it must get a new version.

moto does not play everything; what stands in (each printed when it happens):

- the SAM transform (`Transform: AWS::Serverless-2016-10-31`): moto runs no macros. The change set's
  template is translated here with samtranslator, CloudFormation's own SAM translator, with the change
  set's parameters;
- the custom resource `VersionDigests`: moto would invoke its function in a Lambda container (Docker).
  Here its handler (`snapllm.deploy.version_digest`, the function's code) runs in this process and answers
  moto's response URL over HTTP, as it would answer CloudFormation's;
- resource types moto's CloudFormation does not implement are skipped by moto with a warning: among them
  `AWS::Lambda::Alias` (so the `live` alias does not move here), `AWS::Lambda::Url`, the API Gateway v2
  resources, log metric filters, the dashboard and the alarms. The script lists them from the template.
- `Rules` are not evaluated by moto (`snapllm deploy-check` evaluates them), and no function's init runs
  (no SnapStart snapshot, no model load).
- API keys (`ApiAuth=KEY`, the default): moto creates the authorizer function and its role, but skips the
  HTTP API's authorizer, its route and the Function URL with their permissions, so no request reaches the
  authorizer through them (`snapllm deploy-check` proves that wiring). After the first deploy,
  `snapllm keys create` writes a key to moto's Parameter Store, and the authorizer's handler runs here with
  the deployed function's variables, as Lambda would run it with its role: the key is valid, then revoked.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import boto3
from moto import settings as moto_settings
from moto.awslambda.models import LambdaFunction, LayerVersion, get_backend
from moto.cloudformation import models as cfn_models
from moto.cloudformation.custom_model import CustomModel
from moto.cloudformation.parsing import resource_class_from_type
from moto.server import ThreadedMotoServer

from snapllm.api_keys.store import ApiKeyEnvironment
from snapllm.authorizer import KeyAuthorizer
from snapllm.deploy.version_digest import VersionDigestResource
from snapllm_dev import sam
from snapllm_dev.deploycheck.transform import Stack, transformed, translate_document
from snapllm_dev.keys.manage import StackKeys

ROOT = Path(__file__).resolve().parents[1]
#: The stack's templates as the SAM transform made them, one per change set `sam deploy` created.
SUBMITTED: list[dict[str, Any]] = []
SAM = ROOT / ".tools" / "bin" / "sam"
# moto answers a custom resource's response only in its default region (its response handler looks the stack
# up there), so the rehearsal runs in us-east-1; the region check is `snapllm deploy-check`'s.
REGION = "us-east-1"
STACK = "snapllm-rehearsal"
MODEL_BUCKET = "snapllm-rehearsal-models"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _play_the_sam_transform() -> None:
    """moto runs no macros: translate a template that declares the SAM transform, as CloudFormation would."""
    original = cfn_models.ChangeSet._parse_template

    def parse(self: Any) -> None:
        original(self)
        if "Transform" in (self.template_dict or {}):
            print(f"  stand-in: SAM transform of the change set {self.change_set_name} (samtranslator)")
            parameters = dict(self.parameters or {})
            document = _existing(translate_document(self.template, parameters, REGION), parameters)
            self.template_dict = _without_what_reads_skipped_resources(_alias_arns(document))
            if "VersionDigests" in document["Resources"]:
                SUBMITTED.append(document)

    cfn_models.ChangeSet._parse_template = parse  # type: ignore[method-assign]

    original_apply = cfn_models.ChangeSet.apply

    def apply(self: Any) -> None:
        # moto builds a stack's outputs when the stack is created, from the template it had then (none for
        # a stack created by a change set): rebuild them from the template the change set applied.
        try:
            original_apply(self)
        except Exception:
            traceback.print_exc()  # moto's server would answer a bare 500; this says what failed in moto
            raise
        self.stack.template_dict = self.template_dict
        self.stack.output_map = self.stack._create_output_map()

    cfn_models.ChangeSet.apply = apply  # type: ignore[method-assign]


def _without_what_reads_skipped_resources(document: dict[str, Any]) -> dict[str, Any]:
    """moto cannot read an attribute (GetAtt) of a resource it skips: the resources and outputs that read
    one are left out here (and named); a Ref to a skipped resource resolves to its logical ID in moto."""
    resources = dict(document.get("Resources") or {})
    outputs = dict(document.get("Outputs") or {})
    gone = {name for name, r in resources.items() if not resource_class_from_type(r["Type"])}
    dropped: list[str] = []
    while True:
        readers = [
            name
            for name, r in resources.items()
            if name not in gone
            and (_reads(r) | (sam.references(r) if r["Type"] == "AWS::Lambda::Permission" else set())) & gone
        ]
        if not readers:
            break
        gone.update(readers)
        dropped += readers
    left_out = sorted(
        name for name, output in outputs.items() if (_reads(output) | sam.references(output)) & gone
    )
    if dropped or left_out:
        print("  stand-in: left out, they read a skipped resource: " + ", ".join(sorted(dropped) + left_out))
    return {
        **document,
        "Resources": {k: v for k, v in resources.items() if k not in dropped},
        "Outputs": {k: v for k, v in outputs.items() if k not in left_out},
    }


def _existing(document: dict[str, Any], parameters: dict[str, str]) -> dict[str, Any]:
    """Only the resources whose Condition holds under ``parameters`` (moto's updates do not check them)."""
    stack = Stack.of(document, parameters, path=Path("template.yaml"))
    resources = {k: v for k, v in document["Resources"].items() if k in stack.resources}
    return {**document, "Resources": resources}


def _alias_arns(document: dict[str, Any]) -> dict[str, Any]:
    """moto has no AWS::Lambda::Alias: a Ref to one becomes the ARN the alias would have (function ARN and
    alias name); what must act on the alias itself (a permission) is left out with the other skipped."""
    aliases = {
        name: (r["Properties"]["FunctionName"]["Ref"], r["Properties"]["Name"])
        for name, r in document["Resources"].items()
        if r["Type"] == "AWS::Lambda::Alias"
    }

    def swap(value: Any, *, within: str) -> Any:
        if isinstance(value, dict):
            if set(value) == {"Ref"} and value["Ref"] in aliases and within != "AWS::Lambda::Permission":
                function, alias = aliases[value["Ref"]]
                return {"Fn::Join": [":", [{"Fn::GetAtt": [function, "Arn"]}, alias]]}
            return {k: swap(v, within=within) for k, v in value.items()}
        if isinstance(value, list):
            return [swap(v, within=within) for v in value]
        return value

    resources = {name: swap(r, within=r["Type"]) for name, r in document["Resources"].items()}
    return {**document, "Resources": resources}


def _reads(value: Any) -> set[str]:
    """The resources whose attributes ``value`` reads (Fn::GetAtt, or ${X.Attr} in Fn::Sub)."""
    text = json.dumps(value, default=str)
    return set(re.findall(r'"Fn::GetAtt": \["(\w+)"', text)) | set(re.findall(r"\$\{(\w+)\.\w+\}", text))


def _play_the_digest_function() -> None:
    """moto would run the custom resource's function in Docker: run its handler here instead."""
    original = LambdaFunction.invoke

    def invoke(self: LambdaFunction, body: str, request_headers: Any, response_headers: Any) -> Any:
        if "VersionDigestFunction" not in self.function_name:
            return original(self, body, request_headers, response_headers)
        event = json.loads(body)
        answer = VersionDigestResource(send=_answer_moto).handle(event)
        print(f"  stand-in: VersionDigestFunction answered {answer['Status']} to moto's response URL")
        return json.dumps(answer)

    LambdaFunction.invoke = invoke  # type: ignore[method-assign]

    # moto's function update looks every layer up in moto itself: the web adapter's public layer (another
    # account's) is not there. Lambda resolves it; here an unknown layer is taken as given.
    def layers_data(self: LambdaFunction, arns: list[str]) -> list[dict[str, Any]]:
        backend = get_backend(self.account_id, self.region)
        found = [(arn, backend.layers_versions_by_arn(arn)) for arn in arns]
        return [{"Arn": arn, "CodeSize": version.code_size if version else 0} for arn, version in found]

    LambdaFunction._get_layers_data = layers_data  # type: ignore[method-assign,assignment]

    # moto answers a Ref to a layer version with its model object; CloudFormation answers its ARN.
    LayerVersion.physical_resource_id = property(lambda self: self.arn)  # type: ignore[attr-defined]

    # moto invokes a custom resource's function in the background and goes on creating the resources that
    # read its attributes; CloudFormation waits for the response first, and so does this stand-in.
    original_create = CustomModel.create_from_cloudformation_json.__func__

    def create(
        cls: Any, resource_name: str, cloudformation_json: dict[str, Any], *args: Any, **kwargs: Any
    ) -> Any:
        # moto resolves a Ref to a layer version to its model object; CloudFormation gives its ARN.
        cloudformation_json["Properties"] = _arns(cloudformation_json["Properties"])
        resource = original_create(cls, resource_name, cloudformation_json, *args, **kwargs)
        deadline = time.monotonic() + 60
        while not resource.is_created() and time.monotonic() < deadline:
            time.sleep(0.05)
        return resource

    CustomModel.create_from_cloudformation_json = classmethod(create)  # type: ignore[method-assign,assignment]
    # moto sends custom resources a response URL on a Docker host name; here the server is on 127.0.0.1.
    moto_settings.moto_server_host = lambda: "http://127.0.0.1"  # type: ignore[assignment]


def _arns(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _arns(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_arns(item) for item in value]
    if isinstance(value, LayerVersion):
        return value.arn
    return value


def _answer_moto(url: str, body: dict[str, Any], *, deadline: float | None = None) -> None:
    """PUT the response as JSON: moto reads a response body only with a JSON content type (CloudFormation's
    pre-signed URL wants none, which is what the function itself sends)."""
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="PUT", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


def _sam_deploy(build_dir: Path, endpoint: str, *, parameters: dict[str, str]) -> None:
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "rehearsal",
        "AWS_SECRET_ACCESS_KEY": "rehearsal",
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        "SAM_CLI_TELEMETRY": "0",
    }
    command = [
        str(SAM),
        "deploy",
        "--template-file",
        str(build_dir / "template.yaml"),
        "--stack-name",
        STACK,
        "--region",
        REGION,
        "--resolve-s3",
        "--s3-prefix",
        STACK,
        "--capabilities",
        "CAPABILITY_IAM",
        "--no-confirm-changeset",
        "--no-fail-on-empty-changeset",
        "--parameter-overrides",
        *(f"{k}={v}" for k, v in parameters.items()),
    ]
    print("$ " + " ".join(command[:2]) + " ...")
    result = subprocess.run(command, env=env, text=True, capture_output=True, timeout=1800, check=False)
    tail = (result.stdout + result.stderr).strip().splitlines()[-25:]
    print("\n".join("    " + line for line in tail))
    if result.returncode != 0:
        raise SystemExit(f"sam deploy failed ({result.returncode})")


def _snapllm_init(build_dir: Path) -> Path:
    """snapllm's __init__.py inside the arm64 snapllm layer's folder (`python/snapllm/` once built)."""
    layer = sam.read(build_dir / "template.yaml")["Resources"]["SnapllmLayerArm64"]["Properties"][
        "ContentUri"
    ]
    return next(
        path for path in sorted((build_dir / layer).rglob("__init__.py")) if path.parent.name == "snapllm"
    )


def _versions(endpoint: str) -> dict[str, list[str]]:
    client = boto3.client("lambda", endpoint_url=endpoint, region_name=REGION)
    found = {}
    for function in client.list_functions()["Functions"]:
        name = function["FunctionName"]
        versions = client.list_versions_by_function(FunctionName=name)["Versions"]
        found[name] = [v["Version"] for v in versions if v["Version"] != "$LATEST"]
    return found


def _check_api_keys(endpoint: str) -> int:
    """The deployed authorizer's variables and role, and its handler on a key made with `snapllm keys`."""
    lam = boto3.client("lambda", endpoint_url=endpoint, region_name=REGION)
    iam = boto3.client("iam", endpoint_url=endpoint, region_name=REGION)
    ssm = boto3.client("ssm", endpoint_url=endpoint, region_name=REGION)
    [function] = [f for f in lam.list_functions()["Functions"] if "AuthorizerFunction" in f["FunctionName"]]
    variables = function["Environment"]["Variables"]
    path = f"/snapllm/{STACK}/api-keys/"
    role = function["Role"].rsplit("/", 1)[1]
    statements = []
    for name in iam.list_role_policies(RoleName=role)["PolicyNames"]:
        document = iam.get_role_policy(RoleName=role, PolicyName=name)["PolicyDocument"]
        # boto3 decodes IAM's URL-encoded document; moto's comes back as the text of a Python dict.
        document = ast.literal_eval(urllib.parse.unquote(document)) if isinstance(document, str) else document
        statements += document["Statement"]
    print(f"   AuthorizerFunction: {variables}; its role allows " + json.dumps(statements))
    problems = []
    if variables.get("SNAPLLM_API_KEY_PARAMETER_PATH") != path:
        problems.append(f"the authorizer reads keys from {variables.get('SNAPLLM_API_KEY_PARAMETER_PATH')!r}")
    if [(s["Action"], s["Resource"]) for s in statements] != [
        ("ssm:GetParameter", f"arn:aws:ssm:{REGION}:123456789012:parameter{path}*")
    ]:
        problems.append("the authorizer's role allows more (or other) than reading the key hashes")
    print("  stand-in: AuthorizerFunction's handler runs here with its deployed variables (no Docker)")
    authorizer = KeyAuthorizer(ApiKeyEnvironment.from_env(variables).verifier(client=ssm, cache_s=0))
    keys = StackKeys(STACK, ssm)
    key, record = keys.create()
    verdicts = [authorizer.handle({"headers": {"authorization": f"Bearer {key}"}})["context"]]
    keys.revoke(record.key_id)
    verdicts.append(authorizer.handle({"headers": {"authorization": f"Bearer {key}"}})["context"])
    print(f"   a key from `snapllm keys create`: {verdicts[0]}; revoked: {verdicts[1]}")
    if [v["snapllm_api_key"] for v in verdicts] != ["valid", "invalid"]:
        problems.append("the authorizer did not accept the created key, then refuse it revoked")
    for problem in problems:
        print(f"FAILED: {problem}")
    return 1 if problems else 0


def _report(first: dict[str, list[str]], second: dict[str, list[str]]) -> int:
    """What the update changed: new versions where moto publishes them, and each function's digest input.

    moto implements no update of a custom resource or of an AWS::Lambda::Version (a changed property is
    ignored, where CloudFormation replaces the version), so the second deploy publishes nothing here. What
    CloudFormation would replace is read from the change set's template: a function whose VersionDigests
    entry changed gets a new digest, so a new version description, so a new version.
    """
    before, after = (doc["Resources"]["VersionDigests"]["Properties"] for doc in SUBMITTED[-2:])
    functions = sorted(k for k in after if k not in ("ServiceToken", "ServiceTimeout"))
    changed = [
        name
        for name in functions
        if json.dumps(before.get(name), sort_keys=True) != json.dumps(after[name], sort_keys=True)
    ]
    new = sorted(name for name, versions in second.items() if versions != first.get(name))
    print(f"   moto published new versions of: {', '.join(new) or 'none (moto does not replace versions)'}")
    print(f"   the update's VersionDigests input changed for: {', '.join(changed)}")
    if changed != functions:
        print(
            "FAILED: a function's version would not be replaced: "
            + ", ".join(sorted(set(functions) - set(changed)))
        )
        return 1
    print(
        "deploy rehearsal: both deploys went through sam deploy; CloudFormation would publish a new version "
        "of every function"
    )
    return 0


def main(argv: list[str]) -> int:
    build_dir = Path(argv[0]) if argv else ROOT / ".aws-sam" / "build"
    if not (build_dir / "template.yaml").is_file() or not SAM.exists():
        print("deploy rehearsal: run `make build` (and `make tools`) first", file=sys.stderr)
        return 2
    port = _free_port()
    # moto takes any credentials; none of the caller's are used (or needed).
    os.environ.update(
        MOTO_PORT=str(port),
        AWS_ACCESS_KEY_ID="rehearsal",
        AWS_SECRET_ACCESS_KEY="rehearsal",
        AWS_REGION=REGION,
    )
    os.environ.pop("AWS_PROFILE", None)
    _play_the_sam_transform()
    _play_the_digest_function()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    # moto reads a TemplateURL's bucket from its path only when the host is "localhost" (127.0.0.1 here).
    endpoint = f"http://localhost:{port}"
    try:
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name=REGION)
        s3.create_bucket(Bucket=MODEL_BUCKET)
        # With an embedding model, so that every function the template can have is deployed and updated.
        parameters = {
            "Architecture": "arm64",
            "ModelBucketName": MODEL_BUCKET,
            "EmbeddingModelKey": "models/rehearsal-embedding.gguf",
            "EmbeddingModelName": "rehearsal-embedding",
        }
        document = transformed(build_dir / "template.yaml", parameters)
        skipped = sorted(
            {r["Type"] for r in document["Resources"].values() if not resource_class_from_type(r["Type"])}
        )
        print("moto's CloudFormation does not implement (skipped): " + ", ".join(skipped))

        print("\n1. first deploy")
        _sam_deploy(build_dir, endpoint, parameters=parameters)
        first = _versions(endpoint)
        print("   published versions: " + json.dumps(first))
        keys_failed = _check_api_keys(endpoint)

        print("\n2. a one-line change to snapllm's code, then an update deploy")
        with tempfile.TemporaryDirectory(prefix="snapllm-rehearsal-") as scratch:
            changed = Path(scratch) / "build"
            shutil.copytree(build_dir, changed)  # links followed: the copy is changed, never the source
            target = _snapllm_init(changed)
            target.write_text(target.read_text() + "\n# rehearsal: a one-line change\n")
            _sam_deploy(changed, endpoint, parameters=parameters)
        second = _versions(endpoint)
        print("   published versions: " + json.dumps(second))
        return _report(first, second) or keys_failed
    finally:
        server.stop()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
