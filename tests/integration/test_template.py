"""template.yaml: SAM's own linter, and the SnapStart rules cfn-lint does not check on SAM resources."""

from __future__ import annotations

import os
import subprocess

import pytest

from snapllm import sam
from snapllm.sam import read as load_template
from tests.conftest import REPO, TEMPLATE

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
    assert template["Parameters"]["InferenceMemorySize"]["Default"] == 10240
    spec = sam.load(TEMPLATE).function("InferenceFunction")
    assert spec.runtime == "python3.13" and spec.snapstart
    assert spec.handler_file.is_file()


def test_the_model_policy_reads_only_the_model_object():
    statements = load_template(TEMPLATE)["Resources"]["InferenceFunction"]["Properties"]["Policies"][0][
        "Statement"
    ]
    assert [s["Action"] for s in statements] == ["s3:GetObject"]
    resource = statements[0]["Resource"]["Fn::Sub"][0]
    assert resource.endswith("${Bucket}/${ModelKey}")
