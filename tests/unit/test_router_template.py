"""template.yaml: the router, its HTTP API and the streaming function are wired as the code expects."""

from __future__ import annotations

from snapllm.streaming.app import AFTER_RESTORE_PATH, BEFORE_CHECKPOINT_PATH
from snapllm_dev import sam
from snapllm_dev.sam import read as load_template
from tests.support.paths import TEMPLATE


def resources() -> dict:
    return load_template(TEMPLATE)["Resources"]


def test_stream_function_runs_under_lambda_web_adapter_with_snapstart_hooks():
    props = resources()["StreamFunction"]["Properties"]
    env = props["Environment"]["Variables"]
    assert props["Handler"] == "run.sh" and env["AWS_LAMBDA_EXEC_WRAPPER"] == "/opt/bootstrap"
    assert env["AWS_LWA_INVOKE_MODE"] == "response_stream"  # a typo silently means buffered
    assert env["AWS_LWA_SNAPSTART_BEFORE_CHECKPOINT_PATH"] == BEFORE_CHECKPOINT_PATH
    assert env["AWS_LWA_SNAPSTART_AFTER_RESTORE_PATH"] == AFTER_RESTORE_PATH
    assert env["AWS_LWA_READINESS_CHECK_PATH"] == "/health"
    url = props["FunctionUrlConfig"]
    assert url["AuthType"] == {"Fn::If": ["UseKeyAuth", "NONE", "AWS_IAM"]}  # KEY: the app checks keys
    assert url["InvokeMode"] == "RESPONSE_STREAM" and url["Cors"]["Fn::If"][0] == "HasCors"
    assert props["SnapStart"] == {"ApplyOn": "PublishedVersions"} and props["EphemeralStorage"] == {
        "Size": 512
    }
    adapter = props["Layers"][-1]["Fn::Sub"][0]
    assert "753240598075:layer:${Layer}:${LambdaAdapterLayerVersion}" in adapter
    spec = sam.load(TEMPLATE).function("StreamFunction")
    assert (spec.code_dir / "run.sh").stat().st_mode & 0o111, "run.sh must be executable"
    assert (spec.code_dir / "app.py").is_file()


def test_the_stream_function_loads_the_same_model_as_inference():
    stream = resources()["StreamFunction"]["Properties"]["Environment"]["Variables"]
    inference = resources()["InferenceFunction"]["Properties"]["Environment"]["Variables"]
    assert {k: v for k, v in inference.items() if k in stream} == {k: stream[k] for k in inference}


def test_router_may_invoke_only_the_routed_aliases_and_the_agent():
    props = resources()["RouterFunction"]["Properties"]
    # The embedding model's statement exists only with an embedding model (the next test).
    statements = {s["Sid"]: s for s in props["Policies"][0]["Statement"] if "Sid" in s}
    assert set(statements) == {
        "InvokeTheRoutedAliasesOnly",
        "StartAgentRunsAsynchronously",
        "ReadAndApproveAgentRuns",
        "ReadTheEndpointKeyOnly",
        "KeepTheAgentRunRecordsOnly",
        "ListTheAgentRunRecordsOnly",
    }
    # Each run's execution ARN is kept under the agent's prefix: the router reads and writes only there.
    records = statements["KeepTheAgentRunRecordsOnly"]
    assert records["Action"] == ["s3:GetObject", "s3:PutObject"]
    assert records["Resource"]["Fn::Sub"][0].endswith("/${AgentArtifactsPrefix}runs/executions/*")
    listing = statements["ListTheAgentRunRecordsOnly"]
    assert listing["Condition"]["StringLike"]["s3:prefix"] == {
        "Fn::Sub": "${AgentArtifactsPrefix}runs/executions/*"
    }
    # The always-on endpoints' key: the one secret named by EndpointSecretArn, no wildcard.
    key = statements["ReadTheEndpointKeyOnly"]
    assert key["Action"] == "secretsmanager:GetSecretValue"
    assert key["Resource"]["Fn::If"][:2] == ["HasEndpointSecret", {"Ref": "EndpointSecretArn"}]
    assert "*" not in str(key["Resource"])
    routed = statements["InvokeTheRoutedAliasesOnly"]
    assert routed["Action"] == "lambda:InvokeFunction"
    assert "InferenceFunction.Alias" in str(routed["Resource"])
    assert "*" not in str(routed["Resource"])
    assert statements["StartAgentRunsAsynchronously"]["Resource"] == {"Ref": "AgentFunction.Alias"}
    runs = statements["ReadAndApproveAgentRuns"]
    assert all(action.startswith("lambda:") and "DurableExecution" in action for action in runs["Action"])
    # Durable executions live under the agent's versions only.
    assert runs["Resource"] == [
        {"Fn::GetAtt": ["AgentFunction", "Arn"]},
        {"Fn::Sub": "${AgentFunction.Arn}:*"},
    ]
    assert props["Timeout"] < 30, "API Gateway gives the integration 30 s"


def test_http_api_takes_api_keys_unless_iam_or_jwt_is_chosen():
    route = resources()["HttpApiRoute"]["Properties"]
    assert route["AuthorizationType"] == {
        "Fn::If": ["UseJwtAuth", "JWT", {"Fn::If": ["UseKeyAuth", "CUSTOM", "AWS_IAM"]}]
    }
    assert load_template(TEMPLATE)["Parameters"]["ApiAuth"]["Default"] == "KEY"
    integration = resources()["HttpApiIntegration"]["Properties"]
    assert integration["PayloadFormatVersion"] == "2.0" and integration["TimeoutInMillis"] <= 30000


EMBEDDING = {"EmbeddingModelKey": "models/e5-small.gguf", "EmbeddingModelName": "e5-small"}


def test_an_embedding_model_is_a_function_of_its_own_that_the_router_routes_to():
    assert "EmbeddingFunction" not in sam.load(TEMPLATE).function_names
    template = sam.load(TEMPLATE, overrides=EMBEDDING)
    embedding = template.function("EmbeddingFunction")
    inference = template.function("InferenceFunction")
    # The inference function's code and layers, with SnapStart, over the embedding model.
    assert embedding.code_dir == inference.code_dir and embedding.layers == inference.layers
    assert embedding.snapstart and embedding.properties["AutoPublishAlias"] == "live"
    env = embedding.environment
    assert env["SNAPLLM_MODEL_KEY"] == "models/e5-small.gguf" and env["SNAPLLM_MODEL_NAME"] == "e5-small"
    assert (
        env["SNAPLLM_EMBEDDING_POOLING"] == "model"
        and "SNAPLLM_EMBEDDING_POOLING" not in inference.environment
    )
    # It reads its own model object only.
    (statement,) = embedding.properties["Policies"][0]["Statement"]
    assert statement["Action"] == "s3:GetObject"
    assert str(statement["Resource"].partial).endswith("/models/e5-small.gguf")
    # The router routes its name to its alias, and may invoke that alias.
    router = template.function("RouterFunction")
    routes = router.environment["SNAPLLM_ROUTES"]
    assert '"e5-small": ' in routes.partial and '"qwen2.5-coder-0.5b-instruct": ' in routes.partial
    assert routes.expression["Fn::Sub"][1]["EmbeddingAlias"] == {"Ref": "EmbeddingFunction.Alias"}
    statements = {s["Sid"]: s for s in router.properties["Policies"][0]["Statement"]}
    assert statements["InvokeTheEmbeddingModel"]["Resource"].expression == {"Ref": "EmbeddingFunction.Alias"}


def test_an_embedding_model_needs_a_name_of_its_own():
    rules = dict(sam.load(TEMPLATE, overrides={"EmbeddingModelKey": "models/e.gguf"}).failing_rules())
    assert "EmbeddingModelName" in rules["EmbeddingModelNeedsItsOwnName"]
    same = {**EMBEDDING, "EmbeddingModelName": "qwen2.5-coder-0.5b-instruct"}
    rules = dict(sam.load(TEMPLATE, overrides=same).failing_rules())
    assert "differ from ModelName" in rules["EmbeddingModelNeedsItsOwnName"]
    assert "EmbeddingModelNeedsItsOwnName" not in dict(
        sam.load(TEMPLATE, overrides=EMBEDDING).failing_rules()
    )
