"""`snapllm model push`: the packaged GGUF into a stack's bucket on the local S3 endpoint, then the stack
update that publishes new versions.

The stack is a CloudFormation stack on the same local endpoint (moto). moto cannot run the SAM transform,
so the stack is a plain template with this project's model parameters and ModelBucket output; and its
UpdateStack with UsePreviousTemplate answers a 500, so the update's request and the waiting on its outcome
are checked against botocore's Stubber instead (a mock, for that call only).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import boto3
import pytest
from botocore.stub import Stubber

from snapllm.deploy.upload import MiB, UploadSettings
from snapllm.errors import StackError
from snapllm_dev.local.s3 import LOCAL_CREDENTIALS
from snapllm_dev.model_push.push import CAPABILITIES, DeployedStack, push_model, update_model_digest
from tests.support.paths import REPO

KEY = "models/SmolLM2-135M-Instruct.Q4_1.gguf"
TEMPLATE = {
    "Parameters": {
        "ModelKey": {"Type": "String", "Default": KEY},
        "ModelSha256": {"Type": "String", "Default": ""},
        "ModelSource": {"Type": "String", "Default": "https://example.com/old.gguf"},
        "Architecture": {"Type": "String", "Default": "arm64"},
    },
    "Resources": {"ModelBucket": {"Type": "AWS::S3::Bucket"}},
    "Outputs": {"ModelBucket": {"Value": {"Ref": "ModelBucket"}}},
}


@pytest.fixture(scope="module")
def cloudformation(local_s3):
    client = boto3.client(
        "cloudformation",
        endpoint_url=local_s3.endpoint_url,
        region_name=LOCAL_CREDENTIALS["AWS_DEFAULT_REGION"],
        aws_access_key_id=LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=LOCAL_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    )
    client.create_stack(StackName="snapllm-push", TemplateBody=json.dumps(TEMPLATE))
    client.create_stack(
        StackName="not-snapllm", TemplateBody=json.dumps({"Resources": TEMPLATE["Resources"]})
    )
    return client


def test_push_uploads_the_file_with_its_digest_and_not_twice(cloudformation, local_s3, model_path):
    s3 = local_s3.client()
    stack = DeployedStack.read(cloudformation, "snapllm-push")
    assert stack.key == KEY and stack.bucket.startswith("snapllm-push-modelbucket")
    digest = hashlib.sha256(model_path.read_bytes()).hexdigest()
    reports = []

    pushed = push_model(
        model_path,
        stack,
        s3,
        settings=UploadSettings(part_size=16 * MiB),
        progress=lambda done, size: reports.append((done, size)),
    )
    assert pushed.uploaded and pushed.sha256 == digest and pushed.key == KEY
    stored = s3.get_object(Bucket=stack.bucket, Key=KEY)
    assert stored["Metadata"] == {"sha256": digest}
    assert hashlib.sha256(stored["Body"].read()).hexdigest() == digest
    assert reports[-1] == (model_path.stat().st_size, model_path.stat().st_size) and len(reports) >= 6

    again = push_model(model_path, stack, s3)
    assert not again.uploaded and again.sha256 == digest


def test_a_stack_that_is_missing_or_not_from_this_template_is_named(cloudformation):
    with pytest.raises(StackError, match="no ModelBucket output or no ModelKey parameter"):
        DeployedStack.read(cloudformation, "not-snapllm")
    with pytest.raises(StackError, match="cannot read the stack 'nowhere'"):
        DeployedStack.read(cloudformation, "nowhere")


STACK = DeployedStack(
    "snapllm", "bucket", KEY, "", ("ModelKey", "ModelSha256", "ModelSource", "Architecture")
)
NEW = "ab" * 32


def _stubbed():
    client = boto3.client(
        "cloudformation", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    return client, Stubber(client)


def _described(status: str, reason: str = "") -> dict:
    stack = {"StackName": "snapllm", "CreationTime": "2026-11-24T00:00:00Z", "StackStatus": status}
    return {"Stacks": [{**stack, **({"StackStatusReason": reason} if reason else {})}]}


def test_the_update_changes_the_model_parameters_only_and_waits_for_the_outcome():
    client, stub = _stubbed()
    stub.add_response(
        "update_stack",
        {"StackId": "arn:aws:cloudformation:us-east-1:1:stack/snapllm/1"},
        {
            "StackName": "snapllm",
            "UsePreviousTemplate": True,
            "Capabilities": list(CAPABILITIES),
            "Parameters": [
                {"ParameterKey": "ModelKey", "ParameterValue": KEY},
                {"ParameterKey": "ModelSha256", "ParameterValue": NEW},
                {"ParameterKey": "ModelSource", "ParameterValue": ""},
                {"ParameterKey": "Architecture", "UsePreviousValue": True},
            ],
        },
    )
    stub.add_response("describe_stacks", _described("UPDATE_IN_PROGRESS"), {"StackName": "snapllm"})
    stub.add_response("describe_stacks", _described("UPDATE_COMPLETE"), {"StackName": "snapllm"})
    stub.add_response("describe_stacks", _described("UPDATE_COMPLETE"), {"StackName": "snapllm"})
    with stub:
        assert update_model_digest(client, STACK, NEW, poll_s=0) == "UPDATE_COMPLETE"
        stub.assert_no_pending_responses()


def test_an_update_with_nothing_to_change_is_not_an_error():
    client, stub = _stubbed()
    stub.add_client_error("update_stack", "ValidationError", "No updates are to be performed.")
    with stub:
        assert update_model_digest(client, STACK, NEW) == "UNCHANGED"


def test_a_rolled_back_update_fails_with_the_stack_reason():
    client, stub = _stubbed()
    stub.add_response("update_stack", {"StackId": "id"})
    reason = "The following resource(s) failed to update: [InferenceFunctionVersion]"
    stub.add_response("describe_stacks", _described("UPDATE_ROLLBACK_COMPLETE", reason))
    stub.add_response("describe_stacks", _described("UPDATE_ROLLBACK_COMPLETE", reason))
    with stub, pytest.raises(StackError, match=r"ended in UPDATE_ROLLBACK_COMPLETE: The following resource"):
        update_model_digest(client, STACK, NEW, poll_s=0)


def test_the_command_uploads_and_reports_without_a_traceback(cloudformation, local_s3, model_path, tmp_path):
    env = {**os.environ, **local_s3.client_environment(), "AWS_ENDPOINT_URL": local_s3.endpoint_url}

    def push(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "snapllm_dev.cli", "model", "push", *args]
        return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)

    run = push(str(model_path), "--stack", "snapllm-push", "--key", "models/pushed.gguf", "--no-update")
    assert run.returncode == 0, run.stderr
    assert "uploaded s3://snapllm-push-modelbucket" in run.stdout and "models/pushed.gguf" in run.stdout
    assert "upload: " in run.stderr and "MiB/s" in run.stderr

    missing = push(str(model_path), "--stack", "nowhere")
    assert missing.returncode == 1 and "cannot read the stack 'nowhere'" in missing.stderr
    assert push(str(tmp_path / "absent.gguf"), "--stack", "x").returncode == 2
    assert push(str(model_path), "--stack", "x", "--part-size-mib", "1").returncode == 2
    assert "Traceback" not in missing.stderr
