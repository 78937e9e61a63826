"""snapllm_dev.sam: one read of a template, resolved as the SAM transform and CloudFormation would resolve it;
snapllm_dev.local.kinds: how each function runs locally, from what the template says about it."""

from __future__ import annotations

from pathlib import Path

import pytest

from snapllm.errors import ConfigurationError
from snapllm_dev import sam
from snapllm_dev.local.environment import function_environment
from snapllm_dev.local.kinds import Kind, kind_of, model_function
from tests.support.paths import TEMPLATE

SMALL = """\
Parameters:
  Stage:
    Type: String
    Default: dev
  Memory:
    Type: Number
    Default: 512
  Arns:
    Type: CommaDelimitedList
    Default: ""
  NoDefault:
    Type: String
Conditions:
  IsProd: !Equals [!Ref Stage, prod]
  NotProd: !Not [!Condition IsProd]
  Both: !And [!Condition NotProd, !Equals [!Join ["", !Ref Arns], ""]]
  Either: !Or [!Condition IsProd, !Condition Both]
Globals:
  Function:
    Runtime: python3.13
    Timeout: 10
    Layers: [arn:aws:lambda:us-east-1:1:layer:global:1]
    Environment:
      Variables:
        FROM_GLOBALS: "yes"
        SHARED: global
Resources:
  Bucket:
    Type: AWS::S3::Bucket
  Worker:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: code/
      Handler: pkg.mod.handler
      MemorySize: !Ref Memory
      Layers: [!Sub "arn:${AWS::Partition}:lambda:${AWS::Region}:1:layer:own:1"]
      Environment:
        Variables:
          SHARED: own
          STAGE: !Sub "${Stage}-${!Literal}"
          MODE: !If [IsProd, fast, !If [Either, careful, never]]
          BUCKET: !Ref Bucket
          ARN: !GetAtt Bucket.Arn
          NAMED: !Sub ["${Name}/x", {Name: !Ref Bucket}]
          MISSING: !Ref NoDefault
          GONE: !If [IsProd, x, !Ref AWS::NoValue]
  ProdOnly:
    Type: AWS::Serverless::Function
    Condition: IsProd
    Properties:
      CodeUri: prod/
      Handler: app.handler
"""


@pytest.fixture
def small(tmp_path: Path) -> Path:
    path = tmp_path / "template.yaml"
    path.write_text(SMALL)
    return path


def test_globals_merge_under_the_function_and_intrinsics_resolve(small):
    template = sam.load(small)
    worker = template.function("Worker")
    assert worker.runtime == "python3.13" and worker.timeout_s == 10 and worker.memory_mb == 512
    assert worker.code_dir == (small.parent / "code").resolve()
    assert worker.module_name == "pkg.mod" and worker.function_name == "handler"
    assert worker.handler_file == worker.code_dir / "pkg" / "mod.py"
    assert worker.layers == (
        "arn:aws:lambda:us-east-1:1:layer:global:1",
        "arn:aws:lambda:us-east-1:1:layer:own:1",
    )
    env = worker.environment
    assert env["FROM_GLOBALS"] == "yes" and env["SHARED"] == "own"
    assert env["STAGE"] == "dev-${Literal}"
    assert env["MODE"] == "careful"
    assert "GONE" not in env
    for name in ("BUCKET", "ARN", "NAMED", "MISSING"):
        assert isinstance(env[name], sam.Unresolved), name
    assert env["NAMED"].references == {"Bucket"}


def test_parameter_overrides_and_conditions(small):
    template = sam.load(small, overrides={"Stage": "prod", "Memory": "1024"})
    assert template.function_names == ["Worker", "ProdOnly"]
    worker = template.function("Worker")
    assert worker.memory_mb == 1024 and worker.environment["MODE"] == "fast"
    assert worker.environment["GONE"] == "x"
    assert template.condition("Either") is True and template.condition("NotProd") is False


def test_pseudo_parameters_can_stay_unresolved(small):
    layers = sam.load(small, pseudo_parameters={}).function("Worker").layers
    assert isinstance(layers[1], sam.Unresolved)
    assert layers[1].expression == {"Fn::Sub": "arn:${AWS::Partition}:lambda:${AWS::Region}:1:layer:own:1"}


def test_an_unknown_function_names_the_ones_there_are(small):
    with pytest.raises(ConfigurationError, match=r"Nope is not a function in .*; functions: Worker$"):
        sam.load(small).function("Nope")


def test_unresolved_variables_need_a_local_value(small, monkeypatch):
    worker = sam.load(small).function("Worker")
    with pytest.raises(ConfigurationError, match="give local values for ARN, BUCKET, MISSING, NAMED"):
        function_environment(worker)
    monkeypatch.setenv("SNAPLLM_SHELL", "shell")
    monkeypatch.setenv("SHARED", "not a SNAPLLM_ or POWERTOOLS_ variable")
    monkeypatch.setenv("POWERTOOLS_LOG_LEVEL", "DEBUG")
    env = function_environment(
        worker,
        local={"BUCKET": "local-bucket", "ARN": "arn:local", "SNAPLLM_SHELL": "local"},
        overrides={"MISSING": "given", "POWERTOOLS_LOG_LEVEL": "WARN"},
        wired=("NAMED",),
    )
    assert env["BUCKET"] == "local-bucket" and env["MISSING"] == "given" and "NAMED" not in env
    assert env["SHARED"] == "own" and env["SNAPLLM_SHELL"] == "shell"
    assert env["POWERTOOLS_LOG_LEVEL"] == "WARN"


def test_the_repository_template_functions_by_kind():
    template = sam.load(TEMPLATE)
    kinds = {fn.name: kind_of(template, fn) for fn in template.functions}
    assert kinds == {
        "InferenceFunction": Kind.DIRECT,
        "AgentFunction": Kind.DURABLE,
        "RouterFunction": Kind.HTTP_API,
        "StreamFunction": Kind.WEB_ADAPTER,
        # The custom resource CloudFormation invokes during a deploy (the version digests).
        "VersionDigestFunction": Kind.DIRECT,
        # API Gateway's Lambda authorizer (ApiAuth=KEY): invoked with authorizer events, not HTTP API ones.
        "AuthorizerFunction": Kind.DIRECT,
    }
    assert model_function(template).name == "InferenceFunction"
    router = template.function("RouterFunction").environment
    assert router["SNAPLLM_ROUTES"].references == {"ModelName", "InferenceFunction"}
    assert template.function("AgentFunction").durable == {
        "ExecutionTimeout": 2592000,
        "RetentionPeriodInDays": 14,
    }


@pytest.mark.parametrize(
    ("architecture", "suffix", "condition"), [("arm64", "Arm64", "IsArm64"), ("x86_64", "X86", "IsX86")]
)
def test_every_function_takes_the_layers_built_for_its_architecture(architecture, suffix, condition):
    # SAM gives a makefile build no architecture: each layer resource names its own, and a function picks its
    # pair by the Architecture parameter; only that pair exists in the stack.
    template = sam.load(TEMPLATE, overrides={"Architecture": architecture})
    layers = dict(template.resources(*sam.LAYER_TYPES))
    for name in (f"SnapllmLayer{suffix}", f"LlamaCppLayer{suffix}"):
        layer = layers[name]
        assert layer["Condition"] == condition and template.condition(condition) is True
        assert layer["Properties"]["CompatibleArchitectures"] == [architecture]
        assert layer["Metadata"] == {"BuildMethod": "makefile", "BuildArchitecture": architecture}
    for fn in template.functions:
        assert fn.architecture == architecture
        local = {ref for entry in fn.layers for ref in sam.references(entry) if ref in layers}
        assert local <= {f"SnapllmLayer{suffix}", f"LlamaCppLayer{suffix}"}, fn.name
        assert f"SnapllmLayer{suffix}" in local, fn.name
