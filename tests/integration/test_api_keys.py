"""API keys in SSM Parameter Store (moto's server, over real HTTP): ``snapllm keys create|list|revoke`` and
the check the authorizer and the streaming function make of a key, with the records the CLI wrote."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import boto3
import pytest

from snapllm.api_keys import INCORRECT, ApiKeyVerifier, parameter_path
from snapllm.api_keys.store import ApiKeyEnvironment, SsmKeyStore
from snapllm.authorizer import KeyAuthorizer
from snapllm.errors import InvalidApiKeyError
from snapllm_dev.keys.manage import KeyNotFoundError, StackKeys
from snapllm_dev.local.s3 import LOCAL_CREDENTIALS
from tests.support.paths import REPO

STACK = "snapllm-keys"


@pytest.fixture(scope="module")
def ssm(local_s3):
    """An SSM client of the local moto server (the one endpoint serves every service moto plays)."""
    return boto3.client(
        "ssm",
        endpoint_url=local_s3.endpoint_url,
        region_name=LOCAL_CREDENTIALS["AWS_DEFAULT_REGION"],
        aws_access_key_id=LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=LOCAL_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    )


def verifier(ssm, stack: str = STACK, *, cache_s: float = 0.0) -> ApiKeyVerifier:
    path = parameter_path(stack)
    return ApiKeyVerifier(SsmKeyStore(path, ssm, cache_s=cache_s), realm=path)


def test_a_created_key_verifies_and_only_its_salted_hash_is_stored(ssm):
    keys = StackKeys(STACK, ssm)
    key, record = keys.create()
    assert key.startswith(f"sk-snapllm-{record.key_id}-") and len(key) == 67
    stored = ssm.get_parameter(Name=f"/snapllm/{STACK}/api-keys/{record.key_id}", WithDecryption=True)
    assert stored["Parameter"]["Type"] == "SecureString"
    # The secret is everything after the key's id: its alphabet holds "-" too.
    secret = key.removeprefix(f"sk-snapllm-{record.key_id}-")
    assert len(secret) > 32
    assert key not in stored["Parameter"]["Value"] and secret not in stored["Parameter"]["Value"]
    assert verifier(ssm).verify(f"Bearer {key}") == record
    assert verifier(ssm).verify(f"bearer {key}") == record  # the scheme is case-insensitive (RFC 7235)
    with pytest.raises(InvalidApiKeyError, match=INCORRECT):
        verifier(ssm).verify(f"Bearer {key[:-1]}{'A' if key[-1] != 'A' else 'B'}")


def test_a_key_of_another_stack_is_refused_even_with_its_record_copied(ssm):
    key, record = StackKeys("snapllm-other", ssm).create()
    with pytest.raises(InvalidApiKeyError) as refused:
        verifier(ssm).verify(f"Bearer {key}")
    assert refused.value.status_code == 401 and refused.value.code == "invalid_api_key"
    # The record itself, put under this stack's path: the hash names the other stack's realm.
    copied = ssm.get_parameter(Name=f"/snapllm/snapllm-other/api-keys/{record.key_id}", WithDecryption=True)
    ssm.put_parameter(
        Name=f"/snapllm/{STACK}/api-keys/{record.key_id}",
        Value=copied["Parameter"]["Value"],
        Type="SecureString",
    )
    with pytest.raises(InvalidApiKeyError):
        verifier(ssm).verify(f"Bearer {key}")
    StackKeys(STACK, ssm).revoke(record.key_id)


def test_list_shows_ids_prefixes_and_dates_never_keys_and_revoke_removes(ssm):
    keys = StackKeys("snapllm-listed", ssm)
    made = [keys.create() for _ in range(12)]  # more than one page of GetParametersByPath (10)
    listed = keys.list()
    assert sorted(r.key_id for r in listed) == sorted(record.key_id for _, record in made)
    assert all(r.prefix == f"sk-snapllm-{r.key_id}-..." and r.created.endswith("+00:00") for r in listed)
    first_key, first = made[0]
    assert keys.revoke(first_key) == first.key_id  # by the key itself, or by its id
    assert keys.revoke(made[1][1].key_id) == made[1][1].key_id
    assert len(keys.list()) == 10
    with pytest.raises(InvalidApiKeyError):
        verifier(ssm, "snapllm-listed").verify(f"Bearer {first_key}")
    with pytest.raises(KeyNotFoundError, match="has no key"):
        keys.revoke(first.key_id)
    with pytest.raises(KeyNotFoundError, match="not a key id"):
        keys.revoke("../other-stack/x")


def test_a_revoked_key_works_until_its_cached_record_expires(ssm):
    keys = StackKeys(STACK, ssm)
    key, record = keys.create()
    cached = verifier(ssm, cache_s=1.0)
    assert cached.verify(f"Bearer {key}") == record
    keys.revoke(record.key_id)
    assert cached.verify(f"Bearer {key}") == record  # remembered for cache_s
    time.sleep(1.1)
    with pytest.raises(InvalidApiKeyError):
        cached.verify(f"Bearer {key}")


def test_the_authorizer_passes_its_verdict_to_the_router(ssm, monkeypatch):
    key, record = StackKeys(STACK, ssm).create()
    monkeypatch.setenv("SNAPLLM_API_KEY_PARAMETER_PATH", parameter_path(STACK))
    settings = ApiKeyEnvironment.from_env()
    authorizer = KeyAuthorizer(settings.verifier(client=ssm, cache_s=0))

    def verdict(headers: dict[str, str]) -> dict:
        return authorizer.handle({"version": "2.0", "type": "REQUEST", "headers": headers})

    assert verdict({"authorization": f"Bearer {key}"}) == {
        "isAuthorized": True,
        "context": {"snapllm_api_key": "valid", "key_id": record.key_id},
    }
    refused = verdict({"authorization": "Bearer sk-snapllm-000000000000-" + "A" * 43})
    assert refused["context"] == {"snapllm_api_key": "invalid", "message": INCORRECT}
    # API Gateway joins a repeated header with commas: no key contains one.
    assert verdict({"authorization": f"Bearer {key},Bearer {key}"})["context"]["snapllm_api_key"] == "invalid"


def test_the_command_shows_a_key_once_and_never_lists_it(local_s3):
    env = {**os.environ, **LOCAL_CREDENTIALS, "AWS_ENDPOINT_URL": local_s3.endpoint_url}

    def keys(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "snapllm_dev.cli", "keys", *args, "--stack", "snapllm-cli"]
        return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)

    created = keys("create")
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    assert key.startswith("sk-snapllm-") and "shown once" in created.stderr
    assert "keys work once it is deployed with ApiAuth=KEY" in created.stderr  # no such stack here
    listed = keys("list")
    assert listed.returncode == 0 and key not in listed.stdout and key[:23] in listed.stdout
    revoked = keys("revoke", key[11:23])
    assert revoked.returncode == 0 and "stops working within" in revoked.stdout
    again = keys("revoke", key[11:23])
    assert again.returncode == 1 and "has no key" in again.stderr and "Traceback" not in again.stderr
    assert key[:23] not in keys("list").stdout
