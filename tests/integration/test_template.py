"""template.yaml: SAM's own linter, and the SnapStart rules cfn-lint does not check on SAM resources."""

from __future__ import annotations

import os
import subprocess
import tomllib

import pytest

from snapllm_dev import sam
from snapllm_dev.sam import read as load_template
from tests.support.paths import REPO, TEMPLATE

SAM = REPO / ".tools" / "bin" / "sam"


def test_sam_validate_lint_is_clean():
    if not SAM.exists():
        pytest.fail("the SAM CLI is missing: `make tools` installs it (make test does)")
    run = subprocess.run(
        [str(SAM), "validate", "--lint", "--template", str(TEMPLATE)],
        cwd=REPO,
        env={**os.environ, "SAM_CLI_TELEMETRY": "0"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "is a valid SAM Template" in run.stdout + run.stderr
    assert "[W" not in run.stdout + run.stderr


def test_inference_function_meets_snapstart_rules():
    template = load_template(TEMPLATE)
    props = template["Resources"]["InferenceFunction"]["Properties"]
    assert props["SnapStart"] == {"ApplyOn": "PublishedVersions"}
    assert props["AutoPublishAlias"]
    assert props["EphemeralStorage"] == {"Size": 512}
    assert "FileSystemConfigs" not in props and "ProvisionedConcurrencyConfig" not in props
    assert template["Parameters"]["Architecture"]["Default"] == "arm64"
    spec = sam.load(TEMPLATE).function("InferenceFunction")
    assert spec.runtime == "python3.13" and spec.snapstart
    assert spec.handler_file.is_file()


def test_the_model_policy_reads_only_the_model_object_and_the_declared_prefixes():
    statements = load_template(TEMPLATE)["Resources"]["InferenceFunction"]["Properties"]["Policies"][0][
        "Statement"
    ]
    assert [s["Action"] for s in statements] == ["s3:GetObject"]
    model, prefixes = statements[0]["Resource"]
    assert model["Fn::Sub"][0].endswith("${Bucket}/${ModelKey}")
    # And the declared prompt prefixes' file, only where it is a key in the model bucket.
    condition, declared, otherwise = prefixes["Fn::If"]
    assert condition == "PromptPrefixesInBucket" and otherwise == {"Ref": "AWS::NoValue"}
    assert declared["Fn::Sub"][0].endswith("${Bucket}/${PromptPrefixes}")


@pytest.mark.parametrize(
    ("declared", "in_bucket"),
    [
        ("snapllm:agent", False),  # the default: the prefixes snapllm ships
        ("", False),
        ("/opt/prefixes.json", False),
        ("prefixes/agent.json", True),
        ("prefixes.json", True),
    ],
)
def test_only_a_key_in_the_model_bucket_is_granted_to_read(declared: str, in_bucket: bool):
    template = sam.load(TEMPLATE, overrides={"PromptPrefixes": declared})
    assert template.condition("PromptPrefixesInBucket") is in_bucket


def test_the_inference_functions_declare_the_agents_prompts_by_default():
    template = sam.load(TEMPLATE)
    for name in ("InferenceFunction", "StreamFunction"):
        assert template.function(name).environment["SNAPLLM_PROMPT_PREFIXES"] == "snapllm:agent"


# --- A first `sam deploy --guided` with the defaults on a new account --------------------------------------

#: What a new account's Lambda quota allows per function until it is raised (deploys above it fail with
#: "MemorySize ... less than or equal to 3008").
NEW_ACCOUNT_MAX_MEMORY_MB = 3008


def test_the_defaults_stop_before_anything_is_created_and_name_what_to_set():
    """With no model to load, publishing the SnapStart versions would fail and roll the stack back (leaving
    the bucket it had created): the template's Rules stop such a deploy before it creates anything."""
    ((rule, why),) = sam.load(TEMPLATE).failing_rules()
    assert rule == "ModelNeedsASource"
    assert "ModelSource" in why and "ModelSha256" in why and "ModelBucketName" in why
    source = {"ModelSource": "https://example.com/m.gguf", "ModelSha256": "a" * 64}
    assert sam.load(TEMPLATE, overrides=source).failing_rules() == []
    assert sam.load(TEMPLATE, overrides={"ModelBucketName": "my-models"}).failing_rules() == []
    (_, why) = sam.load(TEMPLATE, overrides={"ModelSource": source["ModelSource"]}).failing_rules()[0]
    assert "ModelSha256" in why


def test_a_bucket_the_stack_creates_goes_with_a_failed_create_and_stays_on_delete():
    bucket = load_template(TEMPLATE)["Resources"]["ModelBucket"]
    assert bucket["DeletionPolicy"] == "RetainExceptOnCreate"
    assert bucket["UpdateReplacePolicy"] == "Retain"


def test_the_defaults_fit_a_new_accounts_memory_quota_and_six_vcpus_is_a_named_environment():
    template = sam.load(TEMPLATE, overrides={"ModelBucketName": "b"})
    assert {
        fn.name: fn.memory_mb for fn in template.functions if fn.memory_mb > NEW_ACCOUNT_MAX_MEMORY_MB
    } == {}
    config = tomllib.loads((REPO / "samconfig.toml").read_text())
    six = config["six-vcpu"]["deploy"]["parameters"]["parameter_overrides"]
    assert "InferenceMemorySize=10240" in six.split()
    assert config["default"]["global"]["parameters"]["region"] == "us-east-2"
