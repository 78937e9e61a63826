"""`snapllm deploy-check` on template.yaml and on copies of it with one deliberate fault each: the transform
is SAM's own translator (offline), the calls are read from the functions' real source."""

from __future__ import annotations

from pathlib import Path

import pytest

from snapllm_dev import sam
from snapllm_dev.deploycheck.calls import AwsCall, aws_calls
from snapllm_dev.deploycheck.cli import check
from snapllm_dev.deploycheck.redeploy import check_redeploys
from snapllm_dev.deploycheck.transform import transformed
from tests.support.paths import REPO, TEMPLATE

MODEL_DIGEST_FROM_THE_COPY = (
    "SNAPLLM_MODEL_SHA256: !If [HasModelSource, !GetAtt ModelObject.Sha256, !Ref ModelSha256]"
)

READ_THE_MODEL = (
    "            - Sid: ReadTheModelObjectOnly\n              Effect: Allow\n              Action: "
)


def errors(template: Path, overrides: dict[str, str] | None = None, *, redeploys: bool = False) -> list[str]:
    """The errors of ``snapllm deploy-check`` (the redeploy check, slower, only when asked)."""
    results = check(template, overrides or {}, redeploys=redeploys)
    return [str(f) for _, findings in results for f in findings if f.severity == "error"]


def redeploy_errors(template: Path) -> list[str]:
    return [str(f) for f in check_redeploys(template, {"Architecture": "arm64"}) if f.severity == "error"]


def variant(tmp_path: Path, old: str, new: str, *, count: int = 1) -> Path:
    """template.yaml with ``old`` replaced, beside links to the code folders it names."""
    text = TEMPLATE.read_text()
    assert text.count(old) == count, f"template.yaml no longer has {old!r} {count} time(s)"
    for folder in ("functions", "layers"):
        (tmp_path / folder).symlink_to(REPO / folder)
    path = tmp_path / "template.yaml"
    path.write_text(text.replace(old, new))
    return path


#: The stack with every function it can have: the embedding model's too.
WITH_AN_EMBEDDING_MODEL = {"EmbeddingModelKey": "models/e5.gguf", "EmbeddingModelName": "e5"}


def test_the_template_passes():
    # The redeploy check with the embedding model on covers every function's digest (the default stack is
    # the same without EmbeddingFunction); the scenarios include the default's own.
    assert errors(TEMPLATE, WITH_AN_EMBEDDING_MODEL, redeploys=True) == []
    assert errors(TEMPLATE) == []


def test_an_embedding_model_whose_digest_misses_its_pooling_fails_by_name(tmp_path):
    template = variant(
        tmp_path,
        "            SNAPLLM_EMBEDDING_POOLING: !Ref EmbeddingPooling\n            SNAPLLM_THREADS",
        "            SNAPLLM_THREADS",
    )
    found = [str(f) for f in check_redeploys(template, WITH_AN_EMBEDDING_MODEL) if f.severity == "error"]
    assert found == [
        next(e for e in found if e.startswith("ERROR EmbeddingFunction: a new value of EmbeddingPooling "))
    ], found


# The description template.yaml's SnapStart versions had before VersionDigests: only ModelSha256 reached it.
OLD_DESCRIPTION = '!If [HasModelSha256, !Sub "model sha256 ${ModelSha256}", "model sha256 from its metadata"]'


def test_the_old_version_description_fails_for_a_layer_change_and_each_parameter(tmp_path):
    template = variant(
        tmp_path,
        'VersionDescription: !Sub "config sha256 ${VersionDigests.InferenceFunction}"',
        f"VersionDescription: {OLD_DESCRIPTION}",
    )
    found = redeploy_errors(template)
    stays = "changes what it runs but publishes no new version: InferenceFunctionVersion"
    assert any(
        e.startswith("ERROR InferenceFunction: a one-line change to src/snapllm/__init__.py") and stays in e
        for e in found
    ), found
    assert any(e.startswith("ERROR InferenceFunction: a one-line change to layers/llama-cpp/") for e in found)
    for parameter in ("Architecture", "InferenceMemorySize", "InferenceTimeout", "ContextSize", "MaxTokens"):
        assert any(e.startswith(f"ERROR InferenceFunction: a new value of {parameter} ") for e in found), (
            parameter,
            found,
        )
    # The other functions kept their digests: nothing reported about them.
    assert all(e.startswith("ERROR InferenceFunction:") for e in found), found


def test_a_layer_the_digest_leaves_out_publishes_no_new_version_and_fails_by_name(tmp_path):
    text = TEMPLATE.read_text()
    start = text.index("      RouterFunction:\n        Architecture: !Ref Architecture")
    layer = "          - !If [IsArm64, !Ref SnapllmLayerArm64, !Ref SnapllmLayerX86]\n"
    position = text.index(layer, start)
    template = tmp_path / "template.yaml"
    for folder in ("functions", "layers"):
        (tmp_path / folder).symlink_to(REPO / folder)
    template.write_text(
        text[:position] + "          - leaves-out-the-layer\n" + text[position + len(layer) :]
    )
    found = redeploy_errors(template)
    assert found == [
        "ERROR RouterFunction: a one-line change to src/snapllm/__init__.py changes what it runs but "
        f"publishes no new version: {_version_id(template, 'RouterFunction')} stays, so its alias keeps "
        "serving the old one"
    ], found


def test_a_digest_of_what_a_function_does_not_run_fails_by_name(tmp_path):
    template = variant(
        tmp_path,
        "        Environment:\n          SNAPLLM_MODEL_NAME: !Ref ModelName\n          SNAPLLM_EXTRA_ROUTES:",
        "        Environment:\n          UNUSED: !Ref ModelSha256\n"
        "          SNAPLLM_MODEL_NAME: !Ref ModelName\n          SNAPLLM_EXTRA_ROUTES:",
    )
    found = redeploy_errors(template)
    assert len(found) == 1 and found[0].startswith(
        "ERROR RouterFunction: a new value of ModelSha256 ('ffff"
    ), found
    assert found[0].endswith("though nothing it runs changed")


def _version_id(template: Path, function: str) -> str:
    document = transformed(template, {"Architecture": "arm64"})
    return next(name for name in document["Resources"] if name.startswith(f"{function}Version"))


def test_each_function_calls_what_its_code_calls():
    template = sam.load(TEMPLATE)
    actions = {fn.name: {call.action for call in aws_calls(fn)} for fn in template.functions}
    assert actions["InferenceFunction"] == {"s3:GetObject"}
    # Read from app.py (its handler is run.sh): the model, and the API keys' records (ApiAuth=KEY).
    assert actions["StreamFunction"] == {"s3:GetObject", "ssm:GetParameter"}
    assert actions["AuthorizerFunction"] == {"ssm:GetParameter"}
    assert "ssm:GetParameter" not in actions["RouterFunction"]  # it reads the authorizer's verdict
    assert {"s3:GetObject", "s3:PutObject", "lambda:InvokeFunction"} <= actions["AgentFunction"]
    assert "lambda:CheckpointDurableExecution" in actions["AgentFunction"]  # the durable SDK's
    # MCP servers: the key of one with bearer auth; a gateway with iam auth, called with signed requests.
    assert {"secretsmanager:GetSecretValue", "bedrock-agentcore:InvokeGateway"} <= actions["AgentFunction"]
    assert "lambda:SendDurableExecutionCallbackSuccess" in actions["RouterFunction"]


def test_a_snapstart_version_that_does_not_wait_for_the_model_fails_by_name(tmp_path):
    template = variant(
        tmp_path, MODEL_DIGEST_FROM_THE_COPY, "SNAPLLM_MODEL_SHA256: !Ref ModelSha256", count=4
    )
    found = errors(template)
    assert any(
        e.startswith("ERROR InferenceFunctionVersion")
        and "the SnapStart version of InferenceFunction does not wait for ModelObject" in e
        for e in found
    ), found
    assert any("SnapStart version of StreamFunction does not wait for ModelObject" in e for e in found)


def test_a_role_missing_an_action_the_code_uses_fails_by_name(tmp_path):
    template = variant(
        tmp_path,
        "                - s3:GetObject\n                - s3:PutObject\n              Resource: !Sub\n"
        '                - "arn:${AWS::Partition}:s3:::${Bucket}/${AgentArtifactsPrefix}*"',
        "                - s3:GetObject\n              Resource: !Sub\n"
        '                - "arn:${AWS::Partition}:s3:::${Bucket}/${AgentArtifactsPrefix}*"',
    )
    assert (
        "ERROR AgentFunction: its code calls s3 PutObject (snapllm.agent.artifacts), but its role does not "
        "allow s3:PutObject"
    ) in errors(template)


def test_the_agent_may_read_the_mcp_keys_named_and_needs_the_statement(tmp_path):
    key = "arn:aws:secretsmanager:us-east-1:123456789012:secret:mcp-docs-key-AbCdEf"
    found = [
        str(f) for _, fs in check(TEMPLATE, {"AgentMcpSecretArns": key}) for f in fs if f.severity == "error"
    ]
    assert found == []
    template = variant(
        tmp_path, "            - Sid: ReadTheMcpKeysOnly\n", "            - Sid: ReadTheMcpKeysOnlyX\n"
    )
    assert errors(template) == []  # the Sid is a name only
    text = template.read_text()
    start = text.index("            - Sid: ReadTheMcpKeysOnlyX")
    end = text.index("snapllm-no-mcp-key", start)
    end = text.index("\n", end) + 1
    template.write_text(text[:start] + text[end:])
    assert (
        "ERROR AgentFunction: its code calls secretsmanager GetSecretValue (snapllm.aws_auth), but its role "
        "does not allow secretsmanager:GetSecretValue"
    ) in errors(template)


def test_a_role_that_allows_more_than_the_code_calls_fails_by_name(tmp_path):
    template = variant(
        tmp_path,
        READ_THE_MODEL + "s3:GetObject",
        READ_THE_MODEL + "[s3:GetObject, s3:DeleteObject]",
        count=2,
    )
    assert "ERROR InferenceFunction: its role allows s3:DeleteObject, which its code never calls" in errors(
        template
    )


def test_a_variable_the_code_needs_but_the_template_drops_fails_by_name(tmp_path):
    template = variant(
        tmp_path,
        "          SNAPLLM_AGENT_INFERENCE_FUNCTION:",
        "          SNAPLLM_AGENT_INFERENCE_FUNCTION_X:",
    )
    found = errors(template)
    assert (
        "ERROR AgentFunction: needs SNAPLLM_AGENT_INFERENCE_FUNCTION, which the template does not set"
        in found
    )
    assert "ERROR AgentFunction: sets SNAPLLM_AGENT_INFERENCE_FUNCTION_X, which its code never reads" in found


@pytest.mark.parametrize("call", [AwsCall("lambda", "Invoke", "m"), AwsCall("s3", "HeadObject", "m")])
def test_operations_map_to_the_iam_actions_that_authorize_them(call):
    assert call.action == {"Invoke": "lambda:InvokeFunction", "HeadObject": "s3:GetObject"}[call.operation]


# --- ApiAuth=KEY and CORS ---------------------------------------------------------------------------------

KEY_HASHES = "parameter/snapllm/${AWS::StackName}/api-keys/*"


def test_an_authorizer_that_may_read_more_than_the_key_hashes_fails_by_name(tmp_path):
    template = variant(tmp_path, KEY_HASHES, "parameter/*", count=2)
    found = errors(template)
    assert any("AuthorizerFunction: may read SSM parameters" in e and "parameter/*" in e for e in found)
    assert any("StreamFunction: may read SSM parameters" in e for e in found)


def test_an_authorizer_whose_cache_outlives_the_stream_functions_fails_by_name(tmp_path):
    template = variant(
        tmp_path,
        "AuthorizerResultTtlInSeconds: !Ref ApiKeyCacheSeconds",
        "AuthorizerResultTtlInSeconds: 3600",
    )
    assert any(
        "StreamFunction: keeps key records 300 s, but API Gateway caches verdicts 3600 s" in e
        for e in errors(template)
    )


def test_a_route_past_the_key_authorizer_fails_by_name(tmp_path):
    template = variant(
        tmp_path,
        "AuthorizationType: !If [UseJwtAuth, JWT, !If [UseKeyAuth, CUSTOM, AWS_IAM]]",
        "AuthorizationType: !If [UseJwtAuth, JWT, AWS_IAM]",
    )
    assert any("HttpApiRoute: does not go through the key authorizer" in e for e in errors(template))


def test_a_public_function_url_whose_app_checks_no_key_fails_by_name(tmp_path):
    path = 'SNAPLLM_API_KEY_PARAMETER_PATH: !If [UseKeyAuth, !Sub "/snapllm/${AWS::StackName}/api-keys/", ""]'
    template = variant(tmp_path, path, 'SNAPLLM_API_KEY_PARAMETER_PATH: ""', count=2)
    assert any("StreamFunctionUrl: is public, but StreamFunction is not given" in e for e in errors(template))
    (other := tmp_path / "public").mkdir()
    public_without_keys = variant(other, "AuthType: !If [UseKeyAuth, NONE, AWS_IAM]", "AuthType: NONE")
    found = [str(f) for _, fs in check(public_without_keys, {"ApiAuth": "IAM"}, redeploys=False) for f in fs]
    assert any("public Function URL (AuthType NONE) without ApiAuth=KEY" in e for e in found)


def test_cors_without_the_openai_sdk_headers_or_a_preflight_route_fails_by_name(tmp_path):
    template = variant(tmp_path, "x-stainless-lang,", "", count=2)
    template.write_text(template.read_text().replace("RouteKey: OPTIONS /{proxy+}", "RouteKey: GET /v1/x"))
    found = [
        str(f)
        for _, fs in check(template, {"CorsAllowedOrigins": "https://app.example"}, redeploys=False)
        for f in fs
    ]
    assert any(
        "HttpApi: CORS does not allow headers the OpenAI JS SDK sends: x-stainless-lang" in e for e in found
    )
    assert any("StreamFunctionUrl: CORS does not allow headers" in e for e in found)
    assert any("HttpApi: CORS preflights (OPTIONS, no key) would meet the authorizer" in e for e in found)
